"""Cross-check against AccaSim: FIFO + first fit there, FCFS + first fit here, same starts.

AccaSim 1.1.3 maps each SWF processor to one unit of one core (requested_nodes = procs) and
never kills a job, so the traces given to both simulators have every run time within its
requested time and at least 1 s (AccaSim does not re-dispatch after a zero-length job). Our
replay uses the "core" unit rule and DispatchRequest.allocator = ALLOCATOR_FIRST_FIT.
"""

from __future__ import annotations

import collections
import collections.abc
import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.sim_adapter.adapter import DispatchSettings, GrpcBackend
from hpcdispatch.sim_adapter.records import DecisionRecord, JobRecord
from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.simulator import Simulator
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, iter_records
from hpcdispatch.sim_adapter.workload import UnitRule
from hpcdispatch.systems import homogeneous
from tests.processes import quiet_embedded_service

collections.Mapping = collections.abc.Mapping  # type: ignore[attr-defined]  # AccaSim needs it
accasim_simulator = pytest.importorskip("accasim.base.simulator_class")
from accasim.base.additional_data import AdditionalData  # noqa: E402
from accasim.base.allocator_class import FirstFit  # noqa: E402
from accasim.base.scheduler_class import FirstInFirstOut  # noqa: E402

Starts = tuple[int, list[int]]  # start time, node indices


class _Starts(AdditionalData):
    """Collects (start time, node indices) of every finished AccaSim job."""

    found: ClassVar[dict[str, Starts]] = {}

    def exec_before_submission(self, *args: object) -> None: ...
    def exec_after_submission(self, *args: object) -> None: ...
    def exec_before_dispatching(self, *args: object) -> None: ...
    def exec_after_dispatching(self, *args: object) -> None: ...
    def exec_before_completion(self, *args: object) -> None: ...
    def stop(self, *args: object) -> None: ...

    def exec_after_completion(self, removed: list[object]) -> None:
        for e in removed:
            nodes = [int(n.rsplit("_", 1)[1]) for n in e.assigned_nodes]  # type: ignore[attr-defined]
            _Starts.found[e.id] = (e.start_time, nodes)  # type: ignore[attr-defined]


def accasim_starts(trace: Path, nodes: int, cores: int, out: Path) -> dict[str, Starts]:
    config = out / "sys.json"
    config.write_text(json.dumps({"groups": {"g": {"core": cores}}, "resources": {"g": nodes}}))
    _Starts.found = {}
    logging.getLogger("accasim").setLevel(logging.WARNING)
    sim = accasim_simulator.Simulator(
        str(trace), str(config), FirstInFirstOut(FirstFit()), additional_data=[_Starts],
        RESULTS_FOLDER_PATH=str(out / "accasim"), scheduling_output=False,
        statistics_output=False, show_statistics=False,
    )
    sim.start_simulation()
    return dict(_Starts.found)


class _Collect:
    def __init__(self) -> None:
        self.jobs: dict[str, JobRecord] = {}

    def job_finished(self, record: JobRecord) -> None:
        self.jobs[record.id] = record

    def decision_made(self, record: DecisionRecord) -> None: ...
    def job_dropped(self, reason: str) -> None:
        raise AssertionError(f"job dropped: {reason}")


def our_starts(target: str, trace: Path, nodes: int, cores: int) -> dict[str, Starts]:
    system = homogeneous("x", nodes, {"core": cores})
    collect = _Collect()
    template = DispatchSettings(dispatcher="fcfs", predictor="walltime",
                                allocator="first-fit").template()
    with DispatcherClient(target, timeout=60) as client:
        Simulator(system, UnitRule(cores_per_node=cores, mode="core"),
                  GrpcBackend(client, template), collect).run(iter_jobs(trace, CleaningStats()))
    order = {n.id: i + 1 for i, n in enumerate(system.nodes())}
    # r.nodes: the distinct nodes of the job, as node indices 1..N like AccaSim's node_1..N
    return {j: (r.start, sorted(order[n] for n in r.nodes)) for j, r in collect.jobs.items()}


def write_trace(path: Path, lines: list[list[int]], max_nodes: int, max_procs: int) -> Path:
    head = f"; MaxNodes: {max_nodes}\n; MaxProcs: {max_procs}\n"
    path.write_text(head + "\n".join(" ".join(map(str, f)) for f in lines) + "\n")
    return path


def synthetic(seed: int, jobs: int, max_width: int) -> list[list[int]]:
    rng = random.Random(seed)
    submit, out = 100, []
    for i in range(1, jobs + 1):
        submit += rng.choice([0, 0, 1, 5, 30, 120])
        req = rng.choice([60, 300, 600, 1800])
        run = rng.randint(1, req)
        width = rng.randint(1, max_width)
        out.append([i, submit, -1, run, width, -1, -1, width, req, -1, 1, rng.randint(1, 9),
                    1, -1, 1, -1, -1, -1])
    return out


def kth_slice(count: int) -> list[list[int]]:
    """The bundled KTH slice, run times clamped to [1, requested time]."""
    out: list[list[int]] = []
    for _, r in iter_records(bundled_trace()):
        if len(out) == count:
            break
        run = max(1, min(r.run_time, r.requested_time))
        out.append([r.job_number, r.submit_time, -1, run, r.allocated_procs, -1, -1,
                    r.requested_procs, r.requested_time, -1, r.status, r.user_id, r.group_id,
                    -1, 1, -1, -1, -1])
    return out


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with quiet_embedded_service() as address:
        yield address


def compare(ours: dict[str, Starts], theirs: dict[str, Starts]) -> None:
    assert set(ours) == set(theirs)
    starts_differ = {j: (ours[j][0], theirs[j][0]) for j in ours if ours[j][0] != theirs[j][0]}
    assert not starts_differ, f"start times differ (ours, AccaSim): {starts_differ}"
    nodes_differ = [j for j in ours if ours[j][1] != sorted(set(theirs[j][1]))]
    assert not nodes_differ, f"allocations differ for {nodes_differ[:10]}"


def test_same_starts_as_accasim_on_multicore_nodes(target: str, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "synthetic.swf", synthetic(seed=7, jobs=300, max_width=12),
                        max_nodes=6, max_procs=24)
    ours = our_starts(target, trace, nodes=6, cores=4)
    theirs = accasim_starts(trace, nodes=6, cores=4, out=tmp_path)
    assert len(ours) == 300
    # Not a trivial replay: jobs queue, and units of one job share nodes.
    assert sum(ours[j][0] > int(line[1]) for j, line in
               zip(ours, synthetic(7, 300, 12), strict=False)) > 50
    compare(ours, theirs)


def test_same_starts_as_accasim_on_a_kth_slice(target: str, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "kth.swf", kth_slice(600), max_nodes=100, max_procs=100)
    ours = our_starts(target, trace, nodes=100, cores=1)
    theirs = accasim_starts(trace, nodes=100, cores=1, out=tmp_path)
    assert len(ours) == 600
    compare(ours, theirs)
