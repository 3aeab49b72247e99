"""Starting and stopping the processes tests start (servers, Prometheus)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# `hpcdispatch serve` whose PCP'20 decisions wait until the file argv[1] exists (tests.Held).
_HELD_SERVE = """
import sys
from pathlib import Path
from hpcdispatch.cli import main
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import Held
DISPATCHERS[pb.DISPATCHER_PCP20] = Held(pb.DISPATCHER_PCP20, pb.DISPATCHER_EASY,
                                release_file=Path(sys.argv[1]))
sys.exit(main(sys.argv[2:]))
"""


def start_serve(
    config: Path, held_until: Path | None = None, env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], int, list[str]]:
    """`hpcdispatch serve --config CONFIG` on a free loopback port, JSON logs on its stdout;
    returns once it logs "serving", with the port it logged and the lines so far. With
    `held_until`, its PCP'20 decisions are held until that file exists; `env`: variables over
    this process's (e.g. PYTHONPATH with plugins)."""
    env = {**os.environ, **(env or {}), "HPCDISPATCH_LISTEN": "127.0.0.1:0",
           "HPCDISPATCH_LOG_FORMAT": "json"}
    serve = ["serve", "--config", str(config)]
    command = ([sys.executable, "-m", "hpcdispatch", *serve] if held_until is None
               else [sys.executable, "-c", _HELD_SERVE, str(held_until), *serve])
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if '"serving"' in line:
            break
    if not lines or '"serving"' not in lines[-1]:
        stop_process(proc, 5)
        raise AssertionError("server did not start:\n" + "".join(lines))
    return proc, int(json.loads(lines[-1])["port"]), lines


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` seconds; reaped."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def quiet_embedded_service() -> Iterator[str]:
    """The embedded service on loopback (`service_target(None)`), its address; the server's log
    filtered to warnings meanwhile, and structlog's configuration as it was afterwards (a later
    test that captures the server's log lines must not find them filtered out)."""
    import structlog

    from hpcdispatch.sim_adapter.adapter import service_target

    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        with service_target(None) as address:
            yield address
    finally:
        structlog.configure(**before)
