"""Never idle, never empty-handed (issue #49): no built-in dispatcher's own decision leaves an
idle system idle while a queued job fits on it now, whatever promises its jobs hold and however
far the predictions fall below the requested times (users over-state their run times). Decided
by the dispatcher itself, not through the pipeline, whose EASY fallback would hide a stall."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.planning.problem import Problem, build_problem
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import decision_of
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, Snapshot
from tests.instances import T

QUICK = SearchSettings("test", delta_ms=20, delta_max_ms=40, k=1, window=20)
CP = ("hcp19", "pcp19", "pcp20")
CASES = (
    [(name, "") for name in sorted(DISPATCHER_NAMES) if name not in CP]
    + [(name, profile) for name in CP for profile in ("book", "qos")]
)


def predicted(job: QueuedJob) -> int:
    """An over-stated requested time: the job runs 1/2 to 1/50 of it (by its id)."""
    return max(1, job.requested_time // (2 + sum(map(ord, job.id)) % 49))


def problem_of(snapshot: Snapshot) -> Problem:
    return build_problem(snapshot, {q.id: predicted(q) for q in snapshot.queued}, {})


def decide(name: str, profile: str, problem: Problem) -> tuple[dict[int, list[int]], str]:
    search = PROFILES[profile][0] if profile else QUICK
    search = dataclasses.replace(search, deterministic=True)
    control = SearchControl(search, time.monotonic() + 60)
    outcome = DISPATCHERS[DISPATCHER_NAMES[name]].decide(problem, control)
    return outcome.placements, outcome.status.name


@st.composite
def idle_systems(draw: st.DrawFn) -> Snapshot:
    """Idle nodes (some down), queued jobs of every width up to the whole system with requested
    times up to 48 h, some holding a promise (sent back by the caller) up to 3 days ahead."""
    count = draw(st.integers(1, 12))
    nodes = tuple(
        Node(f"n{i}", draw(st.sampled_from([NodeState.UP] * 5 + [NodeState.DOWN])),
             {"core": draw(st.sampled_from([1, 4, 8]))})
        for i in range(count))
    queued = []
    for j in range(draw(st.integers(1, 14))):
        promise = draw(st.one_of(st.none(), st.integers(1, 3 * 86_400)))
        queued.append(QueuedJob(
            id=f"q{j}", user=f"u{j % 3}", name="x", queue="q",
            submit_time=T - draw(st.integers(0, 200_000)), units=draw(st.integers(1, count)),
            unit_request={"core": draw(st.sampled_from([1, 2, 4]))},
            requested_time=draw(st.sampled_from([300, 3_600, 14_400, 86_400, 172_800])),
            promised_start=None if promise is None else T + promise,
        ))
    return Snapshot(T, nodes, (), tuple(queued))


def fits_now(problem: Problem) -> bool:
    units_fit = problem.free_now.units_fit
    return any(units_fit(j.req, j.units) >= j.units for j in problem.jobs)


@pytest.mark.parametrize(("name", "profile"), CASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=idle_systems())
def test_an_idle_system_where_a_job_fits_starts_one(
    name: str, profile: str, snapshot: Snapshot,
) -> None:
    problem = problem_of(snapshot)
    placements, status = decide(name, profile, problem)
    if fits_now(problem):
        assert placements, f"{name} {profile or ''}: starts nothing on an idle system ({status})"
    decision = decision_of(problem, Outcome(placements=placements, status=SolveStatus.HEURISTIC))
    assert check_decision(snapshot, decision) == []


def stalled_book() -> Snapshot:
    """The stall of #49 (lublin_256_est, records 0:1500, pcp20 `book`, data-driven, at
    t = 690,960), in small: an idle machine; the oldest job, the whole machine for 4 h,
    promised 12.5 h ahead; a younger one (a few nodes, 3.3 h predicted, 48 h requested)
    promised 0.8 h ahead. Under the head's guard the younger job could not use the head's nodes
    (all of them) where its requested time reached the head's promise, and the head could not
    start before the younger promise: nothing started, decision after decision."""
    nodes = tuple(Node(f"n{i}", NodeState.UP, {"core": 1}) for i in range(8))
    return Snapshot(T, nodes, (), (
        QueuedJob(id="head", user="u", name="x", queue="q", submit_time=T - 90_000, units=8,
                  unit_request={"core": 1}, requested_time=172_800, promised_start=T + 45_166),
        QueuedJob(id="young", user="v", name="x", queue="q", submit_time=T - 50_000, units=2,
                  unit_request={"core": 1}, requested_time=172_800, promised_start=T + 2_844),
    ))


@pytest.mark.parametrize("name", CP)
def test_the_stall_of_the_book_starts_a_job(name: str) -> None:
    snapshot = stalled_book()
    problem = build_problem(snapshot, {"head": 14_552, "young": 11_837}, {})
    placements, status = decide(name, "book", problem)
    assert placements, status
