"""Dispatch's one-pass validation and conversion (server/intake/snapshot_intake.py) against the
reference (validate_dispatch_request, then snapshot_from_pb), with running jobs from the cache
(server/intake/running_job_cache.py): the same snapshots, the same violations, bytes that
changed are checked again, the cache stays bounded."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from hpcdispatch.proto_convert import snapshot_from_pb, snapshot_to_pb
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.core_wire import search_request_from_pb
from hpcdispatch.server.dispatchers.base import SearchControl
from hpcdispatch.server.domain.profiles import resolve_settings
from hpcdispatch.server.intake import decision_options, snapshot_intake
from hpcdispatch.server.intake.decision_options import DecisionOptions
from hpcdispatch.server.intake.interruption import Interruption
from hpcdispatch.server.intake.node_table import NodeTables
from hpcdispatch.server.intake.running_job_cache import RunningJobCache, check_running_job
from hpcdispatch.server.intake.snapshot_intake import fast_checked_running, take_in
from hpcdispatch.server.intake.validation import Violation, validate_dispatch_request
from hpcdispatch.server.pipeline import DecisionAbandoned, run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import FAST

CONFIG = ServerConfig()
KINDS: list[int] = [pb.PREDICTOR_WALLTIME, pb.PREDICTOR_ORACLE]


def eurora(seed: int = 3, queued: int = 8) -> pb.DispatchRequest:
    """Eurora-size: three node types (core, mem, gpu or mic), 70 % busy."""
    return snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], queued, 0.7, seed=seed))


def copy(request: pb.DispatchRequest) -> pb.DispatchRequest:
    out = pb.DispatchRequest()
    out.CopyFrom(request)
    return out


class Intake:
    """A service's node tables and running-job cache, as `_dispatch` uses them."""

    def __init__(self, cache: RunningJobCache | None = None) -> None:
        self.tables = NodeTables()
        self.cache = cache if cache is not None else RunningJobCache()

    def violations(self, request: pb.DispatchRequest) -> list[Violation]:
        return take_in(request, CONFIG, KINDS, self.tables, self.cache).violations

    def snapshot(self, request: pb.DispatchRequest) -> Snapshot | None:
        intake = take_in(request, CONFIG, KINDS, self.tables, self.cache)
        assert intake.violations == [], intake.violations[:3]
        return intake.snapshot


def reference(request: pb.DispatchRequest) -> list[Violation]:
    return validate_dispatch_request(request, CONFIG, KINDS)


def test_a_cached_and_an_uncached_snapshot_are_the_reference_s_and_decide_alike() -> None:
    first, intake = eurora(), Intake()
    assert intake.snapshot(first) == snapshot_from_pb(first)
    later = copy(first)
    later.time += 60
    del later.running_jobs[0]  # one ended, one started: the rest come from the cache
    started = later.running_jobs.add()
    started.CopyFrom(first.running_jobs[0])
    started.id, started.start_time = "again", later.time
    hits = intake.cache.hits
    cached = intake.snapshot(later)
    assert intake.cache.hits - hits == len(later.running_jobs) - 1
    assert cached == snapshot_from_pb(later) == Intake().snapshot(later)
    decisions = []
    for snapshot in (cached, snapshot_from_pb(later)):
        control = SearchControl(settings=FAST, deadline=time.monotonic() + 30)
        assert isinstance(snapshot, Snapshot)
        result = run_decision(snapshot, pb.DISPATCHER_EASY, WalltimePredictor(), control)
        decisions.append(result.decision)
    assert decisions[0] == decisions[1] and decisions[0].starts


def test_an_edited_unit_over_its_node_s_capacity_is_caught_on_the_next_request() -> None:
    request, intake = eurora(), Intake()
    assert intake.violations(request) == []
    request.running_jobs[4].units[0].amounts["core"] = 10_000  # its bytes changed
    assert intake.violations(request) == reference(request)
    assert [v.field for v in intake.violations(request)] == ["running_jobs[4].units[0]"]


