"""The same-instances benchmark on a handful of tiny instances, checked against its raw rows."""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from benchmarks.same_instances.capture import (
    CaptureComplete,
    CapturingBackend,
    read_instances,
    write_instances,
)
from benchmarks.same_instances.report import (
    markdown,
    paired_ratios,
    quality_ratios,
    target_check,
    variables,
)
from benchmarks.same_instances.run import ALL_DISPATCHERS, read_rows, run_instances, write_rows
from benchmarks.same_instances.sources import (
    CaptureOptions,
    TraceSlice,
    capture_replay,
    synthetic_set,
)
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.embedded import embedded_server
from hpcdispatch.sim_adapter.adapter import GrpcBackend
from hpcdispatch.sim_adapter.backend import StateChange
from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.snapshot import QueuedJob, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb


class _Echo(GrpcBackend):
    """The gRPC backend's requests, answered here: nothing starts."""

    def __init__(self) -> None:
        self.template = pb.DispatchRequest()
        self.calls = 0

    def dispatch(self, request: pb.DispatchRequest) -> pb.DispatchResponse:
        self.calls += 1
        return pb.DispatchResponse(time=request.time)


def _snapshot(t: int, queued: int) -> Snapshot:
    return Snapshot(t, (), (), tuple(
        QueuedJob(id=f"j{i}", user="", name="", queue="", submit_time=0, units=1,
                  unit_request={"core": 1}, requested_time=10) for i in range(queued)))


def _request(t: int, queued: int) -> pb.DispatchRequest:
    return snapshot_to_pb(_snapshot(t, queued))


def test_capture_keeps_every_nth_eligible_request_and_reads_back(tmp_path: Path) -> None:
    handle = io.BytesIO()
    inner = _Echo()
    backend = CapturingBackend(inner, handle, every=2, min_queued=2, limit=3)
    queues = [1, 2, 3, 0, 2, 5, 1, 2, 4]  # eligible (>= 2): t=1,2,4,5,7,8 -> keep 1,4,7
    with pytest.raises(CaptureComplete):
        for t, q in enumerate(queues):
            backend.decide(StateChange(t, (), (), (), ()), lambda t=t, q=q: _snapshot(t, q))
    assert inner.calls == 8  # the request that completed the capture was still answered
    path = tmp_path / "x.pb"
    path.write_bytes(handle.getvalue())
    assert [r.time for r in read_instances(path)] == [1, 4, 7]
    assert write_instances(path, [_request(9, 300)]) == 1
    (back,) = read_instances(path)
    assert back == _request(9, 300)


def _raw(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_pipeline_ratios_match_the_raw_rows(tmp_path: Path) -> None:
    with embedded_server() as target:
        synthetic = synthetic_set("synth", "eurora", 3, queued=60)  # too many to all start now
        kth = capture_replay(
            TraceSlice("kth", bundled_trace(), 0, 50), target, tmp_path / "kth.pb",
            CaptureOptions(limit=5, every=2, min_queued=2),
        )
        rows = run_instances([synthetic, kth], target)
    assert 1 <= len(kth.requests) <= 5
    assert all(len(r.queued_jobs) >= 2 for r in kth.requests)
    assert len(rows) == (3 + len(kth.requests)) * len(ALL_DISPATCHERS)
    write_rows(rows, tmp_path / "rows.csv")
    assert read_rows(tmp_path / "rows.csv") == rows

    # Recompute from the CSV alone, without the benchmark's helpers.
    raw = _raw(tmp_path / "rows.csv")
    per: dict[tuple[str, str], dict[str, dict[str, str]]] = defaultdict(dict)
    for r in raw:
        per[(r["set"], r["instance"])][r["label"]] = r
    var_ratios: dict[str, list[float]] = defaultdict(list)
    easy_ratios: list[float] = []
    for (set_name, _), labels in per.items():
        assert set(labels) == set(ALL_DISPATCHERS)
        v20 = int(labels["pcp20"]["model_variables"])
        v19 = int(labels["pcp19"]["model_variables"])
        if v20 > 0 and v19 > 0:
            var_ratios[set_name].append(v20 / v19)
        easy_ratios.append(float(labels["pcp20"]["decision_ms"])
                           / float(labels["easy"]["decision_ms"]))
        for r in labels.values():  # heuristics build no model
            if r["dispatcher"] in ("fcfs", "easy"):
                assert r["variables"] == r["model_variables"] == "0" and r["objective"] == ""
    computed = paired_ratios(rows, "pcp20", "pcp19", variables)
    assert {k: sorted(v) for k, v in computed.items()} == {
        k: sorted(v) for k, v in var_ratios.items()}
    assert var_ratios["synth"], "PCP'19 and PCP'20 built models on the synthetic instances"
    # PCP'20's model does not grow with nodes: fewer variables than PCP'19's on 64 nodes.
    assert max(var_ratios["synth"]) < 1

    # Where the service answered without a model (every considered job starts now), the
    # model size still comes from the model built in-process.
    no_search = [r for r in rows if r.dispatcher in ("pcp19", "pcp20")
                 and r.variables == 0 and r.considered > 0]
    assert no_search and all(r.model_variables > 0 for r in no_search)
    check = target_check(rows, "pcp20")
    assert check.ratio is not None
    assert check.ratio.n == len(per)
    assert check.ratio.median == pytest.approx(statistics.median(easy_ratios))

    quality = quality_ratios(rows)
    for (set_name, _), labels in per.items():
        best = max(float(r["started_priority"]) for r in labels.values())
        for label, r in labels.items():
            if best > 0:
                expected = float(r["started_priority"]) / best
                assert expected in [pytest.approx(x) for x in quality[(set_name, label)]]
    assert any(x == pytest.approx(1.0) for x in quality[("synth", "easy")]
               + quality[("synth", "pcp20")])
    assert all(0 <= x <= 1 + 1e-9 for values in quality.values() for x in values)

    text = markdown(rows, "pcp20", "python -m benchmarks.same_instances --test")
    assert f"{check.ratio.median:.2f}× EASY" in text
    assert "| synth | eurora | 64 | 3 |" in text
