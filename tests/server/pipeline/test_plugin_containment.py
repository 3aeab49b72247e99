"""A plugin that fails to load, raises, runs past the deadline or answers an invalid decision is
reported by name and answered by the checked EASY fallback (issue #35), in the pipeline itself;
one that changes the problem it is given leaves the fallback the snapshot's, and a predictor
that never answers costs one decision a share of its time (issue #43);
tests/examples/test_plugin_package.py runs the same plugins in a served process."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator
from importlib.metadata import distributions
from pathlib import Path

import pytest

from hpcdispatch import catalog
from hpcdispatch.decision_check import check_decision
from hpcdispatch.registrations import DISPATCHER_GROUP, PREDICTOR_GROUP, read_group
from hpcdispatch.server.dispatchers import Registry
from hpcdispatch.server.domain.duration_predictor import JobFacts
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.domain.profiles import resolve_settings
from hpcdispatch.server.domain.search_control import SearchControl
from hpcdispatch.server.domain.search_settings import SearchRequest
from hpcdispatch.server.pipeline import predict_durations, run_decision
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.plugin_packages import (
    BROKEN_DISPATCHERS,
    BROKEN_MODULE,
    BROKEN_PREDICTORS,
    MUTATING_DISPATCHERS,
    write_broken_plugins,
)

SETTINGS = resolve_settings(SearchRequest(), "qos")


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    """The installed built-ins and the broken plugins, registered as the server registers
    them (the catalog answers with both); the hanging plugin released at the end."""
    root = write_broken_plugins(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    found = [e for d in distributions(path=[str(root)]) for e in d.entry_points]
    installed = [e.entry_point for names in (catalog.registered_dispatchers(),
                                             catalog.registered_predictors())
                 for e in names.entries]
    dispatchers = read_group(DISPATCHER_GROUP, catalog.DISPATCHER_NAMES, [*installed, *found])
    predictors = read_group(PREDICTOR_GROUP, catalog.PREDICTOR_NAMES, [*installed, *found])
    monkeypatch.setattr(catalog, "registered_dispatchers", lambda: dispatchers)
    monkeypatch.setattr(catalog, "registered_predictors", lambda: predictors)
    release = importlib.import_module(BROKEN_MODULE).RELEASE
    release.clear()  # the module stays imported from test to test
    yield Registry(dispatchers)
    release.set()


def snapshot() -> Snapshot:
    return synthetic_snapshot(PRESETS["eurora"], 40, 0.7, seed=3)


def decide(registry: Registry, name: str, seconds: float = 30.0) -> tuple[str, str, Snapshot,
                                                                        int]:
    """(fallback code, fallback reason, snapshot, final status) of `name`'s decision."""
    snap = snapshot()
    control = SearchControl(settings=SETTINGS, deadline=time.monotonic() + seconds)
    result = run_decision(snap, catalog.dispatcher_kind(name), WalltimePredictor(), control,
                          dispatchers=registry)
    assert check_decision(snap, result.decision) == []  # whatever failed, the answer is valid
    return result.fallback_code, result.fallback_reason, snap, result.outcome.status


@pytest.mark.parametrize("name", [n for n in BROKEN_DISPATCHERS if n != "hangs"])
def test_a_failing_plugin_is_named_and_answered_by_the_fallback(
    plugins: Registry, name: str,
) -> None:
    code, reason, _, status = decide(plugins, name)
    assert code == BROKEN_DISPATCHERS[name]
    assert f"({name})" in reason and status == SolveStatus.FALLBACK


def test_a_plugin_that_fails_to_load_is_remembered_with_its_error(plugins: Registry) -> None:
    _, reason, _, _ = decide(plugins, "missing-module")
    assert "ModuleNotFoundError" in reason
    _, reason, _, _ = decide(plugins, "not-a-dispatcher")
    assert "has no decide(problem, control) method" in reason
    assert set(plugins.load_plugins()) == {"missing-module", "not-a-dispatcher"}


def test_a_plugin_past_the_deadline_is_left_running_and_not_started_again(
    plugins: Registry,
) -> None:
    code, reason, _, _ = decide(plugins, "hangs", seconds=0.5)
    assert (code, reason.split(":")[0]) == (
        "deadline_passed", "dispatcher ran past the deadline (hangs)")
    # The overrun still runs: the next decision does not start another.
    code, reason, _, _ = decide(plugins, "hangs", seconds=30.0)
    assert code == "deadline_passed" and "still runs" in reason
    importlib.import_module(BROKEN_MODULE).RELEASE.set()
    give_up = time.monotonic() + 120
    while any(t.name == "plugin-hangs" for t in threading.enumerate()):
        assert time.monotonic() < give_up, "the released plugin never ended"
        time.sleep(0.01)
    code, reason, _, status = decide(plugins, "hangs")  # it answers now: its own decision
    assert (code, reason, status) == ("", "", SolveStatus.HEURISTIC)