def test_cross_checks_run_for_jobs_whose_bytes_did_not_change() -> None:
    request, intake = eurora(), Intake()
    assert intake.violations(request) == []
    # Each job unchanged (all from the cache), but the snapshot around them changed:
    cases: list[tuple[str, Callable[[pb.DispatchRequest], None]]] = [
        ("running_jobs[0].start_time",
         lambda r: setattr(r, "time", r.running_jobs[0].start_time - 1)),
        ("queued_jobs[0].id", lambda r: setattr(r.queued_jobs[0], "id", r.running_jobs[2].id)),
        ("running_jobs[3].units[0].node_id",
         lambda r: r.nodes[[n.id for n in r.nodes].index(r.running_jobs[3].units[0].node_id)]
         .__setattr__("id", "renamed")),
        ("running_jobs[1].units[0]",
         lambda r: r.nodes[[n.id for n in r.nodes].index(r.running_jobs[1].units[0].node_id)]
         .capacity.__setitem__("core", 1)),
    ]
    for field, mutate in cases:
        bad = copy(request)
        mutate(bad)
        assert intake.violations(bad) == reference(bad), field
        assert field in [v.field for v in intake.violations(bad)], field
        assert intake.violations(request) == []  # and the good snapshot again


def test_two_cached_jobs_that_fit_alone_but_not_together_are_caught() -> None:
    request = pb.DispatchRequest(time=1000)
    for i in range(2):
        request.nodes.add(id=f"n{i}", state=pb.NODE_STATE_UP, capacity={"core": 8})
    for i in range(2):
        job = request.running_jobs.add(id=f"r{i}", start_time=900, requested_time=600)
        job.units.add(node_id=f"n{i}", amounts={"core": 6})
    intake = Intake()
    assert intake.violations(request) == []
    moved = copy(request)
    moved.running_jobs[1].units[0].node_id = "n0"
    assert [v.field for v in intake.violations(moved)] == ["running_jobs[1].units[0]"]
    assert intake.violations(moved) == reference(moved)
    # The node removed from under an unchanged job, and a capacity type the job holds removed:
    gone = copy(request)
    del gone.nodes[1]
    assert [v.field for v in intake.violations(gone)] == ["running_jobs[1].units[0].node_id"]
    retyped = copy(request)
    retyped.nodes[0].capacity.clear()
    retyped.nodes[0].capacity["gpu"] = 8
    assert intake.violations(retyped) == reference(retyped) != []


# -- random snapshots against the reference -----------------------------------------------------

def _any_unit(r: pb.DispatchRequest, rng: random.Random) -> pb.UnitAllocation:
    return rng.choice(rng.choice(r.running_jobs).units)


def _shuffle_running(r: pb.DispatchRequest, rng: random.Random) -> None:
    jobs = [copy_job(j) for j in r.running_jobs]
    rng.shuffle(jobs)
    del r.running_jobs[:]
    r.running_jobs.extend(jobs)


def copy_job(job: pb.RunningJob) -> pb.RunningJob:
    out = pb.RunningJob()
    out.CopyFrom(job)
    return out


MUTATIONS: list[Callable[[pb.DispatchRequest, random.Random], object]] = [
    lambda r, g: _any_unit(r, g).amounts.__setitem__("core", g.choice([0, 1, 8, 16, 17, 10**6])),
    lambda r, g: _any_unit(r, g).amounts.__setitem__("mem", g.choice([-1, 0, 2**40, 2**41])),
    lambda r, g: _any_unit(r, g).amounts.__setitem__(g.choice(["gpu", "mic", "fpga", ""]),
                                                     g.choice([0, 1, 2])),
    lambda r, g: setattr(_any_unit(r, g), "node_id", g.choice(r.nodes).id),
    lambda r, g: setattr(_any_unit(r, g), "node_id", g.choice(["", "nowhere"])),
    lambda r, g: g.choice(r.running_jobs).units.add(node_id=g.choice(r.nodes).id,
                                                    amounts={"core": g.choice([0, 4, 16])}),
    lambda r, g: g.choice(r.running_jobs).ClearField("units"),
    lambda r, g: setattr(g.choice(r.running_jobs), "id", g.choice(["", "r1", "q0", "x"])),
    lambda r, g: setattr(g.choice(r.running_jobs), "start_time",
                         r.time + g.choice([-5, 0, 1, 2**41])),
    lambda r, g: setattr(g.choice(r.running_jobs), "requested_time", g.choice([0, 5, 2**31 + 1])),
    lambda r, g: setattr(g.choice(r.running_jobs), "expected_duration", g.choice([0, 9, 2**32])),
    lambda r, g: setattr(r, "time", r.time - g.choice([0, 3600, 86400])),
    lambda r, g: r.nodes.pop(g.randrange(len(r.nodes))),
    lambda r, g: g.choice(r.nodes).capacity.__setitem__("core", g.choice([1, 8, 64])),
    lambda r, g: setattr(g.choice(r.nodes), "state", g.choice([1, 2, 3])),
    lambda r, g: setattr(g.choice(r.queued_jobs), "id", g.choice(["r2", "r3", "q1"])),
    lambda r, g: g.choice(r.queued_jobs).unit_request.__setitem__("mic", 1),
    lambda r, g: r.running_jobs.add().CopyFrom(g.choice(r.running_jobs)),
    lambda r, g: r.running_jobs.pop(g.randrange(len(r.running_jobs))),
    lambda r, g: _shuffle_running(r, g),
    lambda r, g: setattr(r, "cluster", g.choice(["", "other"])),
]


