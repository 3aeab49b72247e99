"""Issue #41's frontier: the promise book's ladder against every classical rule, on every pair.

    python -m benchmarks.qos.frontier --workers 2 --out runs/frontier
    python -m benchmarks.qos.frontier --cases kit --predictors walltime --out runs/f-kit
    python -m benchmarks.qos.frontier --from runs/frontier --out runs/frontier-judged
    python -m benchmarks.qos.frontier --from OLD/frontier.json,runs/f-kit --out runs/f-all

Replays, per case and predictor (issue #13's 21 pairs by default), the classical rules (EASY,
EASY-SJBF, EASY-LXF, LOS, conservative; EASY-k gives conservative's figures and is left out)
and each rung of the ladder (`server/domain/promise_ladder.py`: profile `book` with
`promise_after_s` set per rung) as cells of one campaign (`benchmarks.matrix`), side by side,
with deterministic search. The same `--out` again runs only the cells not done yet (resumable:
a cell is kept when `campaign.json` records it ok with the same spec). Then writes
`frontier.md` (per pair every run's mean bounded slowdown, p95 / p99 / longest waits,
utilisation over the makespan and over the arrival window, decision p50 / p99; the dominance
table; the default rung's and the decision-time verdicts), `frontier.json`, and one plot per
pair, `frontier-CASE-PREDICTOR.png` (`ladder_plot`). The verdicts: `ladder_verdicts`.

`--from` judges runs made before, and takes a judged `frontier.json` as well as campaign and
simulate directories: a frontier run in parts, whose earlier parts' runs are no longer on the
machine, is judged whole from the earlier judgement and the new parts' runs (a run found in
both is the directory's).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.matrix import campaign
from benchmarks.matrix.cells import CellSpec
from benchmarks.qos.cases import CASES, ISSUE_CASES, PREDICTORS, Case, with_protocol
from benchmarks.qos.frontier_tables import document, markdown
from benchmarks.qos.ladder_plot import plot_pair
from benchmarks.qos.ladder_verdicts import (
    RULES,
    Pair,
    merged,
    pairs_of,
    pairs_of_judged,
    rung_names,
)
from benchmarks.qos.targets import DEFAULT_TRACES, load_runs, trace_of
from hpcdispatch.server.domain.promise_ladder import rung

MODEL = "pcp20"  # the default dispatcher: the ladder is its `book` profile's
PROFILE = "book"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.qos.frontier", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(ISSUE_CASES), help="comma list of cases")
    p.add_argument("--predictors", default=",".join(PREDICTORS), help="comma list")
    p.add_argument("--rungs", default=",".join(rung_names()), help="comma list of rungs")
    p.add_argument("--rules", default=",".join(RULES), help="comma list of classical rules")
    p.add_argument("--model", default=MODEL, help="CP dispatcher of the ladder (pcp20)")
    p.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES)
    p.add_argument("--limit-jobs", type=int, help="first N jobs of each case (partial)")
    p.add_argument("--sequences", type=int, help="RLScheduler case: sequences (default 10)")
    p.add_argument("--timeout", type=float, default=300.0, help="deadline per call, seconds")
    p.add_argument("--workers", type=int, help="local Dask cluster: worker processes")
    p.add_argument("--scheduler", help="Dask scheduler address; default: a local cluster")
    p.add_argument("--from", dest="sources", help="comma list to judge instead of running: "
                   "campaign or simulate directories, judged frontier.json files")
    p.add_argument("--out", type=Path, help="results directory (default: runs/frontier-DATE)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and stop")
    p.add_argument("--no-progress", action="store_true")
    return p


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def cells_for(args: argparse.Namespace) -> list[CellSpec]:
    """The rules' cells and one cell per rung, per case (names prefixed by the case)."""
    rungs = [rung(name) for name in _split(args.rungs)]
    cells: dict[str, CellSpec] = {}
    for key in _split(args.cases):
        case = with_protocol(_case(key), args.sequences, None, None)
        rules = campaign.matrix(campaign.parse_args(
            _case_flags(case, args, ",".join(_split(args.rules)))))
        model = campaign.matrix(campaign.parse_args(
            [*_case_flags(case, args, args.model), "--profiles", PROFILE]))
        for cell in rules:  # EASY comes with both matrices: the rules' is kept
            cell["name"] = f"{case.key}__{cell['name']}"
            cells.setdefault(cell["name"], cell)
        for cell in model:
            if cell["dispatcher"] != args.model:
                continue
            for step in rungs:
                each = CellSpec(**cell)
                each["search"] = {"promise_after_s": step.promise_after_s}
                each["name"] = f"{case.key}__{cell['name']}__{step.name}"
                cells[each["name"]] = each
    return list(cells.values())


