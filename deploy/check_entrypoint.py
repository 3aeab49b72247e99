"""Exercise the container image's entry point without a Docker engine.

    python deploy/check_entrypoint.py context SRC DEST
        copy the Docker build context of SRC (honouring .dockerignore) to DEST
    python deploy/check_entrypoint.py run --bin-dir VENV/bin [--dockerfile Dockerfile]
        run the Dockerfile's ENTRYPOINT with its ENV from VENV/bin, wait until its HEALTHCHECK
        command passes, ask for one decision, read /metrics, send SIGTERM and expect a clean exit

`run` needs grpcio (it runs under the checked environment's python); `context` needs only the
standard library. deploy/check_entrypoint.sh chains both with a fresh virtual environment.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

GRPC_PORT = 50051
METRICS_PORT = 9464


# -- the Dockerfile ----------------------------------------------------------------------------


@dataclass
class Image:
    """What the last stage of a Dockerfile says about running the image."""

    entrypoint: list[str]
    healthcheck: list[str]
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    exposed: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ))
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def parse_env(arguments: str, env: dict[str, str]) -> None:
    for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', arguments):
        value = value.strip('"')
        value = re.sub(r"\$(\w+)|\$\{(\w+)\}",
                       lambda m: env.get(m[1] or m[2], os.environ.get(m[1] or m[2], "")), value)
        env[key] = value


def parse_dockerfile(path: Path) -> Image:
    entrypoint: list[str] = []
    healthcheck: list[str] = []
    env: dict[str, str] = {}
    user = ""
    exposed: list[str] = []
    for word, arguments in instructions(path.read_text(encoding="utf-8")):
        if word == "FROM":  # only the last stage counts
            entrypoint, healthcheck, env, user, exposed = [], [], {}, "", []
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(arguments)  # exec form only
        elif word == "HEALTHCHECK":
            _, _, command = arguments.partition("CMD ")
            healthcheck = json.loads(command)
        elif word == "ENV":
            parse_env(arguments, env)
        elif word == "USER":
            user = arguments
        elif word == "EXPOSE":
            exposed.extend(arguments.split())
    if not entrypoint or not healthcheck:
        raise SystemExit(f"{path}: needs an exec-form ENTRYPOINT and a HEALTHCHECK CMD")
    return Image(entrypoint, healthcheck, env, user, exposed)


# -- the build context -------------------------------------------------------------------------


def ignored(relative: str, patterns: list[str]) -> bool:
    """Docker-style: a pattern excludes a path or a folder (and so all below it); ! re-includes."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        body = body.strip("/")
        anywhere = body.startswith("**/")
        for prefix in prefixes:
            name = prefix.rsplit("/", 1)[-1]
            if fnmatch.fnmatchcase(prefix, body) or (anywhere and fnmatch.fnmatchcase(
                    name, body[3:])):
                result = not negate
                break
    return result


def copy_context(source: Path, destination: Path) -> int:
    """Copy what `COPY . .` would see; returns the number of files."""
    ignore_file = source / ".dockerignore"
    patterns = [
        line.strip() for line in (
            ignore_file.read_text(encoding="utf-8").splitlines() if ignore_file.exists() else []
        ) if line.strip() and not line.lstrip().startswith("#")
    ]
    count = 0
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if path.is_dir() or ignored(relative, patterns):
            continue
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        count += 1
    return count


# -- running the entry point -------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remap(argv: list[str], ports: dict[int, int]) -> list[str]:
    out = []
    for arg in argv:
        for old, new in ports.items():
            arg = re.sub(rf"(?<![0-9]){old}(?![0-9])", str(new), arg)
        out.append(arg)
    return out


