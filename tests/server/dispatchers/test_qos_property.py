"""Random valid snapshots under the qos knobs (starvation guard, more list orders, work
conservation beyond the window): every decision passes the independent check, every queued
job is accounted for once, and an overdue oldest job that fits now starts now."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from hpcdispatch.server.dispatchers.base import SearchSettings
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.snapshot import Snapshot
from tests.instances import T, decide, problem_of
from tests.server.dispatchers.test_decision_property import assert_checked_and_accounted, snapshots

# A window of 3 leaves jobs outside the model; a 1-s guard makes the oldest job overdue.
QOS_LIKE = SearchSettings("test", delta_ms=20, delta_max_ms=40, k=1, window=3,
                          starvation_wait_s=1, more_orders=True, work_conserving=True)


@pytest.mark.parametrize("name", ["hcp19", "pcp19", "pcp20"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_every_qos_decision_passes_the_independent_check(name: str, snapshot: Snapshot) -> None:
    outcome, decision = decide(name, snapshot, QOS_LIKE)
    assert_checked_and_accounted(snapshot, outcome, decision)
    if name == "pcp19":
        return  # the papers' node-level model: the guard is best effort there
    problem = problem_of(snapshot)
    waiting = [j for j in problem.jobs if not never_fits(problem, j)]
    if waiting:
        oldest = min(waiting, key=lambda j: (j.submit, j.index))
        fits = problem.free_now.units_fit(oldest.req, oldest.units) >= oldest.units
        if fits and T - oldest.submit >= 1:
            assert oldest.id in {s.job_id for s in decision.starts}