@pytest.mark.parametrize("seed", range(4))
def test_random_snapshots_give_the_reference_s_violations_and_snapshot(seed: int) -> None:
    rng = random.Random(seed)
    base = eurora(seed=seed)
    warm, lookups = Intake(), 0
    assert warm.violations(base) == []
    valid = invalid = 0
    for _ in range(60):
        request = copy(base)
        for _ in range(rng.choice([1, 1, 2, 3])):
            rng.choice(MUTATIONS)(request, rng)
        expected = reference(request)
        table = warm.tables.get(request)
        fast = fast_checked_running(request, CONFIG, table, warm.cache)
        assert (fast is None) == bool(expected), expected[:3]  # the fast verdict is exact
        for intake in (warm, Intake()):  # cache warm from earlier snapshots, and cold
            got = take_in(request, CONFIG, KINDS, intake.tables, intake.cache)
            assert got.violations == expected
            assert got.snapshot == (None if expected else snapshot_from_pb(request))
        uncached = take_in(request, CONFIG, KINDS, warm.tables, None)  # an OpenSession's way
        assert uncached.violations == expected
        assert uncached.snapshot == (None if expected else snapshot_from_pb(request))
        lookups += len(request.running_jobs)
        valid, invalid = valid + (not expected), invalid + bool(expected)
        if rng.random() < 0.3 and not expected:
            base = request  # the cluster moves on
    assert valid >= 5 and invalid >= 20, (valid, invalid)
    assert warm.cache.hits > lookups // 2  # most jobs came from the cache


# -- one intake call: sizes checked once, settings resolved once ------------------------------

def test_a_snapshot_taken_in_carries_its_node_index_and_decision_options() -> None:
    request = eurora()
    request.cluster, request.predictor = "east", pb.PREDICTOR_WALLTIME
    request.allocator = pb.ALLOCATOR_FIRST_FIT
    request.search.profile, request.search.k = "qos", 3
    intake = Intake()
    got = take_in(request, CONFIG, KINDS, intake.tables, intake.cache)
    assert got.violations == [] and got.options is not None
    assert got.nodes is intake.tables.get(request).index
    assert got.options == DecisionOptions(
        dispatcher=pb.DISPATCHER_UNSPECIFIED, predictor=pb.PREDICTOR_WALLTIME, first_fit=True,
        settings=resolve_settings(search_request_from_pb(request.search),
                                  CONFIG.default_profile), cluster="east")
    assert got.options.settings.k == 3
    request.ClearField("cluster")
    got = take_in(request, CONFIG, KINDS, intake.tables, None)
    assert got.options is not None and got.options.cluster == "default"
    request.search.profile = "no such profile"
    refused = take_in(request, CONFIG, KINDS, intake.tables, intake.cache)
    assert refused.options is None and refused.snapshot is None
    assert [v.field for v in refused.violations] == ["search.profile"]


