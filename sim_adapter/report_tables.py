"""The printed tables of `hpcdispatch simulate` and `hpcdispatch report`: one row per run.

Two tables, so that neither is wider than a terminal: what the jobs got (bounded slowdown and
wait, with their tails: p95, p99 and the longest wait; utilisation) and what the service cost
(decisions and their time, predictor error, replay time); `report` adds a third for the runs
whose decisions reported waiting jobs' starts: how the promises were kept, how close the likely
starts beside them came, and how the estimates were kept. A run of `--sequences` is named by
its sequence (`seq03 easy-walltime`), and the rows are ordered by sequence, so the dispatchers
of one sequence sit together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HOUR = 3600.0

# header, path in the summary, scale, digits
Column = tuple[str, tuple[str, ...], float, int]

OUTCOME_COLUMNS: tuple[Column, ...] = (
    ("jobs", ("jobs",), 1, 0),
    ("mean bsld", ("bounded_slowdown", "mean"), 1, 2),
    ("p50 bsld", ("bounded_slowdown", "p50"), 1, 2),
    ("p95 bsld", ("bounded_slowdown", "p95"), 1, 1),
    ("p99 bsld", ("bounded_slowdown", "p99"), 1, 1),
    ("mean sld", ("slowdown", "mean"), 1, 2),
    ("mean wait [h]", ("wait_seconds", "mean"), 1 / HOUR, 2),
    ("p95 wait [h]", ("wait_seconds", "p95"), 1 / HOUR, 2),
    ("p99 wait [h]", ("wait_seconds", "p99"), 1 / HOUR, 2),
    ("max wait [h]", ("wait_seconds", "max"), 1 / HOUR, 2),
    ("util", ("utilisation",), 1, 3),
    ("makespan [h]", ("makespan_seconds",), 1 / HOUR, 1),
)
SERVICE_COLUMNS: tuple[Column, ...] = (
    ("decisions", ("decisions",), 1, 0),
    ("dec p50 [ms]", ("decision_seconds", "p50"), 1000, 1),
    ("dec p99 [ms]", ("decision_seconds", "p99"), 1000, 1),
    ("dec max [ms]", ("decision_seconds", "max"), 1000, 1),
    ("fallbacks", ("fallback_decisions",), 1, 0),
    ("pred MAE [s]", ("predictor_accuracy", "mae_seconds"), 1, 0),
    ("replay [s]", ("replay_seconds",), 1, 1),
)

# How the starts the decisions reported were kept (summary.json `promise_accuracy`): the jobs
# given a promise, the share that started no later than their first promise and how late the
# others were, the promises' moves later (a node down, a job past its limit), and the error of
# the likely start beside the first promise (median absolute, share within 1 h); the jobs given
# only estimates, the share that started no later than their first estimate and how far the
# estimate was from the start (either way).
PROMISED = ("promise_accuracy", "promised")
LIKELY = ("promise_accuracy", "likely")
ESTIMATED = ("promise_accuracy", "estimated")
PROMISE_COLUMNS: tuple[Column, ...] = (
    ("promised", (*PROMISED, "jobs"), 1, 0),
    ("kept %", (*PROMISED, "on_time_share"), 100, 1),
    ("late p50 [h]", (*PROMISED, "late_seconds", "p50"), 1 / HOUR, 2),
    ("late p95 [h]", (*PROMISED, "late_seconds", "p95"), 1 / HOUR, 2),
    ("late max [h]", (*PROMISED, "late_seconds", "max"), 1 / HOUR, 2),
    ("moved later", ("promise_accuracy", "moved", "moves"), 1, 0),
    ("likely |err| p50 [h]", (*LIKELY, "drift_seconds", "p50"), 1 / HOUR, 2),
    ("likely <=1h %", (*LIKELY, "within_hour_share"), 100, 1),
    ("estimated", (*ESTIMATED, "jobs"), 1, 0),
    ("on time %", (*ESTIMATED, "on_time_share"), 100, 1),
    ("drift p50 [h]", (*ESTIMATED, "drift_seconds", "p50"), 1 / HOUR, 2),
    ("drift p95 [h]", (*ESTIMATED, "drift_seconds", "p95"), 1 / HOUR, 2),
    ("drift max [h]", (*ESTIMATED, "drift_seconds", "max"), 1 / HOUR, 2),
)


def get(summary: dict[str, Any], *keys: str) -> Any:
    """summary[k1][k2]..., None where a level is missing."""
    value: Any = summary
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def sequence_id(summary: dict[str, Any]) -> str:
    """`seq03` (and `/r2` for a repeat) for a run of `--sequences`, else ''."""
    sequence = summary.get("sequence")
    if not isinstance(sequence, dict):
        return ""
    name = f"seq{int(sequence.get('index', 0)) + 1:02d}"
    repeat = int(sequence.get("repeat", 1))
    return f"{name}/r{repeat}" if repeat > 1 else name


def run_name(summary: dict[str, Any]) -> str:
    """The run's label, after its sequence id when it is one of `--sequences`."""
    label = str(summary.get("label", "?"))
    sequence = sequence_id(summary)
    return f"{sequence} {label}" if sequence else label


