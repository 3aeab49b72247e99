"""ReportCompletions over real gRPC: bad completions are INVALID_ARGUMENT naming each field, and
a report with any bad completion is rejected whole (nothing stored)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
INT32_MAX = 2**31 - 1


def good_completion(job_id: str = "j1") -> pb.JobCompletion:
    return pb.JobCompletion(job_id=job_id, user="alice", name="lammps", queue="batch", units=2,
                            unit_request={"core": 4, "mem": 8192}, requested_time=3600,
                            start_time=1_000, end_time=2_000)


def violations_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, dict[str, str]]:
    """The error code and the BadRequest's field violations (field -> description)."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    error = info.value
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, f"rich status expected, got {error}"
    found: dict[str, str] = {}
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        found.update((v.field, v.description) for v in bad.field_violations)
    return error.code(), found  # type: ignore[attr-defined]


def _set(**fields: object) -> Callable[[pb.JobCompletion], None]:
    def mutate(c: pb.JobCompletion) -> None:
        for name, value in fields.items():
            setattr(c, name, value)
    return mutate


def _request(**amounts: int) -> Callable[[pb.JobCompletion], None]:
    def mutate(c: pb.JobCompletion) -> None:
        c.ClearField("unit_request")
        c.unit_request.update(amounts)
    return mutate


BAD_COMPLETIONS: dict[str, tuple[Callable[[pb.JobCompletion], None], str]] = {
    # end - start overflowed int64 in SQLite: UNKNOWN before validation covered it.
    "run time overflowing int64": (_set(start_time=INT64_MIN, end_time=INT64_MAX),
                                   "completions[3].start_time"),
    "end time at int64 max": (_set(end_time=INT64_MAX), "completions[3].end_time"),
    "run time beyond 2^31 s": (_set(start_time=0, end_time=2**32), "completions[3].end_time"),
    "end before start": (_set(start_time=50, end_time=40), "completions[3].end_time"),
    "zero units": (_set(units=0), "completions[3].units"),
    "negative units": (_set(units=-3), "completions[3].units"),
    "units beyond max_units": (_set(units=INT32_MAX), "completions[3].units"),
    "empty user": (_set(user=""), "completions[3].user"),
    "empty job id": (_set(job_id=""), "completions[3].job_id"),
    "requested time at int64 max": (_set(requested_time=INT64_MAX),
                                    "completions[3].requested_time"),
    "requested time zero": (_set(requested_time=0), "completions[3].requested_time"),
    "negative amount": (_request(core=-1), 'completions[3].unit_request["core"]'),
    "zero amount": (_request(core=0), 'completions[3].unit_request["core"]'),
    "amount at int64 max": (_request(core=INT64_MAX), 'completions[3].unit_request["core"]'),
    "empty unit request": (_request(), "completions[3].unit_request"),
}


@pytest.mark.parametrize("case", sorted(BAD_COMPLETIONS))
def test_a_bad_completion_rejects_the_whole_report_naming_its_field(
    server: RunningServer, client: DispatcherClient, case: str
) -> None:
    mutate, field = BAD_COMPLETIONS[case]
    batch = [good_completion(f"j{i}") for i in range(5)]
    mutate(batch[3])
    cluster = f"validation-{case}"
    code, found = violations_of(lambda: client.report_completions(batch, cluster=cluster))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in found, found
    assert all(f.startswith("completions[3]") for f in found), found
    # All or nothing: the four valid completions of the report were not stored either.
    assert server.predictors.knowledge_base.count(cluster) == 0


def test_every_bad_completion_of_a_report_is_named(client: DispatcherClient) -> None:
    """Not only the first one: each bad completion is named with its index."""
    batch = [good_completion(f"j{i}") for i in range(4)]
    batch[0].units = 0
    batch[2].user = ""
    batch[2].unit_request["gpu"] = -2
    code, found = violations_of(lambda: client.report_completions(batch))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert set(found) == {"completions[0].units", "completions[2].user",
                          'completions[2].unit_request["gpu"]'}


def test_valid_completions_are_stored(server: RunningServer, client: DispatcherClient) -> None:
    batch = [good_completion(f"j{i}") for i in range(5)]
    # Extremes that are still valid: zero run time, 2^31 s run time, 2^40 amounts.
    batch[1].end_time = batch[1].start_time
    batch[2].end_time = batch[2].start_time + 2**31
    batch[3].unit_request["core"] = 2**40
    assert client.report_completions(batch, cluster="validation-good") == 5
    assert server.predictors.knowledge_base.count("validation-good") == 5


def test_completions_the_store_could_not_keep_are_unavailable_not_acknowledged(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A knowledge base out of reach: UNAVAILABLE (the client retries it), nothing counted."""
    from hpcdispatch.server.predictors.completion_store import StoreUnavailable
    from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

    def unreachable(*args: object, **kwargs: object) -> int:
        raise StoreUnavailable("connection refused")

    monkeypatch.setattr(server.predictors, "learn", unreachable)
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.DispatcherServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ReportCompletions(pb.ReportCompletionsRequest(
                cluster="unreachable", completions=[good_completion("lost")]), timeout=120)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert "none of the 1 completions stored" in info.value.details()  # type: ignore[attr-defined]
