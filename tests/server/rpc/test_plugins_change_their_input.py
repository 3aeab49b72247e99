"""A plugin's dispatcher that changes the problem it is given, in place and in any way Python
allows, changes nothing but its own copy (issue #51, item 2), through a real gRPC server on
loopback: a Dispatch, and a session's decision, answered by the fallback are EASY's on the
untouched snapshot, and the session's next decisions are those of a session the plugin never
saw, on a delta (no resync), over unary calls and over a stream.

Each plugin (tests/plugin_packages.py `MUTATING_DISPATCHERS`: node sets cleared, units set,
requests zeroed, the queue renumbered, ...) is made as the server makes a plugin (behind its
guard, from its entry point) and answers in the place of FCFS, so that a request can name it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import distributions
from pathlib import Path

import pytest

from hpcdispatch import catalog
from hpcdispatch.client import DispatcherClient, DispatchSession
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.registrations import DISPATCHER_GROUP, read_group
from hpcdispatch.server.dispatchers import DISPATCHERS, make
from hpcdispatch.server.dispatchers.guard import Guarded
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.plugin_packages import MUTATING_DISPATCHERS, write_broken_plugins

WAIT = 60.0  # seconds: bounds calls of milliseconds; reached only when something is broken
PLUGIN = pb.DISPATCHER_FCFS  # the kind the plugin answers for
STEPS = 4  # decisions per session: the plugin's, EASY's, the plugin's, EASY's


@pytest.fixture
def plug_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """`plug_in(name)`: the broken plugin package's dispatcher `name`, made as the server makes
    a plugin's, answers FCFS's requests."""
    root = write_broken_plugins(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    found = [e for d in distributions(path=[str(root)]) for e in d.entry_points]
    installed = [e.entry_point for e in catalog.registered_dispatchers().entries]
    registrations = read_group(DISPATCHER_GROUP, catalog.DISPATCHER_NAMES, [*installed, *found])

    def plug(name: str) -> None:
        entry = registrations.by_name(name)
        assert entry is not None and not entry.built_in
        dispatcher = make(entry)
        assert isinstance(dispatcher, Guarded)
        monkeypatch.setitem(DISPATCHERS, PLUGIN, dispatcher)  # type: ignore[index]

    yield plug


def request_at(step: int, dispatcher: int) -> pb.DispatchRequest:
    """The cluster at step `step`: a minute later each step, with one more job queued."""
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 40, 0.7, seed=3))
    request.time += 60 * step
    for k in range(step):
        request.queued_jobs.add(id=f"later-{k}", user="u", submit_time=request.time - 60,
                                units=1, unit_request={"core": 2}, requested_time=900)
    request.dispatcher = dispatcher
    request.predictor = pb.PREDICTOR_WALLTIME
    return request


def starts(response: pb.DispatchResponse) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.job_id, tuple(u.node_id for u in s.units)) for s in response.starts]


def plugin_step(step: int) -> bool:
    return step % 2 == 0


def decisions(session: DispatchSession, plugin: bool = True) -> list[pb.DispatchResponse]:
    """The session's decisions at each step: with `plugin`, the plugin's at every other one,
    else EASY's at every step."""
    return [session.decide(request_at(step, PLUGIN if plugin and plugin_step(step)
                                      else pb.DISPATCHER_EASY), timeout=WAIT)
            for step in range(STEPS)]


@pytest.mark.parametrize("name", sorted(MUTATING_DISPATCHERS))
def test_a_plugin_changing_its_problem_changes_no_answer_and_no_session(
    plug_in: Callable[[str], None], serve: Callable[..., RunningServer], name: str,
) -> None:
    server = serve(workers=4)
    with DispatcherClient(server.target, timeout=WAIT) as client:
        untouched = client.dispatch(request_at(0, pb.DISPATCHER_EASY))
        easy_session = client.session(stream=False)
        expected = [starts(r) for r in decisions(easy_session, plugin=False)]
        assert len(untouched.starts) >= 4 and starts(untouched) == expected[0]
        plug_in(name)

        answer = client.dispatch(request_at(0, PLUGIN))
        assert answer.report.status == pb.SOLVE_STATUS_FALLBACK, name
        assert starts(answer) == starts(untouched), name

        for stream in (False, True):
            session = client.session(stream=stream)
            answers = decisions(session)
            assert [starts(r) for r in answers] == expected, (name, stream)
            assert [r.report.status == pb.SOLVE_STATUS_FALLBACK for r in answers] == [
                plugin_step(step) for step in range(STEPS)], (name, stream)
            assert (session.opens, session.resyncs, session.deltas) == (1, 0, STEPS - 1), (
                name, stream, session.reasons)
            session.close()
        easy_session.close()
