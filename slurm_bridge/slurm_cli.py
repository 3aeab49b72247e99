"""The Slurm commands the bridge runs: squeue/sinfo/scontrol show reservation to read, scontrol
to apply.

Each command has a timeout and runs in its own session, so a Ctrl-C or SIGTERM sent to the
bridge's process group never kills an `scontrol` half way; the bridge decides when to stop.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class SlurmCommandError(RuntimeError):
    """A Slurm command failed, timed out or printed something unreadable."""

    def __init__(self, argv: Sequence[str], detail: str) -> None:
        super().__init__(f"{' '.join(argv)}: {detail}")
        self.argv = list(argv)
        self.detail = detail


@dataclass
class SlurmCommands:
    bin_dir: str = ""  # directory of the Slurm binaries; empty = PATH
    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def _path(self, name: str) -> str:
        return os.path.join(self.bin_dir, name) if self.bin_dir else name

    def run(self, *argv: str, env: Mapping[str, str] | None = None) -> str:
        cmd = [self._path(argv[0]), *argv[1:]]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=self.timeout, check=False,
                env={**self.env, **(env or {})}, start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(cmd, f"timed out after {self.timeout} s") from None
        except OSError as exc:
            raise SlurmCommandError(cmd, str(exc)) from None
        if proc.returncode != 0:
            raise SlurmCommandError(cmd, f"exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def _json(self, *argv: str) -> dict[str, Any]:
        out = self.run(*argv)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SlurmCommandError(argv, f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise SlurmCommandError(argv, "JSON is not an object")
        return doc

    def squeue(self) -> dict[str, Any]:
        return self._json("squeue", "--json", "--all")

    def sinfo(self) -> dict[str, Any]:
        return self._json("sinfo", "--json")

    def reservations(self) -> str:
        """`scontrol show reservation -o`, its times in UTC (slurm_reservations.py)."""
        return self.run("scontrol", "show", "reservation", "-o", env={"TZ": "UTC"})

    def pin(self, job_id: str, node_list: str, num_nodes: int | None,
            comment: str | None = None) -> None:
        """Require the job to run on exactly these nodes (and, given `comment`, set its
        Comment in the same update: the user's own, without the promise shown while held)."""
        args = ["scontrol", "update", f"jobid={job_id}", f"NodeList={node_list}"]
        if num_nodes is not None:
            args.append(f"NumNodes={num_nodes}-{num_nodes}")
        if comment is not None:
            args.append(f"Comment={comment}")
        self.run(*args)

    def set_comment(self, job_id: str, comment: str) -> None:
        """The job's Comment (`squeue -o %k`), one argument whatever its spaces."""
        self.run("scontrol", "update", f"jobid={job_id}", f"Comment={comment}")

    def unpin(self, job_id: str) -> None:
        self.run("scontrol", "update", f"jobid={job_id}", "NodeList=")

    def release(self, job_id: str) -> None:
        self.run("scontrol", "release", job_id)

    def hold(self, job_id: str) -> None:
        self.run("scontrol", "hold", job_id)