@pytest.mark.parametrize("cached", [True, False])
def test_take_in_checks_the_sizes_and_resolves_the_settings_once(
    cached: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: Counter[str] = Counter()

    def counted(name: str, function: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(snapshot_intake, "check_sizes",
                        counted("sizes", snapshot_intake.check_sizes))
    monkeypatch.setattr(decision_options, "resolve_settings",
                        counted("settings", decision_options.resolve_settings))
    intake = Intake()
    request = eurora()
    for bad in (False, True):  # a valid snapshot, then one only the reference path reports
        if bad:
            request.running_jobs[1].units[0].amounts["core"] = 10_000
        calls.clear()
        decision_options._RESOLVED.clear()  # resolved again (a request's settings are kept)
        got = take_in(request, CONFIG, KINDS, intake.tables, intake.cache if cached else None)
        assert bool(got.violations) == bad
        assert calls == {"sizes": 1, "settings": 1}


# -- the cache itself ---------------------------------------------------------------------------

def test_the_cache_keeps_only_each_cluster_s_last_snapshot_and_is_bounded() -> None:
    cache = RunningJobCache(max_jobs=100, max_clusters=2)
    a, b = eurora(seed=1), eurora(seed=2)
    cache.lookup("a", a.running_jobs)
    assert len(cache) == len(a.running_jobs)
    fewer = copy(a)
    del fewer.running_jobs[:10]
    cache.lookup("a", fewer.running_jobs)
    assert len(cache) == len(fewer.running_jobs)  # the ended jobs are gone
    cache.lookup("b", b.running_jobs)
    assert len(cache) <= 100
    cache.lookup("c", b.running_jobs[:5])
    assert len(cache._clusters) <= 2 and "c" in cache._clusters
    big = RunningJobCache(max_jobs=len(a.running_jobs) - 1)
    assert None not in big.lookup("a", a.running_jobs)  # checked, just not kept
    assert len(big) == 0


def test_a_job_is_reused_only_when_its_bytes_are_identical() -> None:
    cache = RunningJobCache()
    request = eurora()
    first = cache.lookup("x", request.running_jobs)
    again = cache.lookup("x", request.running_jobs)
    assert all(x is y for x, y in zip(first, again, strict=True))
    request.running_jobs[0].user = "someone else"
    changed = cache.lookup("x", request.running_jobs)
    assert changed[0] is not first[0] and changed[0] is not None
    assert changed[0].job.user == "someone else"
    assert all(x is y for x, y in zip(first[1:], changed[1:], strict=True))
    assert cache.lookup("other cluster", request.running_jobs)[1] is not first[1]
    bad = pb.RunningJob(id="r", start_time=1, requested_time=10)
    bad.units.add(node_id="n0", amounts={"core": -1})
    assert check_running_job(bad) is None


def test_concurrent_snapshots_of_one_cluster_are_each_checked_right() -> None:
    good, intake = eurora(), Intake()
    bad = copy(good)
    bad.running_jobs[2].units[0].amounts["core"] = 10_000
    errors: list[str] = []

    def run(request: pb.DispatchRequest, valid: bool) -> None:
        for _ in range(20):
            violations = intake.violations(request)
            if bool(violations) == valid:
                errors.append(f"valid={valid}: {violations[:2]}")

    threads = [threading.Thread(target=run, args=(r, v))
               for r, v in ((good, True), (bad, False), (good, True), (bad, False))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


class LeavesAfter:
    """A caller that leaves once the intake has looked at it `checks` times; counts the looks."""

    def __init__(self, checks: int) -> None:
        self.checks, self.asked = checks, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.checks


@pytest.mark.parametrize("checks", [0, 3])
def test_a_costly_conversion_stops_at_the_first_look_after_its_caller_left(checks: int) -> None:
    """200 running jobs of 5,000 units (1,000,000 units, within every limit): the intake looks
    at its caller every CHUNK units and stops at the first look after the caller left —
    counted in looks, so however slow the machine, the rest of the request is not converted
    (before issue #22 it converted all of it)."""
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_EASY)
    for n in range(64):
        request.nodes.add(id=f"n{n}", state=pb.NODE_STATE_UP, capacity={"core": 16})
    unit = pb.UnitAllocation(node_id="n0")
    for j in range(200):
        job = request.running_jobs.add(id=f"r{j}", user="u", start_time=500,
                                       requested_time=3600)
        job.units.extend([unit] * 5_000)
    request.queued_jobs.add(id="q0", user="u", submit_time=900, units=1,
                            unit_request={"core": 1}, requested_time=3600)
    caller = LeavesAfter(checks)
    with pytest.raises(DecisionAbandoned) as abandoned:
        take_in(request, CONFIG, KINDS, NodeTables(), RunningJobCache(),
                Interruption(deadline=None, cancelled=caller))
    assert abandoned.value.stage == "convert" and abandoned.value.cancelled
    assert caller.asked == checks + 1  # far fewer looks than 1,000,000 / CHUNK = 244
