"""Typed records parsed from `squeue --json` and `sinfo --json` (Slurm 22.05, openapi v0.0.38).

Only the fields the bridge needs are read; a missing or null field takes a neutral default, so
newer Slurm versions that add fields still parse. Times are Unix seconds, memory MiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Job states in which a job holds resources on its nodes.
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STAGE_OUT"})
# Job states of a job that is over.
FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE",
})
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


class SlurmParseError(ValueError):
    """The JSON is not what Slurm 22.05 prints."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # state flags, upper case: DRAIN, NOT_RESPONDING, ...
    partitions: tuple[str, ...]
    cpus: int
    threads: int  # threads per core (a "core" of job_resources is this many CPUs)
    real_memory: int  # MiB
    features: tuple[str, ...] = ()  # AvailableFeatures (`sinfo -o %f`)


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    """What one job holds on one node."""

    node: str
    cpus: int
    memory: int  # MiB


@dataclass(frozen=True, slots=True)
class SlurmJob:
    id: str
    name: str
    user: str
    state: str  # upper case: PENDING, RUNNING, ...
    reason: str
    partitions: tuple[str, ...]
    submit_time: int
    start_time: int
    end_time: int
    time_limit_s: int | None  # None: unlimited
    cpus: int
    tasks: int
    cpus_per_task: int
    tasks_per_node: int  # 0 unless --ntasks-per-node was given
    node_count: int
    memory_per_cpu: int | None  # MiB
    memory_per_node: int | None  # MiB; 0 means "all of the node"
    required_nodes: tuple[str, ...]
    allocations: tuple[NodeAllocation, ...]  # empty until the job started
    is_array_pending: bool  # a pending array record that still stands for many tasks
    is_het: bool  # a heterogeneous job component
    comment: str = ""  # the job's Comment (the bridge shows a held job's promise in it)
    constraint: str = ""  # --constraint as Slurm keeps it ("fast&big", "[a|b]", ...)
    nice: int = 0  # --nice / scontrol update nice= (may be negative)
    account: str = ""
    reservation: str = ""  # --reservation (ResvName)

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.reason in HELD_REASONS


def _int(value: Any, default: int = 0) -> int:
    if value is None or isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, Mapping):  # later openapi versions: {"set": bool, "number": int}
        if value.get("infinite"):
            return default
        return _int(value.get("number"), default) if value.get("set", True) else default
    raise SlurmParseError(f"expected a number, got {value!r}")


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, Mapping) and (value.get("infinite") or not value.get("set", True)):
        return None
    return _int(value)


def _nice(value: Any) -> int:
    """The job's nice; 22.05 prints it as an unsigned 32-bit number (-50 as 4294967246)."""
    nice = _int(value)
    return nice - 2**32 if nice >= 2**31 else nice


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated list of names ("fast,big"); "(null)" or empty: none."""
    text = _str(value)
    return tuple(dict.fromkeys(f for f in text.split(",") if f and f != "(null)"))


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # later versions print states as lists
        return str(value[0]) if value else ""
    return str(value)


_RANGE = re.compile(r"^([^\[\],]*)\[([^\]]+)\](.*)$")


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a Slurm host list such as "n[1-3,7],gpu01" (one bracket per name)."""
    names: list[str] = []
    for item in _split_top_level(text):
        match = _RANGE.match(item)
        if not match:
            names.append(item)
            continue
        prefix, ranges, suffix = match.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}{suffix}")
    return tuple(names)


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in text.strip():
        if ch == "," and depth == 0:
            if current:
                items.append(current)
            current = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        current += ch
    if current:
        items.append(current)
    return items


def _allocations(resources: Any, threads: Mapping[str, int]) -> tuple[NodeAllocation, ...]:
    if not isinstance(resources, Mapping):
        return ()
    out = []
    for entry in resources.get("allocated_nodes") or []:
        node = _str(entry.get("nodename"))
        cores = 0
        for socket in (entry.get("sockets") or {}).values():
            for state in (socket.get("cores") or {}).values():
                cores += "allocated" in _str(state).lower()
        out.append(NodeAllocation(node, cores * threads.get(node, 1),
                                  _int(entry.get("memory_allocated"))))
    return tuple(out)


def _cpus_per_task(job: Mapping[str, Any]) -> int:
    """--cpus-per-task; 22.05 prints null even when it was given, so derive it then."""
    given = _opt_int(job.get("cpus_per_task"))
    if given:
        return given
    cpus, tasks = _int(job.get("cpus"), 1), _int(job.get("tasks"))
    return cpus // tasks if tasks > 0 and cpus % tasks == 0 and cpus >= tasks else 1


def parse_nodes(doc: Mapping[str, Any]) -> list[SlurmNode]:
    """Nodes of a `sinfo --json` document."""
    if "nodes" not in doc:
        raise SlurmParseError("sinfo --json output has no 'nodes'")
    nodes = []
    for n in doc["nodes"]:
        try:
            nodes.append(SlurmNode(
                name=_str(n["name"]),
                state=_str(n.get("state")).lower(),
                flags=frozenset(_str(f).upper() for f in n.get("state_flags") or []),
                partitions=tuple(n.get("partitions") or ()),
                cpus=_int(n.get("cpus")),
                threads=max(1, _int(n.get("threads"), 1)),
                real_memory=_int(n.get("real_memory")),
                features=_names(n.get("features")),
            ))
        except (KeyError, TypeError, AttributeError) as exc:
            raise SlurmParseError(f"bad node record: {exc!r}") from exc
    return nodes


def parse_jobs(doc: Mapping[str, Any], threads: Mapping[str, int] | None = None) -> list[SlurmJob]:
    """Jobs of a `squeue --json` document; `threads` maps node -> threads per core."""
    if "jobs" not in doc:
        raise SlurmParseError("squeue --json output has no 'jobs'")
    threads = threads or {}
    jobs = []
    for j in doc["jobs"]:
        try:
            limit = _opt_int(j.get("time_limit"))
            jobs.append(SlurmJob(
                id=str(_int(j["job_id"])),
                name=_str(j.get("name")),
                user=_str(j.get("user_name")) or str(_int(j.get("user_id"))),
                state=_str(j.get("job_state")).upper(),
                reason=_str(j.get("state_reason")),
                partitions=tuple(p for p in _str(j.get("partition")).split(",") if p),
                submit_time=_int(j.get("submit_time")),
                start_time=_int(j.get("start_time")),
                end_time=_int(j.get("end_time")),
                time_limit_s=None if limit is None else limit * 60,
                cpus=_int(j.get("cpus"), 1),
                tasks=_int(j.get("tasks")),
                cpus_per_task=_cpus_per_task(j),
                tasks_per_node=_int(j.get("tasks_per_node")),
                node_count=max(1, _int(j.get("node_count"), 1)),
                memory_per_cpu=_opt_int(j.get("memory_per_cpu")),
                memory_per_node=_opt_int(j.get("memory_per_node")),
                required_nodes=expand_hostlist(_str(j.get("required_nodes"))),
                allocations=_allocations(j.get("job_resources"), threads),
                is_array_pending=bool(_str(j.get("array_task_string")))
                and j.get("array_task_id") is None,
                is_het=_int(j.get("het_job_id")) != 0,
                comment=_str(j.get("comment")),
                constraint=_str(j.get("features")),
                nice=_nice(j.get("nice")),
                account=_str(j.get("account")),
                reservation=_str(j.get("resv_name")),
            ))
        except (KeyError, TypeError, AttributeError) as exc:
            raise SlurmParseError(f"bad job record: {exc!r}") from exc
    return jobs
