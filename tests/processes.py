"""Starting and stopping the processes tests start (servers, Prometheus)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def start_serve(config: Path) -> tuple[subprocess.Popen[str], int, list[str]]:
    """`hpcdispatch serve --config CONFIG` on a free loopback port, JSON logs on its stdout;
    returns once it logs "serving", with the port it logged and the lines so far."""
    env = {**os.environ, "HPCDISPATCH_LISTEN": "127.0.0.1:0", "HPCDISPATCH_LOG_FORMAT": "json"}
    proc = subprocess.Popen([sys.executable, "-m", "hpcdispatch", "serve", "--config",
                             str(config)], env=env, stdout=subprocess.PIPE,
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
