"""A throw-away PostgreSQL server (Debian's `postgresql`) for integration tests.

initdb and pg_ctl run as the `postgres` user (the tests run as root, which PostgreSQL refuses),
on a data directory in a fresh temporary directory owned by that user, listening on 127.0.0.1
only (a free port, and a Unix socket in the same directory), with trust authentication on
loopback. The server is started and stopped with pg_ctl, which signals the postmaster by the
process id in its pid file. Usable from a shell too: `python -m tests.postgres_server` starts
one and prints its URL until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.observability import free_port
from tests.system_packages import GROUPS, apt_install, quick_run, quick_skip_reason

POSTGRES_PACKAGES = GROUPS["postgres"][0]
SERVER_USER = "postgres"


def binaries_dir() -> Path | None:
    """Debian keeps initdb and pg_ctl in /usr/lib/postgresql/VERSION/bin (the newest wins)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _missing() -> str | None:
    if binaries_dir() is None:
        return "PostgreSQL's pg_ctl / initdb are not installed"
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return f"there is no {SERVER_USER!r} user"
    if shutil.which("runuser") is None:
        return "runuser (util-linux) is missing"
    return None


def ensure_postgres(install: bool = True, timeout: float = 600.0) -> str | None:
    """Make sure Debian's PostgreSQL is installed; None when it is, else why it is not.

    Installs with apt-get when running as root and apt-get exists, saying so first; a quick
    run installs nothing (tests/system_packages.py).
    """
    if quick_run("postgres"):
        return quick_skip_reason("postgres")
    if _missing() is None:
        return None
    if os.geteuid() != 0:
        return "PostgreSQL tests need root (to run the server as the postgres user)"
    if not install:
        return _missing()
    reason = apt_install("postgres", timeout)
    if reason is not None:
        return f"{_missing()}: {reason}" if reason.startswith("not installed") else reason
    return _missing()


@dataclass
class PostgresServer:
    """One PostgreSQL server in its own temporary directory. start(), then stop() (always)."""

    port: int = 0
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="hpcd-pg-")))

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def url(self) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/postgres"

    def _as_server_user(self, *argv: str, timeout: float = 60.0) -> None:
        """Run a PostgreSQL program as the server user. Its output goes to a file, not a
        pipe: a postmaster that pg_ctl starts inherits it, and would hold a pipe open."""
        bindir = binaries_dir()
        assert bindir is not None
        output = self.workdir / f"{argv[0]}.out"
        with output.open("w") as out:
            proc = subprocess.run(
                ["runuser", "-u", SERVER_USER, "--", str(bindir / argv[0]), *argv[1:]],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                timeout=timeout, check=False, cwd=self.workdir,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): "
                               f"{output.read_text(errors='replace')}\n{self.log()}")

    def start(self) -> None:
        """initdb (trust on loopback, no fsync wait at init), then start and wait for it."""
        user = pwd.getpwnam(SERVER_USER)
        os.chown(self.workdir, user.pw_uid, user.pw_gid)
        self.port = self.port or free_port()
        self._as_server_user("initdb", "-D", str(self.data_dir), "-U", SERVER_USER,
                             "--auth=trust", "--no-sync", "-E", "UTF8")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.workdir} -c max_connections=40")
        self._as_server_user("pg_ctl", "start", "-w", "-t", "30", "-D", str(self.data_dir),
                             "-l", str(self.log_path), "-o", options)

    def restart(self) -> None:
        """A fast restart: clients are disconnected, committed work is kept."""
        self._as_server_user("pg_ctl", "restart", "-m", "fast", "-w", "-t", "30",
                             "-D", str(self.data_dir), "-l", str(self.log_path))

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        return None

    def stop(self) -> None:
        """pg_ctl stop -m fast; if it fails, SIGKILL the postmaster by its pid; remove the
        directory."""
        if self.data_dir.exists():
            try:
                self._as_server_user("pg_ctl", "stop", "-m", "fast", "-w", "-t", "20",
                                     "-D", str(self.data_dir))
            except (RuntimeError, subprocess.TimeoutExpired):
                pid = self.postmaster_pid()
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    time.sleep(0.5)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self, tail: int = 30) -> str:
        with contextlib.suppress(OSError):
            lines = self.log_path.read_text(errors="replace").splitlines()[-tail:]
            return "--- server.log\n" + "\n".join(lines)
        return ""


def _main() -> None:
    reason = ensure_postgres()
    if reason:
        sys.exit(reason)
    server = PostgresServer()
    server.start()
    print(server.url, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    _main()
