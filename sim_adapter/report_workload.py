"""What a report puts side by side: runs of one workload, each named with its search profile.

A table of runs compares dispatchers on one workload: the same trace, the same records (or
sequences of the same length and seed) on the same system. Runs of different workloads in one
report are refused unless the caller asks for them (`hpcdispatch report --mixed-traces`);
then each run's label carries a tag of its workload (`easy-walltime [W2]`) and the report
says which workload each tag is. The CP dispatchers' labels carry their search profile
(`pcp20-qos-walltime`); a run written before labels did gets it here, from its summary, so
that runs of two profiles are never one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcdispatch.catalog import CP_DISPATCHER_NAMES

UNKNOWN = "?"


def with_profile_in_label(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary`, its label with the search profile after the dispatcher where a CP run's
    label has none (`pcp20(default)-data-driven` -> `pcp20(default)-qos-data-driven`)."""
    label, profile = str(summary.get("label", "")), summary.get("profile")
    head, _, rest = label.partition("-")
    dispatcher = head.removesuffix("(default)")
    if (dispatcher not in CP_DISPATCHER_NAMES or not profile or not rest
            or rest.split("-")[0] == profile):
        return summary
    return {**summary, "label": f"{head}-{profile}-{rest}"}


def workload(summary: dict[str, Any]) -> str:
    """The trace, the records replayed and the system of a run, in words."""
    trace = summary.get("trace")
    parts = [Path(str(trace)).name if trace else "trace not recorded"]
    sequence, records = summary.get("sequence"), summary.get("records")
    if isinstance(sequence, dict):
        parts.append(f"sequences of {sequence.get('length')} jobs, seed {sequence.get('seed')}")
    elif isinstance(records, dict):
        parts.append(f"records {records.get('first')}:{records.get('last')}")
    if summary.get("limit_jobs"):
        parts.append(f"first {summary['limit_jobs']} jobs")
    system = summary.get("system")
    if isinstance(system, dict):
        parts.append(f"system {system.get('name')} ({system.get('nodes')} nodes, "
                     f"{system.get('cores')} cores)")
    return ", ".join(parts)


def workloads(summaries: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The runs of each workload, in first-seen order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for summary in summaries:
        groups.setdefault(workload(summary), []).append(summary)
    return groups


def mixed_workloads_text(groups: dict[str, list[dict[str, Any]]]) -> str:
    """Why runs of these workloads are not put in one table, and what to do."""
    listed = "; ".join(f"{name} ({len(runs)} run{'s' if len(runs) > 1 else ''})"
                       for name, runs in groups.items())
    return (f"the runs replay {len(groups)} different workloads, which one table would put "
            f"side by side as if comparable: {listed}. Report each workload on its own, or "
            "add --mixed-traces to tag each run with its workload")


def tag_workloads(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(lines `W1 = workload`, each summary in order with its workload's tag after its label)."""
    tags = {name: f"W{number}" for number, name in enumerate(workloads(summaries), start=1)}
    legend = [f"{tag} = {name}" for name, tag in tags.items()]
    return legend, [{**s, "label": f"{s.get('label', UNKNOWN)} [{tags[workload(s)]}]"}
                    for s in summaries]
