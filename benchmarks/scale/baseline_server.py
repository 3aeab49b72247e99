"""The service as it was at an older commit, run next to today's for side-by-side benchmarks.

`baseline_server(rev)` exports commit `rev` of this repository (`git archive`, into a temporary
directory: no worktree to register or clean up, nothing in the checkout touched), lays it out
as the installed package (the commit's pyproject.toml maps top-level folders into the
`hpcdispatch` import root: `server/` is `hpcdispatch.server`, ...; a tree of links mirrors
that, as scripts/typecheck.sh does), and starts that code's `hpcdispatch serve` with this
interpreter, its PYTHONPATH on the tree, on a free loopback port. The old code runs on today's
installed dependencies (pinned alike since long before the commits benchmarked against).

    with baseline_server("a8b54e1") as target: ...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START_SECONDS = 120.0  # importing OR-Tools on a loaded 2-core machine takes a while


def export(rev: str, into: Path, repo: Path = REPO) -> str:
    """Extract commit `rev`'s files into `into`; its full hash."""
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", full],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return full


def package_tree(source: Path, into: Path) -> Path:
    """Links under `into` that make `source`'s packages importable by their installed names
    (pyproject.toml's [tool.setuptools] package-dir); the directory to put on PYTHONPATH."""
    setup = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setup.get("package-dir", {})
    for name in sorted(mapping, key=lambda n: n.count(".")):  # parents first
        link = into.joinpath(*name.split("."))
        target = (source / mapping[name]).resolve()
        if link.exists():
            if link.resolve() == target:
                continue  # inside a linked parent already
            raise ValueError(f"{name}: {link} exists and is not {target}")
        link.parent.mkdir(parents=True, exist_ok=True)
        if "." in name:
            link.symlink_to(target, target_is_directory=True)
        else:  # the root package: a real folder, so subpackages can be linked into it
            link.mkdir()
            for entry in target.iterdir():
                (link / entry.name).symlink_to(entry)
    return into


def _serving_port(log: Path) -> int | None:
    for line in log.read_text(errors="replace").splitlines():
        if '"serving"' in line:
            return int(json.loads(line)["port"])
    return None


@contextmanager
def baseline_server(rev: str, workers: int = 4, repo: Path = REPO) -> Iterator[str]:
    """Yield the target "127.0.0.1:PORT" of commit `rev`'s server; stop it on exit."""
    with tempfile.TemporaryDirectory(prefix="hpcdispatch-baseline-") as tmp:
        source, tree, log = Path(tmp) / "source", Path(tmp) / "tree", Path(tmp) / "serve.log"
        full = export(rev, source, repo)
        package_tree(source, tree)
        # Only the keys every version knows: an older config refuses unknown HPCDISPATCH_*.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HPCDISPATCH_")}
        env.update(PYTHONPATH=str(tree), HPCDISPATCH_LISTEN="127.0.0.1:0",
                   HPCDISPATCH_LOG_FORMAT="json", HPCDISPATCH_WORKERS=str(workers))
        with log.open("w") as out:  # a file: a pipe nobody reads would fill up and stall it
            # cwd: `python -m` puts it first on sys.path, so not this checkout.
            proc = subprocess.Popen([sys.executable, "-m", "hpcdispatch", "serve"], env=env,
                                    cwd=tree, stdout=out, stderr=subprocess.STDOUT)
        try:
            give_up = time.monotonic() + START_SECONDS
            while (port := _serving_port(log)) is None:
                if proc.poll() is not None or time.monotonic() > give_up:
                    raise RuntimeError(f"the server of {rev} ({full[:12]}) did not start:\n"
                                       + log.read_text(errors="replace")[-4000:])
                time.sleep(0.2)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
