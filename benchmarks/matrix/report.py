"""A campaign's gathered results: ratios to EASY, `campaign.json` and `campaign.md`.

The EASY reference of a cell is the EASY cell of the same trace, system and predictor (the
campaign always runs one). Ratios are the cell's value over the reference's: mean bounded
slowdown, and mean decision time (as measured by the service, per decision).

Run as a module, it writes `campaign.md` again from `campaign.json` (after a change of the
table), or merges campaigns run apart (say, a matrix split over two machines) into one table:

    python -m benchmarks.matrix.report runs/part-a runs/part-b --out runs/merged
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from benchmarks.matrix.cells import CellResult, CellSpec
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE
from hpcdispatch.sim_adapter.adapter import DEFAULT, DISPATCHERS

REFERENCE = "easy"
NO_SEARCH = ("fcfs", "easy")  # dispatchers a search profile does not apply to
DEFAULT_CP = "pcp20"  # the service's default dispatcher, whose targets the issue sets
# A cell runs the default profile when it asks for none ("") or names the server's default.
DEFAULT_PROFILES = ("", DEFAULT_PROFILE)
BSLD_TARGET = -0.20  # mean bounded slowdown at least 20 % below EASY's ...
# ... with utilisation no lower (equal when equal at the 3 decimals the table shows)
UTIL_TOLERANCE = 0.0005
LLNL_DECISION_TARGET_MS = 50.0  # average decision over a full LLNL-Atlas replay
LLNL_TRACE = "LLNL-Atlas-2006-2.1-cln.swf.xz"  # the shared trace that target is set on


class Ratios(TypedDict):
    reference: str | None  # name of the EASY cell
    bounded_slowdown: float | None  # mean bounded slowdown / EASY's
    decision_seconds: float | None  # mean decision time / EASY's
    same_host: bool | None  # the reference ran on the same host (decision times comparable)


def reference_key(cell: CellSpec) -> tuple[Any, ...]:
    """Cells sharing this key are compared with the same EASY run: same trace, system,
    predictor, workload rule (campaigns before the rule's knobs lack them: 1 and 0) and
    selection of the trace (record window, RLScheduler sequences; None when not set)."""
    return (cell["trace"], cell["system"], cell["predictor"],
            float(cell.get("proc_scale", 1.0)), float(cell.get("accelerator_share", 0.0)),
            cell.get("records"), cell.get("sequences"), cell.get("sequence_length"),
            cell.get("seed"))


def _value(summary: dict[str, Any] | None, group: str, stat: str) -> float | None:
    if summary is None or not isinstance(summary.get(group), dict):
        return None
    value = summary[group].get(stat)
    return float(value) if isinstance(value, int | float) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def ratios_to_easy(entries: Sequence[dict[str, Any]]) -> dict[str, Ratios]:
    """Per cell name, its ratios to the EASY cell with the same reference key. An entry has
    the cell's `cell` name, `spec`, `host` and `summary` (None when it did not run)."""
    easy_by_key = {reference_key(e["spec"]): e for e in entries
                   if e["spec"]["dispatcher"] == REFERENCE}
    out: dict[str, Ratios] = {}
    for entry in entries:
        easy = easy_by_key.get(reference_key(entry["spec"]))
        mine = entry["summary"]
        ref = easy["summary"] if easy else None
        ran = mine is not None and ref is not None
        out[entry["cell"]] = Ratios(
            reference=easy["cell"] if easy else None,
            bounded_slowdown=ratio(_value(mine, "bounded_slowdown", "mean"),
                                   _value(ref, "bounded_slowdown", "mean")),
            decision_seconds=ratio(_value(mine, "decision_seconds", "mean"),
                                   _value(ref, "decision_seconds", "mean")),
            same_host=(entry["host"] == easy["host"]) if ran and easy else None,
        )
    return out


def campaign_document(meta: dict[str, Any], cells: Sequence[CellSpec],
                      results: dict[str, CellResult]) -> dict[str, Any]:
    """What `campaign.json` holds: the settings, then one entry per cell in matrix order."""
    entries: list[dict[str, Any]] = []
    for cell in cells:
        result = results.get(cell["name"])
        status = "pending" if result is None else "failed" if result["error"] else "ok"
        entries.append({
            "cell": cell["name"],
            "status": status,
            "spec": dict(cell),
            "host": result["host"] if result else None,
            "worker": result["worker"] if result else None,
            "cell_seconds": result["seconds"] if result else None,
            "error": result["error"] if result else None,
            "summary": result["summary"] if result else None,
        })
    ratios = ratios_to_easy(entries)
    for entry in entries:
        entry["ratios_to_easy"] = ratios[entry["cell"]]
    return {"campaign": {**meta, "cells": _counts(entries)}, "cells": entries}


def _counts(entries: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {s: sum(e["status"] == s for e in entries) for s in ("ok", "failed", "pending")}


def merged_document(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several campaigns' `campaign.json` as one: their cells in order, ratios recomputed
    (so a cell finds its EASY reference in another part), each part's settings kept."""
    entries = [dict(e) for d in documents for e in d["cells"]]
    names = [e["cell"] for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("the campaigns share cells: "
                         f"{sorted(n for n in names if names.count(n) > 1)[0]}")
    ratios = ratios_to_easy(entries)
    for entry in entries:
        entry["ratios_to_easy"] = ratios[entry["cell"]]
    parts = [d["campaign"] for d in documents]
    return {"campaign": {"parts": parts, "cells": _counts(entries)}, "cells": entries}


def _fmt(value: float | int | None, digits: int = 2, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    return f"{value * scale:,.{digits}f}"


COLUMNS = ("trace", "system", "dispatcher", "predictor", "profile", "jobs",
           "sld mean ± std", "bsld mean ± std", "wait mean ± std [s]", "wait max [h]", "util",
           "decision mean [ms]",
           "decision p50 [ms]", "decision p99 [ms]", "replay [s]", "bsld / EASY",
           "decision / EASY")


def _mean_std(stat: dict[str, Any], digits: int = 2) -> str:
    return f"{_fmt(stat['mean'], digits)} ± {_fmt(stat['std'], digits)}"


def system_label(summary: dict[str, Any]) -> str:
    """The system's name, with the unit rule's scale and accelerator share when not plain."""
    rule = summary.get("unit_rule") or {}
    extra = []
    if rule.get("proc_scale", 1.0) != 1.0:
        extra.append(f"{rule['proc_scale']:g} cores/proc")
    if rule.get("accelerator_share", 0.0) > 0:
        extra.append(f"{rule['accelerator_share']:.0%} ask " + "/".join(rule["accelerators"]))
    name = str(summary["system"]["name"])
    return f"{name} ({', '.join(extra)})" if extra else name


def table_row(entry: dict[str, Any]) -> list[str]:
    """One Markdown row of an "ok" cell (see COLUMNS)."""
    s = entry["summary"]
    r = entry["ratios_to_easy"]
    profile = "-" if s["dispatcher"] in NO_SEARCH else s.get("profile") or "-"
    decision_ratio = _fmt(r["decision_seconds"])
    if r["same_host"] is False:
        decision_ratio += " †"
    return [
        Path(s["trace"]).name, system_label(s), s["dispatcher"], s["predictor"],
        profile, f"{s['jobs']:,}",
        _mean_std(s["slowdown"]), _mean_std(s["bounded_slowdown"]),
        _mean_std(s["wait_seconds"], 0), _fmt(s["wait_seconds"].get("max"), 1, 1 / 3600),
        _fmt(s["utilisation"], 3),
        _fmt(s["decision_seconds"]["mean"], 2, 1000), _fmt(s["decision_seconds"]["p50"], 2, 1000),
        _fmt(s["decision_seconds"]["p99"], 2, 1000), _fmt(s["replay_seconds"], 1),
        _fmt(r["bounded_slowdown"]), decision_ratio,
    ]


def campaign_markdown(document: dict[str, Any]) -> str:
    """`campaign.md`: how it was run, the table of cells that ran, then the failed ones."""
    meta = document["campaign"]
    entries = document["cells"]
    lines = ["# Campaign", ""]
    for part in meta.get("parts", [meta]):
        lines += [f"`{part['command']}`", "",
                  f"{part['started']}, on {part['cluster']}; {part['cells']['ok']} cells ok, "
                  f"{part['cells']['failed']} failed, {part['cells']['pending']} pending; "
                  f"{_fmt(part.get('wall_seconds'), 1)} s wall.", ""]
    lines += [
        "sld = slowdown (wait + run) / run, as the papers; bsld = bounded slowdown (10 s "
        "bound); wait max = the longest wait of a job, in hours; decision = the service's time "
        "per decision; "
        "replay = the whole replay's wall time. `/ EASY`: ratio of the means to the EASY run of "
        "the same trace, system and predictor in this campaign; † = that run was on another "
        "host, so its decision times are not directly comparable.", "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(table_row(e)) + " |" for e in entries if e["status"] == "ok"]
    lines += ["", *matrix_lines(entries)]
    targets = target_lines(entries)
    if targets:
        lines += ["", f"## Targets ({DEFAULT_CP} against EASY, same trace, system, predictor)",
                  "", *targets]
    failed = [e for e in entries if e["status"] != "ok"]
    if failed:
        lines += ["", "## Cells without results", ""]
        for e in failed:
            error = " ".join((e["error"] or "").split())  # one line in the list
            lines.append(f"- `{e['cell']}`: {e['status']}" + (f" — {error}" if error else ""))
    return "\n".join(lines) + "\n"


# Table and figure columns: the contract's order of the dispatchers (baselines first), then the
# installed plugins' (sorted).
DISPATCHER_ORDER = tuple(name for name in DISPATCHERS if name != DEFAULT)


def matrix_lines(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The matrix at a glance: a row per trace, system and predictor, a column per dispatcher,
    each cell "mean bounded slowdown (utilisation, mean decision ms)"."""
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for entry in entries:
        if entry["status"] != "ok":
            continue
        spec, s = entry["spec"], entry["summary"]
        if spec["dispatcher"] not in NO_SEARCH and spec["profile"] not in DEFAULT_PROFILES:
            continue  # one profile per dispatcher: the default
        key = (Path(s["trace"]).name, system_label(s), spec["predictor"])
        rows.setdefault(key, {})[spec["dispatcher"]] = (
            f"{_fmt(s['bounded_slowdown']['mean'])} ({_fmt(s['utilisation'], 3)}, "
            f"{_fmt(s['decision_seconds']['mean'], 0, 1000)} ms)")
    if not rows:
        return []
    names = [d for d in DISPATCHER_ORDER if any(d in r for r in rows.values())]
    names += sorted({d for r in rows.values() for d in r} - set(names))
    return [
        "Per cell: mean bounded slowdown (utilisation, mean decision time).", "",
        "| trace | system | predictor | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
        *(f"| {t} | {sy} | {p} | " + " | ".join(r.get(d, "–") for d in names) + " |"
          for (t, sy, p), r in rows.items()),
    ]


def target_lines(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The issue's targets for each default-dispatcher cell with its EASY reference: met, or
    missed by how much."""
    ok = [e for e in entries if e["status"] == "ok"]
    easy = {reference_key(e["spec"]): e for e in ok if e["spec"]["dispatcher"] == REFERENCE}
    lines = []
    for entry in ok:
        spec = entry["spec"]
        ref = easy.get(reference_key(spec))
        if spec["dispatcher"] != DEFAULT_CP or spec["profile"] not in DEFAULT_PROFILES or not ref:
            continue
        mine, theirs = entry["summary"], ref["summary"]
        label = f"{spec['trace_file']}, {system_label(mine)}, {spec['predictor']}"
        change = mine["bounded_slowdown"]["mean"] / theirs["bounded_slowdown"]["mean"] - 1
        util, util_easy = mine["utilisation"], theirs["utilisation"]
        misses = []
        if theirs["bounded_slowdown"]["mean"] * (1 + BSLD_TARGET) < 1:
            misses.append("not reachable: bounded slowdown is at least 1 and EASY's is "
                          f"{theirs['bounded_slowdown']['mean']:.2f}")
        elif change > BSLD_TARGET:
            misses.append(f"{(change - BSLD_TARGET) * 100:.1f} points short on slowdown")
        if util < util_easy - UTIL_TOLERANCE:
            misses.append(f"utilisation {util_easy - util:.3f} lower")
        verdict = "**met**" if not misses else "**missed**: " + ", ".join(misses)
        lines.append(f"- {label}: bounded slowdown {change:+.1%} against EASY (target "
                     f"≤ {BSLD_TARGET:.0%}), utilisation {util:.3f} against {util_easy:.3f}: "
                     f"{verdict}")
        if "LLNL-Atlas" in spec["trace_file"]:
            mean_ms = mine["decision_seconds"]["mean"] * 1000
            if spec["trace_file"] == LLNL_TRACE and spec["limit_jobs"] is None:
                verdict = ("**met**" if mean_ms < LLNL_DECISION_TARGET_MS else
                           f"**missed** by {mean_ms / LLNL_DECISION_TARGET_MS:.1f}×")
                where = "over the full replay"
            else:
                verdict, where = "the target is set for the full trace", "over this part"
            lines.append(f"- {label}: average decision {mean_ms:.1f} ms {where} "
                         f"(target < {LLNL_DECISION_TARGET_MS:.0f} ms): {verdict}")
    return lines


def write_campaign(out: Path, document: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "campaign.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out / "campaign.md").write_text(campaign_markdown(document), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Render campaign.md again from campaign.json, or merge several campaigns into one."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.matrix.report",
        description="Write campaign.md (and campaign.json) again from the campaign.json of "
        "one or more campaign directories; several are merged into one table, each cell "
        "compared with the EASY cell of its trace, system and predictor wherever it ran.")
    parser.add_argument("campaigns", nargs="+", type=Path, metavar="DIR")
    parser.add_argument("--out", type=Path, help="where to write (default: the only DIR)")
    args = parser.parse_args(argv)
    if args.out is None and len(args.campaigns) > 1:
        parser.error("--out is needed to merge several campaigns")
    try:
        documents = [json.loads((d / "campaign.json").read_text(encoding="utf-8"))
                     for d in args.campaigns]
        document = documents[0] if len(documents) == 1 else merged_document(documents)
        if len(documents) == 1:  # the table's format may have changed since: recompute
            ratios = ratios_to_easy(document["cells"])
            for entry in document["cells"]:
                entry["ratios_to_easy"] = ratios[entry["cell"]]
    except (OSError, ValueError, KeyError) as exc:
        print(f"campaign_report: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.campaigns[0]
    write_campaign(out, document)
    print(f"wrote {out / 'campaign.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
