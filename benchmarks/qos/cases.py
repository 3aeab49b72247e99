"""Issue #13's cases (traces, presets, RLScheduler's protocol) and which case a run belongs to.

A case is one replay setting: a trace (file name under `--traces-dir`, or the bundled
slice), a system, the workload rule's knobs, and a selection of the trace (a record window or
RLScheduler's sequences). `case_of` recognises a run's case from its summary alone, so the
same judging works on runs made by `benchmarks.qos.targets`, on earlier campaigns
(`matrix-llnl-slice.yaml` with its slice file, `preset-kit.yaml`, ...) and on plain
`hpcdispatch simulate` output directories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcdispatch.catalog import CP_DISPATCHER_NAMES, dispatcher_names, registered_dispatchers
from hpcdispatch.sim_adapter.replay import trace_name

KTH = "KTH-SP2-1996-2.1-cln.swf.xz"
LUBLIN = "lublin_256.swf.xz"
LLNL = "LLNL-Atlas-2006-2.1-cln.swf.xz"
BUNDLED = "bundled"
BUNDLED_STEM = "KTH-SP2-1996-2.1-cln.slice"
PREDICTORS = ("walltime", "last-two", "data-driven", "oracle")
# Issue #13's baselines (its `bsld` target is against the best of these), then issue #24's
# classical reorderings that keep EASY's head reservation. `conservative` now keeps the classic
# guarantee (no job starts later than its reservation at arrival); runs made before #24 used
# the rebuild-at-each-decision version.
ISSUE13_BASELINES = ("easy", "easy-sjf", "easy-wfp3", "easy-unicef", "easy-f1", "conservative")
ISSUE24_BASELINES = ("easy-sjbf", "easy-lxf", "los", "easy-k")
BASELINES = (*ISSUE13_BASELINES, *ISSUE24_BASELINES)
REFERENCE = "easy"
EVERY = "all"  # --baselines word: the baselines above and every installed plugin's dispatcher


def baseline_names() -> tuple[str, ...]:
    """What `--baselines` accepts: the issues' baselines, then the dispatchers plugins register
    (docs/plugins.md), which are judged as baselines are, by name."""
    built_in = registered_dispatchers().built_in_names()
    plugins = (n for n in dispatcher_names() if n not in built_in)
    return (*BASELINES, *plugins)
DEFAULT = "default"  # the dispatcher word for the server's default (dispatcher and profile)


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    title: str
    trace: str  # file name under the traces directory, or BUNDLED
    system: str | None = None  # None: from the trace header
    proc_scale: float = 1.0
    accelerator_share: float = 0.0
    records: str | None = None  # FIRST:LAST, 0-based, half-open
    sequences: int | None = None  # RLScheduler's protocol
    sequence_length: int = 1024
    seed: int = 1
    predictors: tuple[str, ...] | None = None  # fixed predictors (None: the chosen ones)
    stems: tuple[str, ...] = ()  # other trace stems that are this case (slice files)
    issue: bool = True  # one of issue #13's cases (bundled is a smoke test only)
    moderate: bool = False  # moderately loaded: issue #24's ≥ 20 % below EASY's mean target

    @property
    def rlscheduler(self) -> bool:
        return self.sequences is not None

    def predictors_of(self, chosen: tuple[str, ...]) -> tuple[str, ...]:
        return self.predictors if self.predictors is not None else chosen


CASES: dict[str, Case] = {c.key: c for c in (
    Case("kth", "KTH-SP2, whole trace", KTH, moderate=True),
    Case("lublin", "lublin_256, whole trace", LUBLIN),
    Case("llnl-stretch", "LLNL-Atlas, loaded stretch (records 5,501–8,500)", LLNL,
         records="5500:8500", stems=("LLNL-Atlas-5500",), moderate=True),
    Case("kit", "KIT ForHLR II preset (LLNL-Atlas stretch, 2.5 cores per processor)", LLNL,
         system="kit-forhlr2", proc_scale=2.5, records="5500:8500", stems=("LLNL-Atlas-5500",),
         moderate=True),
    Case("eurora", "Eurora preset (lublin_256 records 5,501–7,000, 4 cores per processor, "
         "30 % GPU / MIC)", LUBLIN, system="eurora", proc_scale=4.0, accelerator_share=0.3,
         records="5500:7000", stems=("lublin_256-5500",)),
    Case("rlscheduler", "RLScheduler's Lublin-1 protocol (10 sequences of 1,024 lublin_256 "
         "jobs, seed 1, empty machine, exact estimates)", LUBLIN, sequences=10,
         predictors=("walltime",)),
    # Unseen by the ladder's choice (issue #41): judged with its values fixed before the run.
    Case("rlscheduler-seed2", "RLScheduler's Lublin-1 protocol, seed 2 (10 other sequences of "
         "1,024 lublin_256 jobs; unseen)", LUBLIN, sequences=10, seed=2,
         predictors=("walltime",), issue=False),
    Case("llnl-early", "LLNL-Atlas, another stretch (records 1–3,000; unseen)", LLNL,
         records="0:3000", stems=("LLNL-Atlas-0",), issue=False),
    Case("eurora-early", "Eurora preset on another stretch of lublin_256 (records "
         "2,501–4,000, 4 cores per processor, 30 % GPU / MIC; unseen)", LUBLIN, system="eurora",
         proc_scale=4.0, accelerator_share=0.3, records="2500:4000",
         stems=("lublin_256-2500",), issue=False),
    # Issue #50: a site's rules (two partitions, a weekly maintenance window of the batch nodes).
    Case("atlas-partitions", "LLNL-Atlas loaded stretch (records 5,501–8,500) on the "
         "atlas-partitions preset (pbatch / pdebug, Tuesdays 06:00–10:00 maintenance)", LLNL,
         system="atlas-partitions", records="5500:8500", issue=False),
    Case("atlas-priority", "LLNL-Atlas loaded stretch (records 5,501–8,500) on the "
         "atlas-priority preset (atlas-partitions with pdebug's jobs first)", LLNL,
         system="atlas-priority", records="5500:8500", issue=False),
    Case("bundled", "bundled KTH-SP2 slice (smoke test, not an issue #13 case)", BUNDLED,
         issue=False),
)}
ISSUE_CASES = tuple(k for k, c in CASES.items() if c.issue)
# The issue's (case, predictor) pairs: 21 (five cases × four predictors, and RLScheduler's)
ISSUE_PAIRS = sum(len(CASES[k].predictors_of(PREDICTORS)) for k in ISSUE_CASES)
RLSCHEDULER_POLICY = 58.64  # RLScheduler's learned policy on Lublin-1 (its published table)


def with_protocol(case: Case, sequences: int | None, length: int | None,
                  seed: int | None) -> Case:
    """The RLScheduler case with another count / length / seed (a quicker, partial run)."""
    if not case.rlscheduler:
        return case
    from dataclasses import replace

    return replace(case, sequences=sequences or case.sequences,
                   sequence_length=length or case.sequence_length,
                   seed=case.seed if seed is None else seed)


def _window(records: Any) -> str | None:
    if not isinstance(records, dict):
        return None
    return f"{records.get('first')}:{records.get('last')}"


def case_of(summary: dict[str, Any]) -> str | None:
    """The key of the case a run (or a cell's sequences) belongs to, or None: not one of
    CASES (another trace, system, workload rule or selection)."""
    stem = trace_name(Path(str(summary.get("trace", ""))))
    system = str((summary.get("system") or {}).get("name", ""))
    rule = summary.get("unit_rule") or {}
    scale = float(rule.get("proc_scale", 1.0))
    share = float(rule.get("accelerator_share", 0.0))
    window = _window(summary.get("records"))
    sequenced = bool(summary.get("sequences") or summary.get("sequence"))
    seed = (summary.get("sequences") or summary.get("sequence") or {}).get("seed")
    for case in CASES.values():
        stems = (BUNDLED_STEM,) if case.trace == BUNDLED else (trace_name(Path(case.trace)),)
        if stem in stems:
            selection_ok = window == case.records
        elif stem in case.stems:
            selection_ok = window is None  # a slice file of exactly the case's records
        else:
            continue
        preset_ok = system == case.system if case.system else system in (stem, *case.stems)
        if (selection_ok and preset_ok and sequenced == case.rlscheduler
                and (not sequenced or seed is None or seed == case.seed)
                and abs(scale - case.proc_scale) < 1e-9
                and abs(share - case.accelerator_share) < 1e-9):
            return case.key
    return None


def run_key(summary: dict[str, Any]) -> str:
    """How a run is named in the tables: a baseline by its name, the server's default as
    DEFAULT, any other CP run as dispatcher@profile."""
    dispatcher = str(summary.get("dispatcher", "?"))
    if summary.get("dispatcher_requested") == DEFAULT:
        return DEFAULT
    if dispatcher not in CP_DISPATCHER_NAMES:  # fcfs, the baselines, the plugins' dispatchers
        return dispatcher
    return f"{dispatcher}@{summary.get('profile') or '?'}"
