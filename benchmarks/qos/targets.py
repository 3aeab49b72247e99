"""Issues #13's and #24's targets, measured side by side in one run and printed as met / missed.

Per case (`--cases`, default every case of the issue: kth, lublin, llnl-stretch, kit, eurora,
rlscheduler) and predictor (`--predictors`; RLScheduler's protocol uses walltime, its exact
estimates on lublin_256), every baseline (#13's easy, easy-sjf, easy-wfp3, easy-unicef,
easy-f1, conservative; #24's easy-sjbf, easy-lxf, los, easy-k) and the server's default CP
dispatcher with its default profile (whatever
this checkout's server has: the runs ask for "default", and the output names what it
resolved to), plus any `--candidates dispatcher@profile`. The replays are campaign cells
(`benchmarks.matrix.campaign`: Dask, one `hpcdispatch simulate` per cell, `--workers` at a time, or
`--scheduler`), written under `OUT/campaign/`; the verdicts (`benchmarks/qos/verdicts.py`) go
to `OUT/qos.md` and `OUT/qos.json` and are printed, and each case's frontier plot
(`benchmarks/qos/frontier_plot.py`) to `OUT/frontier-CASE.png`, linked from `qos.md`.

    python -m benchmarks.qos.targets --cases rlscheduler --wall-clock-search \\
        --workers 2 --out runs/qos-rl
    python -m benchmarks.qos.targets --cases kth --predictors walltime --limit-jobs 500 \\
        --out runs/qos-kth500                      # a quick partial run (marked partial)
    python -m benchmarks.qos.targets --from runs/qos-rl,runs/preset-kit --out runs/qos-judged

`--from DIR[,DIR]` judges runs made before instead of running: qos_targets or campaign
directories (`campaign.json`), or `hpcdispatch simulate` output directories (RLScheduler
sequences are put together per run label), or judged `qos.json` files (their runs, by the case
and predictor they were judged under). Each run is matched to a case by its summary
(trace, system, workload rule, record window or sequences). A (case, predictor) without the
default's run or its references is "not measured", never met. `--config FILE.yaml` reads
the same options (benchmarks/campaigns/qos-*.yaml).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.matrix import campaign
from benchmarks.matrix.cells import CellSpec, sequence_summary
from benchmarks.qos.cases import (
    BASELINES,
    BUNDLED,
    CASES,
    DEFAULT,
    EVERY,
    ISSUE_CASES,
    PREDICTORS,
    REFERENCE,
    Case,
    baseline_names,
    with_protocol,
)
from benchmarks.qos.frontier_plot import plot_cases
from benchmarks.qos.tables import document, markdown
from benchmarks.qos.verdicts import Judged, judge
from hpcdispatch.sim_adapter.replay import bundled_trace

DEFAULT_TRACES = bundled_trace().parent  # the traces shipped in hpcdispatch.sim_adapter.data


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.qos.targets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, help="YAML file with any of the options below")
    p.add_argument("--cases", default=",".join(ISSUE_CASES),
                   help=f"comma list of {list(CASES)} (default: the issue's)")
    p.add_argument("--predictors", default=",".join(PREDICTORS), help="comma list")
    p.add_argument("--baselines", default=",".join(BASELINES),
                   help="comma list of baseline dispatchers (easy is always run): "
                   f"{', '.join(baseline_names())} (the installed plugins' dispatchers "
                   f"last), or '{EVERY}' for every one")
    p.add_argument("--candidates", default="", help="comma list of extra CP runs, "
                   "dispatcher@profile (pcp20@papers) or dispatcher (server's profile)")
    p.add_argument("--no-default", action="store_true",
                   help="do not replay the server's default (its runs come from --from "
                   "documents, when judged later)")
    p.add_argument("--default", dest="default_as", metavar="DISPATCHER@PROFILE",
                   help="with --from: count these runs as the default where no run asked "
                   "for the server's default (default: this checkout's server default)")
    p.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES,
                   help="where the traces are (default: the ones shipped in "
                   "hpcdispatch/sim_adapter/data)")
    p.add_argument("--limit-jobs", type=int, help="replay only the first N cleaned jobs of "
                   "each case (verdicts marked partial)")
    p.add_argument("--sequences", type=int, help="RLScheduler case: sequences (default 10; "
                   "fewer: partial)")
    p.add_argument("--sequence-length", type=int, help="RLScheduler case: jobs per sequence "
                   "(default 1024)")
    p.add_argument("--seed", type=int, help="RLScheduler case: seed (default 1)")
    p.add_argument("--wall-clock-search", action="store_true",
                   help="CP search limits in wall-clock time (default: deterministic)")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per call, seconds")
    p.add_argument("--workers", type=int, help="local Dask cluster: worker processes")
    p.add_argument("--scheduler", help="Dask scheduler address; default: a local cluster")
    p.add_argument("--from", dest="sources", help="comma list of directories (or judged "
                   "qos.json files) to judge instead of running")
    p.add_argument("--not-from-documents", metavar="KEY[,KEY]", help="with --from: leave "
                   "out the runs of these dispatchers (or 'default') that judged qos.json "
                   "files hold, e.g. conservative judged before issue #24 fixed it")
    p.add_argument("--out", type=Path, help="results directory (default: runs/qos-DATE)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and stop")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags over `--config` YAML (benchmarks/campaigns/qos-*.yaml) over the defaults."""
    return campaign.parse_with_config(
        build_parser(), argv, paths=("out", "traces_dir"),
        renames={"from": "sources", "default": "default_as"},
    )


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def chosen(args: argparse.Namespace) -> tuple[list[Case], list[str], list[str], list[str]]:
    """(cases, predictors, baselines, candidates) as asked, checked."""
    cases = []
    for key in _split(args.cases):
        if key not in CASES:
            raise campaign.UsageError(f"unknown case {key!r}; one of {list(CASES)}")
        cases.append(with_protocol(CASES[key], args.sequences, args.sequence_length, args.seed))
    predictors = _split(args.predictors)
    for name in predictors:
        if name not in PREDICTORS:
            raise campaign.UsageError(f"unknown predictor {name!r}; one of {list(PREDICTORS)}")
    offered = baseline_names()
    asked = campaign.with_every(_split(args.baselines), offered)
    baselines = [REFERENCE, *(b for b in dict.fromkeys(asked) if b != REFERENCE)]
    for name in baselines:
        if name not in offered:
            raise campaign.UsageError(f"unknown baseline {name!r}; one of {list(offered)}")
    candidates = _split(args.candidates)
    for name in candidates:
        dispatcher, _, profile = name.partition("@")
        if not profile or dispatcher not in campaign.DISPATCHERS or dispatcher in (
                DEFAULT, "fcfs", *BASELINES):
            raise campaign.UsageError(f"candidate {name!r}: expected CP_DISPATCHER@PROFILE, "
                                      "e.g. pcp20@papers")
    if not cases or not predictors:
        raise campaign.UsageError("at least one case and one predictor")
    return cases, predictors, baselines, candidates