def in_sequence_order(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one sequence next to each other (stable: dispatchers keep their order)."""
    def key(summary: dict[str, Any]) -> tuple[int, int]:
        sequence = summary.get("sequence")
        if not isinstance(sequence, dict):
            return (-1, 0)
        return (int(sequence.get("index", 0)), int(sequence.get("repeat", 1)))

    return sorted(summaries, key=key)


def cell(value: Any, scale: float = 1, digits: int = 2) -> str:
    """A number scaled and formatted with thousands separators; '-' for a missing one."""
    if value is None or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, int | float):
        scaled = float(value) * scale
        return f"{round(scaled):,}" if digits == 0 else f"{scaled:,.{digits}f}"
    return str(value)


def table(summaries: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    rows = [["run", *(c[0] for c in columns)]]
    for s in in_sequence_order(summaries):
        rows.append([run_name(s), *(cell(get(s, *keys), scale, digits)
                                    for _, keys, scale, digits in columns)])
    return fixed_width(rows)


def comparison_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The outcome table, a blank line, the service table."""
    return f"{table(summaries, OUTCOME_COLUMNS)}\n\n{table(summaries, SERVICE_COLUMNS)}"


def reports_starts(summary: dict[str, Any]) -> bool:
    """Whether a run's decisions reported any waiting job's start (a promise or estimate)."""
    return bool(get(summary, "promise_accuracy", "reported_jobs"))


def promise_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The runs whose dispatcher reported starts: how their promises were kept, the likely
    starts' error and how the estimates were kept (PROMISE_COLUMNS), then a line naming the
    runs that reported none; '' when none did."""
    reporting = [s for s in summaries if reports_starts(s)]
    silent = [run_name(s) for s in in_sequence_order(summaries) if not reports_starts(s)]
    if not reporting:
        return ""
    text = table(reporting, PROMISE_COLUMNS)
    if silent:
        text += f"\n(no start reported: {', '.join(silent)})"
    return text


def fixed_width(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells (the first is the header) as aligned text: the first column left, the
    others right, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(text.ljust(w) if i == 0 else text.rjust(w)
                  for i, (text, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def site_rules_table(summaries: Sequence[dict[str, Any]]) -> str:
    """For runs on a system with partitions or windows: each partition's jobs and waits, then
    each run's windows and the node hours they took (summary.json `partitions`,
    `unavailability`); '' when no run had either."""
    parts: list[str] = []
    rows = [["run", "partition", "jobs", "mean wait [h]", "p95 wait [h]", "max wait [h]"]]
    for s in in_sequence_order(summaries):
        for name, p in (s.get("partitions") or {}).items():
            wait = p["wait_seconds"]
            rows.append([run_name(s), name, cell(p["jobs"], digits=0),
                         *(cell(wait[k], 1 / 3600) for k in ("mean", "p95", "max"))])
    if len(rows) > 1:
        parts.append(fixed_width(rows))
    rows = [["run", "windows", "maintenance [node h]", "reservations [node h]"]]
    for s in in_sequence_order(summaries):
        lost = get(s, "unavailability", "first_submit_to_last_end")
        if lost:
            rows.append([run_name(s), cell(lost["windows"], digits=0),
                         cell(lost["maintenance_node_hours"], digits=0),
                         cell(lost["reservation_node_hours"], digits=0)])
    if len(rows) > 1:
        parts.append(fixed_width(rows))
    return "\n\n".join(parts)