def _case_flags(case: Case, args: argparse.Namespace, dispatchers: str) -> list[str]:
    """The campaign matrix's flags for `dispatchers` on `case` (trace, system, selection)."""
    flags = ["--traces", trace_of(case, args.traces_dir), "--dispatchers", dispatchers,
             "--predictors", ",".join(case.predictors_of(tuple(_split(args.predictors)))),
             "--proc-scale", str(case.proc_scale),
             "--accelerator-share", str(case.accelerator_share),
             "--timeout", str(args.timeout)]
    flags += ["--systems", case.system] if case.system else []
    flags += ["--limit-jobs", str(args.limit_jobs)] if args.limit_jobs else []
    flags += ["--records", case.records] if case.records else []
    if case.sequences is not None:
        flags += ["--sequences", str(case.sequences), "--sequence-length",
                  str(case.sequence_length), "--seed", str(case.seed)]
    return flags


def _case(key: str) -> Case:
    if key not in CASES:
        raise campaign.UsageError(f"unknown case {key!r}; one of {list(CASES)}")
    return CASES[key]


def _run(args: argparse.Namespace, command: str, out: Path) -> tuple[list[Path], list[str]]:
    """Run (or resume) the campaign; its directory and the header lines."""
    cells = cells_for(args)
    if args.dry_run:
        for cell in cells:
            print(cell["name"])
        raise SystemExit(0)
    campaign_dir = out / "campaign"
    done = campaign.finished_cells(campaign_dir, cells)
    results = campaign.run_cells(cells, campaign_dir, command, workers=args.workers,
                                 scheduler=args.scheduler, progress=not args.no_progress,
                                 done=done)
    failed = sum(1 for r in results.values() if r["error"]) + len(cells) - len(results)
    return [campaign_dir], [f"{len(cells)} cells ({len(done)} kept from an earlier run), "
                            f"{failed} failed; runs in {campaign_dir}/.", ""]


def judged_pairs(sources: Sequence[Path]) -> list[Pair]:
    """The pairs of judged `frontier.json` files and of the runs under directories (these
    replace a judged file's run of the same pair and name)."""
    documents = [s for s in sources if s.suffix == ".json"]
    for doc in documents:
        if not doc.is_file():
            raise ValueError(f"--from: no such file {doc}")
    earlier = [pairs_of_judged(json.loads(d.read_text(encoding="utf-8"))) for d in documents]
    return merged(*earlier, pairs_of(load_runs([s for s in sources if s not in documents])))


def run(args: argparse.Namespace, command: str) -> int:
    out: Path = args.out or Path(time.strftime("runs/frontier-%Y%m%d-%H%M%S"))
    if args.sources:
        sources = [Path(s) for s in _split(args.sources)]
        header = [f"Judged from {', '.join(map(str, sources))}.", ""]
    else:
        sources, header = _run(args, command, out)
    pairs = judged_pairs(sources)
    out.mkdir(parents=True, exist_ok=True)
    plots = {}
    for pair in pairs:
        name = f"frontier-{pair.case.key}-{pair.predictor}.png"
        if plot_pair(pair, out / name):
            plots[(pair.case.key, pair.predictor)] = name
    text = markdown(pairs, [f"`{command}`", "", *header], plots)
    (out / "frontier.md").write_text(text + "\n", encoding="utf-8")
    meta = {"command": command, "written": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    (out / "frontier.json").write_text(json.dumps(document(pairs, meta), indent=2) + "\n",
                                       encoding="utf-8")
    print(text)
    print(f"frontier: {out / 'frontier.md'}, frontier.json and {len(plots)} plots in {out}/",
          file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "benchmarks.qos.frontier", *argv])
    try:
        return run(build_parser().parse_args(argv), command)
    except (campaign.UsageError, OSError, ValueError) as exc:
        print(f"frontier: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
