"""A session delta's checks read what the delta changes, not every job the session holds, and
reject what they rejected before (max_total_units with ended and started jobs in one delta);
the settings a delta's options resolve to are made once per distinct request."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, KeysView, ValuesView

import pytest

from hpcdispatch.proto_convert import add_running_jobs
from hpcdispatch.server.config import load_config
from hpcdispatch.server.domain import profiles
from hpcdispatch.server.intake import decision_options
from hpcdispatch.server.intake.session_delta import check_delta
from hpcdispatch.server.rpc.session_service import apply_checked
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.snapshot import RunningJob, UnitAllocation
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb

CONFIG = load_config(env={})
KINDS = [pb.PREDICTOR_WALLTIME]


class NotWalked(dict[str, RunningJob]):
    """The session's running jobs, refusing to be walked whole (looking one up is fine)."""

    def values(self) -> ValuesView[RunningJob]:
        raise AssertionError("the delta check walked every running job")

    def keys(self) -> KeysView[str]:
        raise AssertionError("the delta check walked every running job")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the delta check walked every running job")


def session(nodes: int = 200) -> SessionState:
    system = homogeneous("h", nodes, {"core": 32, "mem": 131072})
    return SessionState("c", synthetic_snapshot(system, 20, 0.6, seed=4))


def started_job(state: SessionState, job_id: str, units: int) -> RunningJob:
    free = [n.id for n in state.nodes if n.id not in state.used][:units]
    return RunningJob(job_id, "u", "", state.time, 600, None,
                      tuple(UnitAllocation(n, {"core": 1}) for n in free))


def delta(state: SessionState, ended: list[str], started: list[RunningJob]
          ) -> pb.UpdateSessionRequest:
    request = pb.UpdateSessionRequest(session_id="s", sequence=state.sequence + 1,
                                      time=state.time + 1, ended_job_ids=ended, decide=True)
    add_running_jobs(request.started, [dataclasses.replace(j, start_time=state.time + 1)
                                       for j in started])
    return request


def test_a_delta_that_ends_and_starts_jobs_is_checked_without_walking_the_running_jobs() -> None:
    state = session()
    ended = [next(iter(state.running))]
    request = delta(state, ended, [started_job(state, "new", 3)])
    state.running = NotWalked(state.running)
    checked = check_delta(state, request, CONFIG, KINDS)
    assert checked.ok, (checked.violations, checked.failure)
    apply_checked(state, request, checked)
    assert "new" in state.running and ended[0] not in state.running


@pytest.mark.parametrize("extra", [0, 1])
def test_max_total_units_counts_the_units_still_held_after_the_ended_jobs(extra: int) -> None:
    state = session()
    first, second = list(state.running)[:2]
    held = sum(len(r.units) for r in state.running.values())
    gone = len(state.running[first].units) + len(state.running[second].units)
    starting = 4
    config = dataclasses.replace(CONFIG, max_total_units=held - gone + starting - 1 + extra)
    request = delta(state, [first, second], [started_job(state, "new", starting)])
    checked = check_delta(state, request, config, KINDS)
    if extra:
        assert checked.ok, checked.violations
    else:
        assert [v.field for v in checked.violations] == ["started"]
        assert f"would hold {held - gone + starting} units" in checked.violations[0].description
    # The count the check reads follows the deltas applied.
    if checked.ok:
        apply_checked(state, request, checked)
        assert state.held_units == sum(len(r.units) for r in state.running.values())


def test_a_delta_s_settings_are_resolved_once_per_distinct_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    resolved: list[str] = []
    real = decision_options.resolve_settings

    def counted(search: object, default: str) -> object:
        resolved.append(default)
        return real(search, default)  # type: ignore[arg-type]

    monkeypatch.setattr(decision_options, "resolve_settings", counted)
    decision_options._RESOLVED.clear()
    state = session()
    request = delta(state, [], [])
    request.search.profile = "qos"
    request.search.delta_ms = 300
    first = check_delta(state, request, CONFIG, KINDS)
    again = check_delta(state, request, CONFIG, KINDS)
    assert first.options is not None and again.options is not None
    assert again.options.settings is first.options.settings and len(resolved) == 1
    assert first.options.settings.delta_ms == 300
    # Another profile's base (a changed table) is resolved anew.
    base, text = profiles.PROFILES["qos"]
    monkeypatch.setitem(profiles.PROFILES, "qos", (dataclasses.replace(base, k=7), text))
    changed = check_delta(state, request, CONFIG, KINDS)
    assert changed.options is not None and changed.options.settings.k == 7
    assert len(resolved) == 2
    # A bad value is still refused naming its field, every time.
    request.search.delta_max_ms = 100
    for _ in range(2):
        bad = check_delta(state, request, CONFIG, KINDS)
        assert [v.field for v in bad.violations] == ["search.delta_max_ms"]
