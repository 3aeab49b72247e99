"""Replays with a site's rules (issue #50, item 4): the preset atlas-partitions (two
partitions, a weekly maintenance of the batch nodes) on the bundled LLNL-Atlas trace, replayed
for real in-process and through the gRPC stream under FCFS and EASY. What jobs.csv says must
hold: jobs never cross partitions, no job overlaps a maintenance window on its nodes; what the
system file gets wrong is refused naming the file, the line and the key."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.backend import Answer, AnswerReport, StateChange
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.record_window import iter_selected_jobs
from hpcdispatch.sim_adapter.replay import RunSpec, replay, shipped_trace, window_calendar
from hpcdispatch.sim_adapter.simulator import (
    NEVER_BETWEEN_WINDOWS,
    NO_PARTITION,
    InvalidDecisionError,
    Simulator,
)
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, read_header
from hpcdispatch.sim_adapter.window_calendar import WindowCalendar
from hpcdispatch.sim_adapter.workload import rule_for_system
from hpcdispatch.site_calendar import WEEK, TraceClock
from hpcdispatch.snapshot import Decision, JobCompletion, JobStart, Snapshot
from hpcdispatch.systems import PRESET_DIR, System, load_system
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.processes import quiet_embedded_service

ATLAS = shipped_trace("LLNL-Atlas-2006-2.1-cln.swf.xz")
LUBLIN = shipped_trace("lublin_256.swf.xz")
PRESET = "atlas-partitions"
RECORDS = range(0, 1500)  # 1,421 jobs over 3 weeks: three maintenance windows of pbatch


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with quiet_embedded_service() as address:
        yield address


def replayed(target: str | LocalService, out: Path, dispatcher: str, system: str = PRESET,
             records: Sequence[int] = RECORDS) -> tuple[dict[str, Any], list[dict[str, str]]]:
    spec = RunSpec(ATLAS, DispatchSettings(dispatcher=dispatcher, predictor="walltime"),
                   system=system, records=records)
    summary = replay(spec, target, out)
    with (out / "jobs.csv").open(encoding="utf-8") as handle:
        return summary, list(csv.DictReader(handle))


def crossing(system: System, jobs: list[dict[str, str]]) -> list[str]:
    """Jobs placed on a node outside their partitions."""
    partitions_of = {n.id: set(n.partitions) for n in system.nodes()}
    return [j["job_id"] for j in jobs if j["partitions"] and any(
        not partitions_of[n] & set(j["partitions"].split()) for n in j["nodes"].split())]


def into_windows(system: System, jobs: list[dict[str, str]]) -> list[str]:
    """Jobs that held a node while a maintenance window covered it: [start, end) overlaps."""
    calendar = window_calendar(system, read_header(ATLAS))
    last = max(int(j["end"]) for j in jobs)
    windows = [(w, set(w.nodes)) for w in calendar.over(0, last + 1)]
    return [j["job_id"] for j in jobs for w, nodes in windows
            if w.start < int(j["end"]) and int(j["start"]) < w.end
            and not nodes.isdisjoint(j["nodes"].split())]


def kept_jobs(records: Sequence[int]) -> int:
    return sum(1 for _ in iter_selected_jobs(ATLAS, records, CleaningStats()))


@pytest.mark.parametrize("dispatcher", ["fcfs", "easy"])
@pytest.mark.parametrize("path", ["in-process", "grpc-stream"])
def test_the_partitioned_preset_replays_to_the_end_within_its_rules(
        dispatcher: str, path: str, target: str, tmp_path: Path) -> None:
    """Every kept job runs, in its own partition, never into the weekly maintenance; the
    summary says the jobs and waits per partition and the maintenance's node hours."""
    summary, jobs = replayed(LocalService() if path == "in-process" else target, tmp_path,
                             dispatcher)
    system = load_system(PRESET)
    assert summary["path"] == path
    assert summary["jobs"] == len(jobs) == kept_jobs(RECORDS) == 1421
    assert summary["fallback_decisions"] == 0
    assert crossing(system, jobs) == []
    assert into_windows(system, jobs) == []
    partitions = summary["partitions"]
    assert set(partitions) == {"pbatch", "pdebug"}
    assert sum(p["jobs"] for p in partitions.values()) == len(jobs)
    assert partitions["pdebug"]["jobs"] == sum(j["partitions"] == "pdebug" for j in jobs) > 0
    lost = summary["unavailability"]["first_submit_to_last_end"]
    assert lost["windows"] >= 3  # the third is sent only once the first has ended
    assert lost["maintenance_node_hours"] == pytest.approx(lost["windows"] * 1088 * 4, rel=0.34)
    assert summary["system"]["partitions"] == {"pbatch": 1088, "pdebug": 64}


def test_without_the_windows_the_same_replay_runs_jobs_into_them(tmp_path: Path) -> None:
    """The control of the test above: the preset less its windows places jobs across the
    maintenance times (so it is the windows, sent and checked, that keep jobs out)."""
    data = yaml.safe_load((PRESET_DIR / f"{PRESET}.yaml").read_text(encoding="utf-8"))
    del data["windows"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(data), encoding="utf-8")
    _, jobs = replayed(LocalService(), tmp_path / "run", "fcfs", system=str(bare))
    assert into_windows(load_system(PRESET), jobs)
    assert crossing(load_system(PRESET), jobs) == []