def without_runs(document: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """A judged `qos.json` document without the runs of `keys` in its rows."""
    rows = [{**row, "runs": {k: v for k, v in (row.get("runs") or {}).items()
                             if k not in keys}}
            for row in document.get("rows", [])]
    return {**document, "rows": rows}


def trace_of(case: Case, traces_dir: Path) -> str:
    return BUNDLED if case.trace == BUNDLED else str(traces_dir / case.trace)


def cells_for(args: argparse.Namespace) -> list[CellSpec]:
    """Every case's cells, built by the campaign's matrix (names prefixed by the case)."""
    cases, predictors, baselines, candidates = chosen(args)
    runs = [(",".join([*baselines, *([] if args.no_default else [DEFAULT])]), "")]
    runs += [(c.split("@")[0], c.split("@")[1]) for c in candidates]
    cells: dict[str, CellSpec] = {}
    for case in cases:
        trace = trace_of(case, args.traces_dir)
        if trace != BUNDLED and not args.scheduler and not Path(trace).is_file():
            raise campaign.UsageError(f"case {case.key}: no trace {trace} (--traces-dir)")
        for dispatchers, profile in runs:
            flags = ["--traces", trace, "--dispatchers", dispatchers,
                     "--predictors", ",".join(case.predictors_of(tuple(predictors))),
                     "--proc-scale", str(case.proc_scale),
                     "--accelerator-share", str(case.accelerator_share),
                     "--timeout", str(args.timeout)]
            flags += ["--systems", case.system] if case.system else []
            flags += ["--profiles", profile] if profile else []
            flags += ["--limit-jobs", str(args.limit_jobs)] if args.limit_jobs else []
            flags += ["--records", case.records] if case.records else []
            if case.sequences is not None:
                flags += ["--sequences", str(case.sequences), "--sequence-length",
                          str(case.sequence_length), "--seed", str(case.seed)]
            flags += ["--wall-clock-search"] if args.wall_clock_search else []
            for cell in campaign.matrix(campaign.parse_args(flags)):
                cell["name"] = f"{case.key}__{cell['name']}"
                cells.setdefault(cell["name"], cell)  # EASY comes with every matrix once
    return list(cells.values())


def load_runs(sources: Sequence[Path]) -> list[tuple[dict[str, Any], str]]:
    """(summary, where from) of every run under `sources`: campaign cells (a cell of
    sequences already aggregated), or simulate runs (sequences aggregated here)."""
    from hpcdispatch.sim_adapter.report import find_runs

    found: list[tuple[dict[str, Any], str]] = []
    for source in sources:
        doc = next((d / "campaign.json" for d in (source, source / "campaign")
                    if (d / "campaign.json").is_file()), None)
        if doc is not None:
            entries = json.loads(doc.read_text(encoding="utf-8"))["cells"]
            found += [(e["summary"], f"{doc.parent}/{e['cell']}") for e in entries
                      if e["status"] == "ok" and e.get("summary")]
            continue
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for run in find_runs([source]):
            s = run.summary
            if "sequence" not in s:
                found.append((s, str(run.path)))
                continue
            seq = s["sequence"]
            key = (str(run.path.parent), s.get("label"), s.get("trace"), s.get("profile"),
                   json.dumps(s.get("system"), sort_keys=True),
                   json.dumps(s.get("unit_rule"), sort_keys=True), s.get("limit_jobs"),
                   seq.get("length"), seq.get("seed"), seq.get("repeat", 1))
            groups.setdefault(key, []).append(s)
        for key, runs in groups.items():
            found.append((sequence_summary(runs), f"{key[0]} ({key[1]}, sequences)"))
    return found


def server_default() -> str:
    """dispatcher@profile of this checkout's server default (DescribeService)."""
    from hpcdispatch.sim_adapter.in_process_backend import LocalService

    described = LocalService().describe()
    return f"{described.default_dispatcher or '?'}@{described.default_profile}"


def report(judged: Judged, cases: Sequence[Case], out: Path, meta: dict[str, Any],
           header: Sequence[str]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_cases(judged, cases, out)
    text = markdown(judged, cases, header, plots)
    (out / "qos.md").write_text(text + "\n", encoding="utf-8")
    (out / "qos.json").write_text(json.dumps(document(judged, meta), indent=2) + "\n",
                                  encoding="utf-8")
    return text


def run(args: argparse.Namespace, command: str) -> int:
    cases, predictors, baselines, candidates = chosen(args)
    out: Path = args.out or Path(time.strftime("runs/qos-%Y%m%d-%H%M%S"))
    header = [f"`{command}`", ""]
    failed = 0
    documents: list[dict[str, Any]] = []
    if args.sources:
        sources = [Path(s) for s in _split(args.sources)]
        judged_files = [s for s in sources if s.is_file() and s.suffix == ".json"]
        left_out = _split(args.not_from_documents)
        documents = [without_runs(json.loads(s.read_text(encoding="utf-8")), left_out)
                     for s in judged_files]
        runs = load_runs([s for s in sources if s not in judged_files])
        default_as = args.default_as or server_default()
        count = f"{len(runs)} runs" + (f", {len(documents)} judged documents"
                                       if documents else "")
        header += [f"Judged from {', '.join(map(str, sources))} ({count}); runs of "
                   f"{default_as} count as the default where no run asked for the "
                   "server's default.", ""]
        if left_out:
            header += [f"Runs of {', '.join(left_out)} in the judged documents left out.", ""]
    else:
        cells = cells_for(args)
        if args.dry_run:
            for cell in cells:
                print(cell["name"])
            return 0
        campaign_dir = out / "campaign"
        results = campaign.run_cells(cells, campaign_dir, command, workers=args.workers,
                                     scheduler=args.scheduler, progress=not args.no_progress)
        failed = sum(1 for r in results.values() if r["error"]) + len(cells) - len(results)
        runs = load_runs([campaign_dir])
        default_as = args.default_as
        header += [f"{len(cells)} cells, {failed} failed; runs in {campaign_dir}/ "
                   f"(campaign.md has every figure).", ""]
    now = default_as if args.sources and not args.default_as else server_default()
    header += [f"This checkout's server default now (DescribeService): {now}.", ""]
    judged = judge(runs, cases, predictors, baselines, candidates, default_as, documents)
    meta = {"command": command, "written": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "cases": [c.key for c in cases], "predictors": predictors,
            "baselines": baselines, "candidates": candidates}
    print(report(judged, cases, out, meta, header))
    print(f"qos_targets: {out / 'qos.md'}, {out / 'qos.json'} and the frontier plots in "
          f"{out}/", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "benchmarks.qos.targets", *argv])
    try:
        return run(parse_args(argv), command)
    except (campaign.UsageError, OSError, ValueError, yaml.YAMLError) as exc:
        print(f"qos_targets: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
