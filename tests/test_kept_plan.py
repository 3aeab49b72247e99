"""EASY-k's plan carried on between decisions (`kept_plan.KeptPlan`) against the plan made
anew at every decision.

Replays of the bundled KTH-SP2 slice and of lublin_256, in process, under wall time and
last-two (running work outliving its prediction, so releases that move with t): at every
decision the plan handed out must equal `plan_backfill`'s on the same problem, reservation for
reservation in the same order, node for node, with the same waiting and never fitting jobs;
and many decisions must have carried the plan on (the test would prove nothing otherwise).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcdispatch.server.dispatchers import kept_plan
from hpcdispatch.server.dispatchers.backfill import BackfillPlan, plan_backfill
from hpcdispatch.server.dispatchers.kept_plan import KeptPlan
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.server.dispatchers.planning.stopping import StopCheck, never
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, replay, resolve_trace

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
    counts = {"decisions": 0, "carried": 0}

    def checked(self: KeptPlan, problem: Problem, order: list[Job], depth: int,
                first_fit: bool, should_stop: StopCheck) -> BackfillPlan:
        plan = decide(self, problem, order, depth, first_fit, should_stop)
        fresh = plan_backfill(problem, order, depth, first_fit, never)
        assert as_tuple(plan) == as_tuple(fresh), problem.t
        counts["decisions"] += 1
        return plan

    def counted(*args: object) -> BackfillPlan:
        counts["carried"] += 1
        return carry_on(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(KeptPlan, "plan", checked)
    monkeypatch.setattr(kept_plan, "_carry_on", counted)
    spec = RunSpec(resolve_trace(trace), DispatchSettings(dispatcher="easy-k", predictor=predictor),
                   limit_jobs=LIMIT)
    replay(spec, LocalService(), tmp_path)
    assert counts["decisions"] > LIMIT
    assert counts["carried"] > counts["decisions"] // 10, counts