def test_jobs_of_a_partition_the_system_lacks_are_dropped_and_counted(tmp_path: Path) -> None:
    """LLNL-Atlas's partitions 3 (pbroke) and 4 (moody20) are not the preset's: such jobs
    are dropped at their submission, counted by reason (docs/replays.md)."""
    records = range(4440, 4500)
    lacking = sum(job.swf_partition in (3, 4)
                  for job in iter_selected_jobs(ATLAS, records, CleaningStats()))
    summary, jobs = replayed(LocalService(), tmp_path, "fcfs", records=records)
    assert lacking > 0
    assert summary["dropped_in_replay"][NO_PARTITION] == lacking
    assert summary["jobs"] == kept_jobs(records) - lacking == len(jobs)


class _Recording:
    """A backend answering `answer(snapshot)`, keeping the snapshots it was sent."""

    def __init__(self, answer: Callable[[Snapshot], Decision]) -> None:
        self.answer = answer
        self.snapshots: list[Snapshot] = []

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        snapshot = whole()
        self.snapshots.append(snapshot)
        return Answer(self.answer(snapshot),
                      AnswerReport("fcfs", "walltime", "", 0, "heuristic", 0, 0, 0.0, ""))

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        pass


SITE = """\
name: lublin-site
groups:
  - {prefix: n, count: 256, capacity: {core: 1}}
partitions:
  all: "n[001-256]"
features:
  fast: ["n[001-128]"]
windows:
  - {nodes: "n[001-128]", every: week, at: "mon 00:00", for: 6h}
  - {nodes: [n200], from: 1d, to: 1d 1h, users: [u1]}
swf_partitions: {}
swf_queue_priority: {0: 7}
"""


def site(tmp_path: Path) -> System:
    path = tmp_path / "site.yaml"
    path.write_text(SITE, encoding="utf-8")
    return load_system(str(path))


def test_each_snapshot_carries_the_sites_rules(tmp_path: Path) -> None:
    """Lublin-1's queue field (0) maps to a priority, nodes carry partitions and features,
    and each decision is sent the windows not yet ended: one-off and the next recurring
    ones (a trace without UnixStartTime starts on a Monday 00:00 UTC)."""
    system = site(tmp_path)
    backend = _Recording(lambda s: Decision(s.time))
    calendar = WindowCalendar(system.windows, TraceClock())
    simulator = Simulator(system, rule_for_system(system), backend, RunRecorder(),
                          calendar=calendar)
    jobs = list(iter_jobs(LUBLIN, CleaningStats(), limit=3))
    with pytest.raises(Exception, match="stalled"):  # it starts nothing
        simulator.run(jobs)
    first = backend.snapshots[0]
    assert {q.priority for q in first.queued} == {7}
    assert first.nodes[0].partitions == ("all",) and first.nodes[0].features == ("fast",)
    assert first.nodes[200].features == ()
    assert [(w.start, w.end, len(w.nodes), w.users) for w in first.windows] == [
        (0, 6 * 3600, 128, ()), (86400, 90000, 1, ("u1",)), (WEEK, WEEK + 6 * 3600, 128, ())]


def test_a_partitions_priority_is_added_to_its_queues(tmp_path: Path) -> None:
    """`partition_priority` (Slurm's partition PriorityTier): a job is sent its SWF queue's
    priority plus its partition's; the preset atlas-priority puts pdebug's jobs first."""
    path = tmp_path / "tiers.yaml"
    path.write_text(SITE.replace("swf_partitions: {}", "swf_partitions: {1: all}\n"
                                 "default_partition: all")
                    + "partition_priority: {all: 30}\nuser_priority: {unknown: 500, u1: 9}\n",
                    encoding="utf-8")
    system = load_system(str(path))
    backend = _Recording(lambda s: Decision(s.time))
    simulator = Simulator(system, rule_for_system(system), backend, RunRecorder(),
                          calendar=WindowCalendar(system.windows, TraceClock()))
    with pytest.raises(Exception, match="stalled"):  # it starts nothing
        simulator.run(list(iter_jobs(LUBLIN, CleaningStats(), limit=3)))
    # Lublin-1's jobs have no user (SWF field 12 is -1): the replay names them "unknown"
    assert {(q.user, q.priority) for q in backend.snapshots[0].queued} == {
        ("unknown", 7 + 30 + 500)}
    tiers = load_system("atlas-priority")
    assert tiers.job_priority(("pdebug",), -1) == 1000
    assert tiers.job_priority(("pbatch",), -1, "u8") == 0
    assert tiers.job_priority(("pbatch",), -1, "u7") == 100
    assert load_system("atlas-partitions").job_priority(("pdebug",), -1) == 0