def wait_healthy(command: list[str], env: dict[str, str], proc: subprocess.Popen[str],
                 timeout: float) -> float:
    """Run the HEALTHCHECK command until it exits 0; returns the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"entry point exited early with {proc.returncode}")
        if subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0:
            return time.monotonic() - began
        time.sleep(0.5)
    raise SystemExit(f"HEALTHCHECK did not pass within {timeout} s")


def run(bin_dir: Path, dockerfile: Path, ports_mode: str, timeout: float) -> None:
    image = parse_dockerfile(dockerfile)
    ports = {GRPC_PORT: GRPC_PORT, METRICS_PORT: METRICS_PORT}
    if ports_mode == "remap" or (ports_mode == "auto" and not all(map(port_free, ports))):
        ports = {GRPC_PORT: free_port(), METRICS_PORT: free_port()}
        print(f"ports in use here: remapped {ports}")
    entrypoint = remap(image.entrypoint, ports)
    healthcheck = remap(image.healthcheck, ports)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCDISPATCH_")}
    env.update(image.env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    print("ENTRYPOINT", json.dumps(entrypoint))
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryFile("w+") as logs:
        proc = subprocess.Popen(entrypoint, env=env, cwd=cwd, stdout=logs, stderr=logs,
                                text=True)
        try:
            took = wait_healthy(healthcheck, env, proc, timeout)
            print(f"HEALTHCHECK passed after {took:.1f} s")
            target = f"127.0.0.1:{ports[GRPC_PORT]}"
            decision = subprocess.run(
                [str(bin_dir / "hpcdispatch"), "dispatch", "--target", target],
                env=env, capture_output=True, text=True, timeout=120, check=True,
            )
            starts = len(json.loads(decision.stdout)["starts"])
            print(f"one decision: {starts} jobs start ({decision.stderr.strip()})")
            url = f"http://127.0.0.1:{ports[METRICS_PORT]}/metrics"
            with urllib.request.urlopen(url, timeout=10) as reply:
                metrics = reply.read().decode()
            for needed in ("hpcdispatch_decisions_total{", "grpc_server_handled_total{",
                           'grpc_method="Check"', "hpcdispatch_decision_seconds_bucket{"):
                if needed not in metrics:
                    raise SystemExit(f"/metrics lacks {needed}")
            print(f"/metrics: {len(metrics.splitlines())} lines")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise SystemExit("no exit within 60 s of SIGTERM") from None
            logs.seek(0)
            lines = logs.read().splitlines()
        if code != 0:
            print("\n".join(lines[-20:]), file=sys.stderr)
            raise SystemExit(f"exit code {code} after SIGTERM")
        events = [json.loads(line)["event"] for line in lines if line.startswith("{")]
        if len(events) != len(lines) or "stopped" not in events:
            raise SystemExit(f"expected JSON log lines ending with 'stopped': {lines[-5:]}")
        after = subprocess.run(healthcheck, env=env, capture_output=True, timeout=30)
        if after.returncode == 0:
            raise SystemExit("HEALTHCHECK still passes after the server stopped")
        print(f"SIGTERM: clean exit; {len(lines)} JSON log lines; HEALTHCHECK fails afterwards")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ctx = sub.add_parser("context", help="copy the build context")
    ctx.add_argument("source", type=Path)
    ctx.add_argument("destination", type=Path)
    go = sub.add_parser("run", help="run the entry point and check it")
    go.add_argument("--bin-dir", type=Path, required=True,
                    help="bin/ of the environment the package is installed in")
    go.add_argument("--dockerfile", type=Path,
                    default=Path(__file__).resolve().parent.parent / "Dockerfile")
    go.add_argument("--ports", choices=("auto", "exact", "remap"), default="auto",
                    help="exact: the Dockerfile's ports; remap: free ones; auto: exact if free")
    go.add_argument("--timeout", type=float, default=60.0, help="seconds to become healthy")
    args = parser.parse_args(argv)
    if args.command == "context":
        print(f"{copy_context(args.source, args.destination)} files in the build context")
    else:
        run(args.bin_dir, args.dockerfile, args.ports, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