def test_the_guard_passes_a_good_plugins_decision_unchanged(plugins: Registry) -> None:
    """EASY through the guard (as a plugin would be made) decides as EASY."""
    from hpcdispatch.server.dispatchers.easy import EasyDispatcher
    from hpcdispatch.server.dispatchers.guard import Guarded

    snap = snapshot()
    control = SearchControl(settings=SETTINGS, deadline=time.monotonic() + 60)
    guarded = run_decision(snap, pb.DISPATCHER_EASY, WalltimePredictor(), control,
                           dispatchers={pb.DISPATCHER_EASY: Guarded(EasyDispatcher(), "x", 1)})
    plain = run_decision(snap, pb.DISPATCHER_EASY, WalltimePredictor(), control,
                         dispatchers={pb.DISPATCHER_EASY: EasyDispatcher()})
    assert not guarded.fallback_reason and guarded.decision == plain.decision
    assert guarded.decision.starts


def test_a_failing_plugin_predictor_costs_its_batch_the_requested_times(
    plugins: Registry,
) -> None:
    failures: list[tuple[str, str, str]] = []
    with PredictorRegistry(on_predictor_failure=lambda *f: failures.append(f),
                           registrations=catalog.registered_predictors()) as registry:
        assert set(registry.load_plugins()) == {"predictor-missing"}
        snap = snapshot()
        for name, reason in BROKEN_PREDICTORS.items():
            predictor = registry.predictor("default", catalog.predictor_kind(name))
            durations = predict_durations(snap, predictor)
            assert durations.queued == {q.id: q.requested_time for q in snap.queued}, name
            assert failures[-1][:2] == (name, reason)
        job = JobFacts("u", "n", "", 1, {"core": 1}, requested_time=50)
        assert registry.predictor("other", catalog.predictor_kind("predictor-raises")).predict(
            job) == 50


@pytest.mark.parametrize("name", sorted(MUTATING_DISPATCHERS))
def test_a_plugin_that_changes_its_problem_leaves_the_fallback_the_snapshot(
    plugins: Registry, name: str,
) -> None:
    """The fallback's decision is EASY's on the snapshot, whatever the plugin changed."""
    snap = snapshot()
    control = SearchControl(settings=SETTINGS, deadline=time.monotonic() + 60)
    easy = run_decision(snap, pb.DISPATCHER_EASY, WalltimePredictor(), control,
                        dispatchers=plugins)
    assert len(easy.decision.starts) >= 2 and not easy.fallback_code
    result = run_decision(snap, catalog.dispatcher_kind(name), WalltimePredictor(), control,
                          dispatchers=plugins)
    assert result.fallback_code == MUTATING_DISPATCHERS[name], result.fallback_reason
    assert result.decision == easy.decision
    assert check_decision(snap, result.decision) == []


@pytest.mark.timeout(120)  # on a server without the guard, the first decision never ends
def test_a_hanging_plugin_predictor_costs_one_decision_a_share_of_its_time(
    plugins: Registry,
) -> None:
    """The first decision waits PREDICTION_SHARE of its time, then goes on with the requested
    times; while the plugin still hangs, the next decisions do not wait for it at all, and it
    holds one thread, not one per call."""
    failures: list[tuple[str, str, str]] = []
    with PredictorRegistry(on_predictor_failure=lambda *f: failures.append(f),
                           registrations=catalog.registered_predictors()) as registry:
        predictor = registry.predictor("default", catalog.predictor_kind("predictor-hangs"))
        snap = snapshot()
        requested = {q.id: q.requested_time for q in snap.queued}
        for seconds in (1.0, 600.0):  # the second would wait 300 s if it waited at all
            control = SearchControl(settings=SETTINGS, deadline=time.monotonic() + seconds)
            result = run_decision(snap, pb.DISPATCHER_EASY, predictor, control,
                                  dispatchers=plugins)
            assert not result.fallback_code and result.decision.starts
            assert {s.job_id: s.expected_duration for s in result.decision.starts} == {
                s.job_id: requested[s.job_id] for s in result.decision.starts}
        # Each decision predicts its queued jobs and its running jobs: two batches.
        assert [f[:2] for f in failures] == [("predictor-hangs", "deadline_passed")] * 4
        assert "no answer by the decision's deadline" in failures[0][2]
        assert all("still runs" in f[2] for f in failures[1:])
        hung = [t for t in threading.enumerate() if t.name == "plugin-predictor-predictor-hangs"]
        assert len(hung) == 1