def test_a_decision_into_a_window_stops_the_replay_naming_it(tmp_path: Path) -> None:
    """The simulator checks every decision a gRPC backend answers against the windows it
    sent: a start whose requested time runs into a window on its nodes is refused."""
    system = site(tmp_path)

    def into_maintenance(s: Snapshot) -> Decision:
        job = s.queued[0]
        return Decision(s.time, [JobStart(job.id, tuple(f"n{i:03d}" for i in
                                                         range(1, job.units + 1)), 1)])

    simulator = Simulator(system, rule_for_system(system), _Recording(into_maintenance),
                          RunRecorder(), calendar=WindowCalendar(system.windows, TraceClock()))
    with pytest.raises(InvalidDecisionError, match=r"into the unavailability window "
                       r"\[0, 21600\) that does not admit it"):
        simulator.run(iter_jobs(LUBLIN, CleaningStats(), limit=1))


def test_a_job_longer_than_the_gap_between_maintenances_is_dropped(tmp_path: Path) -> None:
    """A weekly maintenance of every node leaves 7 days less its length: a job asking for
    more could never start; it is dropped and counted, not left to stall the queue."""
    path = tmp_path / "all.yaml"
    path.write_text("groups: [{prefix: n, count: 256, capacity: {core: 1}}]\n"
                    "windows: [{every: week, at: 'sun 22:00', for: 1d}]\n", encoding="utf-8")
    system = load_system(str(path))
    recorder = RunRecorder()
    simulator = Simulator(system, rule_for_system(system), _Recording(lambda s: Decision(s.time)),
                          recorder, calendar=WindowCalendar(system.windows, TraceClock()))
    job = next(iter_jobs(LUBLIN, CleaningStats(), limit=1))
    simulator.run([replace(job, requested_time=6 * 86400 + 1)])
    assert recorder.dropped == {NEVER_BETWEEN_WINDOWS: 1}


BROKEN = {
    "window-key.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nwindows:\n"
                        "  - every: week\n    at: tue 06:00\n    length: 4h\n",
                        "line 5: unknown key 'length' in window 1; its keys are name"),
    "window-for.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nwindows:\n"
                        "  - {every: week, at: 'tue 06:00'}\n",
                        "line 3: window 1 has no 'for': its length"),
    "window-at.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nwindows:\n"
                       "  - every: week\n    at: '06:00'\n    for: 4h\n",
                       "line 4: window 1: 'at' is \"DAY HH:MM\""),
    "node.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\npartitions:\n"
                  "  a: n[1-2]\n  b: [n3, n9]\n",
                  "line 4: partitions 'b': 'n9' is no node of the system (its nodes: n1 .. n4"),
    "swf.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\npartitions: {a: n1}\n"
                 "swf_partitions:\n  1: a\n  2: batch\n",
                 "line 5: swf_partitions: SWF partition 2 maps to 'batch', which is no "
                 "partition of 'partitions' (a)"),
    "one-off.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nwindows:\n"
                     "  - {from: 100}\n",
                     "line 3: window 1: a one-off window has 'from' and one of 'to'"),
    "tier.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\npartitions: {a: n1}\n"
                  "partition_priority:\n  a: 5\n  debug: 9\n",
                  "line 5: partition_priority: 'debug' is no partition of 'partitions' (a)"),
    "tier-value.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\n"
                        "partitions: {a: n1}\npartition_priority: {a: high}\n",
                        "line 3: partition_priority: the priority of partition 'a' must be a "
                        "whole number, not 'high'"),
    "user-tier.yaml": ("groups: [{prefix: n, count: 4, capacity: {core: 1}}]\n"
                       "user_priority:\n  u1: 5\n  u2: [1]\n",
                       "line 4: user_priority: the priority of user 'u2' must be a whole "
                       "number, not [1]"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_wrong_site_rule_names_the_file_the_line_and_the_key(tmp_path: Path,
                                                               name: str) -> None:
    text, expected = BROKEN[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_system(str(tmp_path / name))
    assert str(error.value).startswith(f"system {tmp_path / name}, {expected}"), error.value


class _Blind:
    """A plugin's dispatcher standing in for FCFS that knows no rule: FCFS itself on the
    problem without its partitions and windows."""

    name = "blind"

    def __init__(self) -> None:
        self.fcfs = DISPATCHERS[pb.DISPATCHER_FCFS]

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        return self.fcfs.decide(replace(problem, eligibility=None), control)


def test_a_refused_decision_is_answered_by_the_fallback_and_the_replay_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The service's check refuses the blind plugin's starts into the maintenance and across
    partitions: the replay takes the fallback's answer, says so in decisions.csv, and runs to
    the end within the rules."""
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, _Blind())
    summary, jobs = replayed(LocalService(), tmp_path, "fcfs")
    assert summary["jobs"] == len(jobs) == kept_jobs(RECORDS)
    with (tmp_path / "decisions.csv").open(encoding="utf-8") as handle:
        reasons = [d["fallback_reason"] for d in csv.DictReader(handle)]
    assert any("unavailability window" in r for r in reasons), sorted(set(reasons))[:5]
    system = load_system(PRESET)
    assert into_windows(system, jobs) == []
    assert crossing(system, jobs) == []
