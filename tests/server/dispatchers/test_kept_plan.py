"""EASY-k's plan carried on between decisions (`kept_plan.KeptPlan`) against the plan made
anew at every decision.

Replays of the bundled KTH-SP2 slice and of lublin_256, in process, under wall time and
last-two (running work outliving its prediction, so releases that move with t): at every
decision the plan handed out must equal `plan_backfill`'s on the same problem, reservation for
reservation in the same order, node for node, with the same waiting and never fitting jobs;
and many decisions must have carried the plan on (the test would prove nothing otherwise),
some of them right after a decision that started jobs (the step functions then compared).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpcdispatch.server.dispatchers import kept_plan
from hpcdispatch.server.dispatchers.backfill import BackfillPlan, plan_backfill
from hpcdispatch.server.dispatchers.kept_plan import KeptPlan, same_steps
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.server.dispatchers.planning.stopping import StopCheck, never
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, replay, resolve_trace
from hpcdispatch.snapshot import Snapshot
from tests.instances import T, node, problem_of, running

LIMIT = 400


def as_tuple(plan: BackfillPlan) -> tuple[object, ...]:
    return (list(plan.reservations.items()), plan.waiting, plan.never, plan.unplanned,
            plan.displaced)


@pytest.mark.parametrize("trace", ["kth-sp2-slice", "lublin-256"])
@pytest.mark.parametrize("predictor", ["walltime", "last-two"])
def test_a_carried_plan_is_the_plan_made_anew(
    trace: str, predictor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    decide = KeptPlan.plan
    carry_on = kept_plan._carry_on
    counts = {"decisions": 0, "carried": 0, "after_starts": 0}

    def checked(self: KeptPlan, problem: Problem, order: list[Job], depth: int,
                first_fit: bool, should_stop: StopCheck) -> BackfillPlan:
        plan = decide(self, problem, order, depth, first_fit, should_stop)
        fresh = plan_backfill(problem, order, depth, first_fit, never)
        assert as_tuple(plan) == as_tuple(fresh), problem.t
        counts["decisions"] += 1
        return plan

    def counted(kept: kept_plan._Kept, *args: object) -> BackfillPlan:
        counts["carried"] += 1
        counts["after_starts"] += kept.started
        return carry_on(kept, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(KeptPlan, "plan", checked)
    monkeypatch.setattr(kept_plan, "_carry_on", counted)
    spec = RunSpec(resolve_trace(trace), DispatchSettings(dispatcher="easy-k", predictor=predictor),
                   limit_jobs=LIMIT)
    replay(spec, LocalService(), tmp_path)
    assert counts["decisions"] > LIMIT
    assert counts["carried"] > counts["decisions"] // 10, counts
    assert counts["after_starts"] > 0, counts


def test_same_steps_compares_the_free_amounts_from_now_on() -> None:
    nodes = (node(0, cores=4), node(1, cores=2))
    work = (running("r", "n0", 2, 30),)  # releases 2 cores of n0 at T + 30
    kept = NodeProfile(problem_of(Snapshot(time=T, nodes=nodes, running=work, queued=())))
    job = Job(0, "j", T, 1, (1,), 50)
    kept.take(job, 10, [1])  # n1 from T + 10 to T + 60
    later = problem_of(Snapshot(time=T + 20, nodes=nodes, running=work, queued=()))
    fresh = NodeProfile(later)
    fresh.take(dataclasses.replace(job, duration=40), 0, [1])  # the same block from T + 20
    assert same_steps(fresh, kept, 20)
    assert not same_steps(fresh, kept, 5)  # before T + 10, n1 is still free
    fresh.take(dataclasses.replace(job, duration=1), 45, [0])
    assert not same_steps(fresh, kept, 20)
