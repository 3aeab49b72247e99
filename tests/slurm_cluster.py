"""A throw-away one-host Slurm cluster with emulated nodes, for integration tests.

One slurmctld and one `slurmd -D -N nX` per node, all as root on loopback, configured in a
temporary directory (Slurm 22.05 from Debian: `NodeHostname=localhost`, one port per node,
`SlurmdParameters=config_overrides`, `AuthType=auth/none`). Every daemon is started and
stopped by process id.
Usable from a shell too: `python3 -m tests.slurm_cluster DIR`, from the repository root (as
docs/slurm-bridge.md shows it), starts a cluster in DIR with the shipped
deploy/slurm/job_submit.lua, so that jobs of its partition `batch` are held at submission, and
keeps it up until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.system_packages import GROUPS, apt_install, quick_run, quick_skip_reason

if TYPE_CHECKING:
    from hpcdispatch.slurm_bridge.slurm_json import SlurmJob

SLURM_PACKAGES = GROUPS["slurm"][0]
# The site's job_submit.lua, which holds the jobs of the managed partitions (`batch`).
SHIPPED_JOB_SUBMIT_LUA = Path(__file__).resolve().parents[1] / "deploy/slurm/job_submit.lua"
_BINARIES = ("slurmctld", "slurmd", "squeue", "sinfo", "sbatch", "scontrol", "scancel")


def missing_binaries() -> list[str]:
    return [b for b in _BINARIES if shutil.which(b) is None]


def ensure_slurm(install: bool = True, timeout: float = 600.0) -> str | None:
    """Make sure Debian's Slurm is installed; return None when it is, else why it is not.

    Installs with apt-get when running as root and apt-get exists, saying so first; a quick
    run installs nothing (tests/system_packages.py).
    """
    if quick_run("slurm"):
        return quick_skip_reason("slurm")
    if not missing_binaries():
        return None
    if not install:
        return f"Slurm binaries missing: {', '.join(missing_binaries())}"
    reason = apt_install("slurm", timeout)
    if reason is not None:
        return f"Slurm is {reason}" if reason.startswith("not installed") else reason
    missing = missing_binaries()
    return f"still missing after apt-get: {', '.join(missing)}" if missing else None


def free_port_range(count: int, start: int = 17000, end: int = 30000) -> int:
    """First port p such that p .. p+count-1 are all free on loopback."""
    port = start
    while port + count < end:
        if all(_port_free(port + i) for i in range(count)):
            return port
        port += count + 1
    raise RuntimeError("no free port range")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class SlurmCluster:
    """slurm.conf + daemons in `workdir`. Call start(), then stop() (always)."""

    workdir: Path
    nodes: int = 3
    cpus: int = 4
    memory_mib: int = 2000
    partition: str = "batch"
    job_submit_lua: Path | None = None  # copied next to slurm.conf; enables job_submit/lua
    # Node name -> its Features (e.g. "fast,big"); nodes not named have none.
    features: dict[str, str] = field(default_factory=dict)
    # More partitions beside `partition` (which keeps every node and stays the default):
    # name -> node list (e.g. "n[1-2]").
    extra_partitions: dict[str, str] = field(default_factory=dict)
    extra_config: tuple[str, ...] = ()  # more slurm.conf lines (e.g. PriorityType=...)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf_path(self) -> Path:
        return self.workdir / "etc" / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

    def write_config(self) -> None:
        etc = self.workdir / "etc"
        for sub in ("etc", "state", "spool", "log", "run"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        base = free_port_range(self.nodes + 1)
        ctld_port, node_port = base, base + 1
        w = self.workdir
        lines = [
            "ClusterName=hpcdtest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"StateSaveLocation={w}/state",
            f"SlurmdSpoolDir={w}/spool/%n",
            f"SlurmctldPidFile={w}/run/slurmctld.pid",
            f"SlurmdPidFile={w}/run/slurmd.%n.pid",
            f"SlurmctldLogFile={w}/log/slurmctld.log",
            f"SlurmdLogFile={w}/log/slurmd.%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "SlurmdParameters=config_overrides",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=100",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=2",
            "InactiveLimit=0",
            "SlurmdTimeout=30",
            "MailProg=/bin/true",
            *self._node_lines(node_port),
            f"PartitionName={self.partition} Nodes=n[1-{self.nodes}] Default=YES "
            "MaxTime=INFINITE State=UP",
            *(f"PartitionName={name} Nodes={nodes} MaxTime=INFINITE State=UP"
              for name, nodes in self.extra_partitions.items()),
            *self.extra_config,
        ]
        if self.job_submit_lua is not None:
            shutil.copy(self.job_submit_lua, etc / "job_submit.lua")
            lines.append("JobSubmitPlugins=lua")
        self.conf_path.write_text("\n".join(lines) + "\n")

    def _node_lines(self, node_port: int) -> list[str]:
        """One NodeName line for all nodes, or one per node when some have features."""
        if not self.features:
            return [f"NodeName=n[1-{self.nodes}] NodeHostname=localhost "
                    f"Port=[{node_port}-{node_port + self.nodes - 1}] CPUs={self.cpus} "
                    f"RealMemory={self.memory_mib} State=UNKNOWN"]
        return [f"NodeName={name} NodeHostname=localhost Port={node_port + i} CPUs={self.cpus} "
                f"RealMemory={self.memory_mib} State=UNKNOWN"
                + (f" Features={self.features[name]}" if name in self.features else "")
                for i, name in enumerate(self.node_names)]

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / "log" / f"{name}.out").open("wb")
        self.processes[name] = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start(self, timeout: float = 45.0) -> None:
        """Write the config, start slurmctld and the slurmds; wait until every node is idle."""
        self.write_config()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf_path)])
        for node in self.node_names:
            (self.workdir / "spool" / node).mkdir(parents=True, exist_ok=True)
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf_path)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Slurm daemon(s) exited early: {dead}\n{self.logs()}")
            if self._all_nodes_idle():
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle after {timeout} s\n{self.logs()}")

    def _all_nodes_idle(self) -> bool:
        proc = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True,
            timeout=10, check=False,
        )
        if proc.returncode != 0:
            return False
        states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.node_names)

    def run(self, *argv: str, check: bool = True, timeout: float = 20.0) -> str:
        """Run a Slurm client command against this cluster; return stdout."""
        proc = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def squeue_json(self) -> dict[str, Any]:
        return dict(json.loads(self.run("squeue", "--json", "--all")))

    def jobs(self) -> dict[str, SlurmJob]:
        """The cluster's jobs as the bridge reads them (`squeue --json`), by id."""
        from hpcdispatch.slurm_bridge.slurm_json import parse_jobs

        return {j.id: j for j in parse_jobs(self.squeue_json())}

    def wait_held(self, job_ids: list[str], within: float = 15.0) -> dict[str, SlurmJob]:
        """The jobs once every one of `job_ids` is held (fails with their states after
        `within` seconds)."""
        deadline = time.monotonic() + within
        while True:
            jobs = self.jobs()
            if all(jid in jobs and jobs[jid].held for jid in job_ids):
                return jobs
            assert time.monotonic() < deadline, [(j.id, j.state, j.reason) for j in jobs.values()]
            time.sleep(0.3)

    def sbatch(self, *options: str, script: str = "sleep 1") -> str:
        """Submit a batch job; return its id."""
        out = self.run(
            "sbatch", "--parsable", f"--chdir={self.workdir}",
            f"--output={self.workdir}/log/job-%j.out", *options,
            f"--wrap={script}",
        )
        return out.strip().split(";")[0]

    def logs(self, tail: int = 30) -> str:
        parts = []
        for path in sorted((self.workdir / "log").glob("*")):
            if path.suffix in (".log", ".out") and not path.name.startswith("job-"):
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """scancel everything, then stop each slurmd, then slurmctld; SIGKILL stragglers."""
        ctld = self.processes.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(Exception):
                every = ",".join([self.partition, *self.extra_partitions])
                self.run("scancel", "--full", "--partition", every, check=False)
                self.run("scancel", "--partition", every, check=False)
            time.sleep(1.0)
        for name in [n for n in self.processes if n.startswith("slurmd-")] + ["slurmctld"]:
            proc = self.processes.get(name)
            if proc is not None:
                _terminate(proc)
        for pid in _slurmstepd_pids(self.workdir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def started(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """`cluster` started; stopped on the way out, every daemon checked gone."""
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        alive = {name: p.pid for name, p in cluster.processes.items() if p.poll() is None}
        assert not alive, f"daemons still running after stop: {alive}"


def _terminate(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _slurmstepd_pids(workdir: Path) -> list[int]:
    """slurmstepd processes whose environment points at this cluster's slurm.conf."""
    pids = []
    marker = str(workdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if comm != "slurmstepd":
                continue
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in cmdline or marker in environ:
            pids.append(int(entry.name))
    return pids


def _main() -> None:
    reason = ensure_slurm()
    if reason:
        sys.exit(reason)
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m tests.slurm_cluster DIR  (from the repository root)")
    cluster = SlurmCluster(Path(sys.argv[1]), job_submit_lua=SHIPPED_JOB_SUBMIT_LUA)
    t0 = time.monotonic()
    cluster.start()
    print(f"up in {time.monotonic() - t0:.1f} s, jobs of partition {cluster.partition} are held "
          f"at submission (job_submit.lua); Ctrl-C stops it. "
          f"export SLURM_CONF={cluster.conf_path}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        stop.wait()
    finally:
        cluster.stop()


if __name__ == "__main__":
    _main()
