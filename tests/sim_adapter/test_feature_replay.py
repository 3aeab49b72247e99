"""Replays whose jobs require node features (issue #50, item 4): the system file gives the jobs
of a partition (`partition_features`) or of an SWF queue (`swf_queue_features`) a feature
requirement, as Slurm's --constraint writes it ("a|b", "a&b"). The preset atlas-features
(atlas-partitions, and every pbatch job requiring "ib_ddr|ib_qdr", which 64 batch nodes have
neither of) on the bundled LLNL-Atlas trace, replayed for real in-process and through the gRPC
stream under FCFS and EASY: no batch job ever holds a node without InfiniBand, and the control
without the requirement does place some there. What the file gets wrong names the file, the
line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.record_window import iter_selected_jobs
from hpcdispatch.sim_adapter.simulator import NEVER_FITS, Simulator
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs
from hpcdispatch.sim_adapter.workload import rule_for_system
from hpcdispatch.snapshot import Decision
from hpcdispatch.systems import PRESET_DIR, System, load_system
from tests.sim_adapter.test_site_rules_replay import (
    ATLAS,
    LUBLIN,
    RECORDS,
    _Recording,
    crossing,
    into_windows,
    kept_jobs,
    replayed,
)
from tests.sim_adapter.test_site_rules_replay import target as target  # the module's service

PRESET = "atlas-features"
NO_IB = {f"atlas{i:04d}" for i in range(1025, 1089)}  # pbatch nodes with neither feature
TOO_WIDE = 8192  # cores: a batch job wider than the InfiniBand nodes never fits


def _wide_batch_jobs() -> int:
    return sum(j.swf_partition == 1 and j.width > TOO_WIDE
               for j in iter_selected_jobs(ATLAS, RECORDS, CleaningStats()))


def on_nodes_without_ib(jobs: list[dict[str, str]]) -> list[str]:
    return [j["job_id"] for j in jobs
            if j["partitions"] == "pbatch" and not NO_IB.isdisjoint(j["nodes"].split())]


@pytest.mark.parametrize("dispatcher", ["fcfs", "easy"])
@pytest.mark.parametrize("path", ["in-process", "grpc-stream"])
def test_batch_jobs_run_only_on_nodes_with_one_of_their_features(
        dispatcher: str, path: str, target: str, tmp_path: Path) -> None:
    summary, jobs = replayed(LocalService() if path == "in-process" else target, tmp_path,
                             dispatcher, system=PRESET)
    system = load_system(PRESET)
    wide = _wide_batch_jobs()
    assert wide > 0
    assert summary["dropped_in_replay"].get(NEVER_FITS) == wide
    assert summary["jobs"] == len(jobs) == kept_jobs(RECORDS) - wide
    assert summary["fallback_decisions"] == 0
    assert summary["system"]["job_features"] == {
        "partitions": {"pbatch": {"required": [], "one_of": [["ib_ddr"], ["ib_qdr"]]}},
        "swf_queues": {}}
    assert on_nodes_without_ib(jobs) == []
    assert crossing(system, jobs) == []
    assert into_windows(system, jobs) == []
    # and the jobs wider than one fabric did span both: the OR holds node by node
    ddr = {f"atlas{i:04d}" for i in range(1, 513)}
    assert any(not ddr.isdisjoint(j["nodes"].split()) and not ddr.issuperset(j["nodes"].split())
               for j in jobs if j["partitions"] == "pbatch")


def test_without_the_requirement_batch_jobs_use_the_nodes_without_ib(tmp_path: Path) -> None:
    """The control: the preset less `partition_features` puts batch jobs on the 64 nodes."""
    data = yaml.safe_load((PRESET_DIR / f"{PRESET}.yaml").read_text(encoding="utf-8"))
    del data["partition_features"]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(data), encoding="utf-8")
    _, jobs = replayed(LocalService(), tmp_path / "run", "fcfs", system=str(bare))
    assert on_nodes_without_ib(jobs)


SITE = """\
groups:
  - {prefix: n, count: 256, capacity: {core: 1}}
features:
  fast: "n[001-064]"
  big: "n[065-128]"
  gpu: "n[033-096]"
swf_queue_features:
  0: "fast|big&gpu"
"""


def test_a_queues_jobs_carry_its_features_to_the_service(tmp_path: Path) -> None:
    """Lublin-1's jobs are all of SWF queue 0: each is sent with the feature alternatives of
    "fast|big&gpu", folded left to right as Slurm reads it: (fast or big) and gpu."""
    path = tmp_path / "site.yaml"
    path.write_text(SITE, encoding="utf-8")
    system = load_system(str(path))
    assert system.swf_queue_features == {0: ((), (("fast", "gpu"), ("big", "gpu")))}
    backend = _Recording(lambda s: Decision(s.time))
    simulator = Simulator(system, rule_for_system(system), backend, RunRecorder())
    with pytest.raises(Exception, match="stalled"):  # it starts nothing
        simulator.run(list(iter_jobs(LUBLIN, CleaningStats(), limit=3)))
    queued = backend.snapshots[0].queued
    assert {q.feature_alternatives for q in queued} == {(("fast", "gpu"), ("big", "gpu"))}
    nodes = {n.id: n for n in backend.snapshots[0].nodes}
    assert [n for n in nodes if queued[0].may_use(nodes[n])] == [
        f"n{i:03d}" for i in range(33, 97)]


def test_a_queue_whose_features_no_node_has_enough_of_drops_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "few.yaml"
    path.write_text("groups: [{prefix: n, count: 256, capacity: {core: 1}}]\n"
                    "features: {fast: n001}\nswf_queue_features: {0: fast}\n", encoding="utf-8")
    system: System = load_system(str(path))
    recorder = RunRecorder()
    simulator = Simulator(system, rule_for_system(system), _Recording(lambda s: Decision(s.time)),
                          recorder)
    jobs = [j for j in iter_jobs(LUBLIN, CleaningStats(), limit=50) if j.width > 1][:3]
    simulator.run(jobs)
    assert recorder.dropped == {NEVER_FITS: 3}


BROKEN = {
    "unknown-feature.yaml": (
        "groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nfeatures: {fast: n1}\n"
        "partitions: {a: 'n[1-4]'}\npartition_features:\n  a: fast|big\n",
        "line 5: partition_features 'a': 'big' is no feature of 'features' (fast)"),
    "unknown-partition.yaml": (
        "groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nfeatures: {fast: n1}\n"
        "partition_features:\n  batch: fast\n",
        "line 4: partition_features: 'batch' is no partition of 'partitions' (none given)"),
    "matching-or.yaml": (
        "groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nfeatures: {fast: n1}\n"
        "swf_queue_features:\n  1: '[fast]'\n",
        "line 4: swf_queue_features '1': '[fast]' is not a feature, a list of features"),
    "queue-number.yaml": (
        "groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nfeatures: {fast: n1}\n"
        "swf_queue_features:\n  batch: fast\n",
        "line 4: swf_queue_features: 'batch' is not an SWF queue number"),
    "not-a-mapping.yaml": (
        "groups: [{prefix: n, count: 4, capacity: {core: 1}}]\nfeatures: {fast: n1}\n"
        "swf_queue_features: fast\n",
        "line 3: 'swf_queue_features' must be a mapping of the trace's SWF queue numbers"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_wrong_feature_requirement_names_the_file_the_line_and_the_key(
        tmp_path: Path, name: str) -> None:
    text, expected = BROKEN[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        load_system(str(tmp_path / name))
    assert str(error.value).startswith(f"system {tmp_path / name}, {expected}"), error.value
