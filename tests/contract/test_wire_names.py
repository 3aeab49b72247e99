"""Dispatchers and predictors asked for by name on the wire (`*_name` fields, issue #35): the
compatibility rule with the enums, refusals naming the field, sessions, the answer's and
DescribeService's names."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.catalog import DISPATCHER_NAMES, PREDICTOR_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import small_request


def _refused(call: Callable[[], object]) -> tuple[grpc.StatusCode, dict[str, str]]:
    """The status code and {field: description} of a refused call."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    status = rpc_status.from_call(info.value)  # type: ignore[arg-type]
    assert status is not None
    fields = {}
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        fields.update((v.field, v.description) for v in bad.field_violations)
    return info.value.code(), fields  # type: ignore[attr-defined]


def test_a_built_in_answers_to_its_name_as_to_its_enum(client: DispatcherClient) -> None:
    by_name, by_enum, both = small_request(), small_request(), small_request()
    by_name.dispatcher_name, by_name.predictor_name = "easy-sjf", "last-two"
    by_enum.dispatcher, by_enum.predictor = pb.DISPATCHER_EASY_SJF, pb.PREDICTOR_LAST_TWO
    both.dispatcher, both.dispatcher_name = pb.DISPATCHER_EASY_SJF, "easy-sjf"
    answers = [client.dispatch(r) for r in (by_name, by_enum, both)]
    for answer in answers:
        report = answer.report
        assert (report.dispatcher, report.dispatcher_name) == (pb.DISPATCHER_EASY_SJF,
                                                               "easy-sjf")
        assert not report.fallback_reason
    assert answers[0].starts == answers[1].starts == answers[2].starts
    assert (answers[0].report.predictor, answers[0].report.predictor_name) == (
        pb.PREDICTOR_LAST_TWO, "last-two")


def test_a_request_without_names_is_answered_as_before(client: DispatcherClient) -> None:
    """Today's clients: the enum (or the default) decides, and the report names it too."""
    answer = client.dispatch(small_request())
    assert (answer.report.dispatcher, answer.report.dispatcher_name) == (pb.DISPATCHER_PCP20,
                                                                         "pcp20")
    assert answer.report.predictor_name == "data-driven"


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"dispatcher_name": "sjf-nowhere"}, "dispatcher_name", "unknown dispatcher 'sjf-nowhere'"),
    ({"predictor_name": "psychic"}, "predictor_name", "unknown predictor 'psychic'"),
    ({"dispatcher": pb.DISPATCHER_EASY, "dispatcher_name": "fcfs"}, "dispatcher_name",
     "'fcfs' is not DISPATCHER_EASY"),
    ({"predictor": pb.PREDICTOR_WALLTIME, "predictor_name": "oracle"}, "predictor_name",
     "'oracle' is not PREDICTOR_WALLTIME"),
    ({"dispatcher_name": "x" * 5000}, "dispatcher_name", "exceed the limit"),
    ({"dispatcher": 99}, "dispatcher", "unknown dispatcher value 99"),
])
def test_a_name_the_server_cannot_take_is_invalid_argument_naming_the_field(
    client: DispatcherClient, fields: dict[str, object], field: str, words: str,
) -> None:
    request = small_request()
    for name, value in fields.items():
        setattr(request, name, value)
    code, violations = _refused(lambda: client.dispatch(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert words in violations[field]


@pytest.mark.parametrize(("field", "group"), [("dispatcher_name", DISPATCHER_NAMES),
                                              ("predictor_name", PREDICTOR_NAMES)])
def test_an_unknown_name_reads_as_the_field_and_the_names_offered(
    client: DispatcherClient, field: str, group: dict[str, int],
) -> None:
    """Issue #43: the message read "invalid snapshot: ..." for a request whose snapshot was
    fine."""
    request = small_request()
    setattr(request, field, "nowhere")
    with pytest.raises(grpc.RpcError) as info:
        client.dispatch(request)
    what = field.removesuffix("_name")
    assert info.value.details() == (  # type: ignore[attr-defined]
        f"invalid request: 1 problem(s), first: {field}: unknown {what} 'nowhere'; this server "
        f"offers {', '.join(group)}")


def test_sessions_take_names_in_the_snapshot_and_in_deltas(client: DispatcherClient) -> None:
    session = client.session()
    request = small_request()
    request.dispatcher_name, request.predictor_name = "easy-lxf", "walltime"
    first = session.decide(request)  # OpenSession
    request.time += 60
    second = session.decide(request)  # UpdateSession: the client's delta repeats the names
    assert session.deltas == 1
    for answer in (first, second):
        assert (answer.report.dispatcher_name, answer.report.predictor_name) == ("easy-lxf",
                                                                                 "walltime")
    session.close()


def test_an_update_with_a_conflicting_name_is_refused_naming_the_field(
    client: DispatcherClient,
) -> None:
    opened = client._sessions.OpenSession(  # type: ignore[attr-defined]
        pb.OpenSessionRequest(snapshot=small_request()), timeout=120)
    delta = pb.UpdateSessionRequest(session_id=opened.session_id, sequence=1,
                                    time=small_request().time, decide=True,
                                    dispatcher=pb.DISPATCHER_FCFS, dispatcher_name="easy")
    code, violations = _refused(
        lambda: client._sessions.UpdateSession(delta, timeout=120))  # type: ignore[attr-defined]
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "dispatcher_name" in violations


def test_describe_service_lists_every_offered_name(client: DispatcherClient) -> None:
    described = client.describe()
    assert list(DISPATCHER_NAMES) == [n for n in described.dispatcher_names
                                      if n in DISPATCHER_NAMES]
    assert list(PREDICTOR_NAMES) == [n for n in described.predictor_names
                                     if n in PREDICTOR_NAMES]
    assert list(described.dispatchers) == list(DISPATCHER_NAMES.values())
    assert (described.default_dispatcher_name, described.default_predictor_name) == (
        "pcp20", "data-driven")
    assert not described.unavailable
