"""Stopping the processes tests start (servers, Prometheus)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if `proc` has not exited within `timeout` seconds; reaped."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
