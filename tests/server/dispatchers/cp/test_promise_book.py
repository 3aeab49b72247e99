"""The promise book (issue #34): a waiting job's promised start is kept from one decision to the
next and only ever moves earlier while the expected durations hold; a job whose promise is due
starts; nothing started now moves a promise later; an overrun moves promises by the least
possible and says so."""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.dispatchers.cp.hcp19 import Hcp19Dispatcher
from hpcdispatch.server.dispatchers.cp.pcp19 import Pcp19Dispatcher
from hpcdispatch.server.dispatchers.cp.pcp20 import Pcp20Dispatcher
from hpcdispatch.server.dispatchers.planning.problem import Problem, build_problem
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.snapshot import (
    Decision,
    JobStart,
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnitAllocation,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import problem_of

BOOK = dataclasses.replace(PROFILES["book"][0], deterministic=True)
CORES = 4


def control(promise_after_s: int = 0) -> SearchControl:
    return SearchControl(dataclasses.replace(BOOK, promise_after_s=promise_after_s),
                         time.monotonic() + 60)


def nodes(count: int) -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", NodeState.UP, {"core": CORES}) for i in range(count))


def job(job_id: str, submit: int, units: int, duration: int) -> QueuedJob:
    """rn_i units of a whole 4-core node each, asking for `duration` seconds."""
    return QueuedJob(id=job_id, user="u", name=job_id, queue="batch", submit_time=submit,
                     units=units, unit_request={"core": CORES}, requested_time=duration)


def runs(job_id: str, start: int, on: list[str], duration: int) -> RunningJob:
    return RunningJob(id=job_id, user="u", name=job_id, start_time=start,
                      requested_time=duration, expected_duration=duration,
                      units=tuple(UnitAllocation(n, {"core": CORES}) for n in on))


def promises_of(snapshot: Snapshot, outcome: Outcome) -> dict[str, int]:
    """Each waiting job's promised start (absolute), by job id."""
    return {snapshot.queued[i].id: snapshot.time + s
            for i, (s, promised) in outcome.expected_starts.items() if promised}


def started_ids(snapshot: Snapshot, outcome: Outcome) -> set[str]:
    return {snapshot.queued[i].id for i in outcome.placements}


# -- the hand case ----------------------------------------------------------------------------


def test_a_blocked_wide_job_keeps_its_promise_and_only_what_fits_around_it_starts() -> None:
    """4 nodes; r runs on two until 1,100. The wide job W (all 4 nodes, waiting since 700)
    holds a promise from the first decision: 1,100. Of the two jobs without one (they waited
    less than `promise_after_s`), `short` fits on the two free nodes and ends at 1,050, before
    W's promise: it starts; `long` would run on them past 1,100 and delay W: it waits."""
    dispatcher = Pcp20Dispatcher()
    t = 1000
    snapshot = Snapshot(t, nodes(4), (runs("r", 900, ["n0", "n1"], 200),),
                        (job("W", 700, 4, 300), job("long", 990, 2, 500),
                         job("short", 995, 2, 50)))
    outcome = dispatcher.decide(problem_of(snapshot), control(promise_after_s=100))
    assert started_ids(snapshot, outcome) == {"short"}
    assert promises_of(snapshot, outcome) == {"W": 1100}
    assert not outcome.promises_moved
    # The next decision, at 1,050 (short has ended as expected): W still holds 1,100, and
    # `long` still cannot start without delaying it, though it fits now.
    later = Snapshot(1050, nodes(4), (runs("r", 900, ["n0", "n1"], 200),),
                     (job("W", 700, 4, 300), job("long", 990, 2, 500)))
    outcome = dispatcher.decide(problem_of(later), control(promise_after_s=100))
    assert started_ids(later, outcome) == set()
    assert promises_of(later, outcome) == {"W": 1100}
    # At 1,100 r has ended: W's promise is due, and it starts.
    due = Snapshot(1100, nodes(4), (), (job("W", 700, 4, 300), job("long", 990, 2, 500)))
    outcome = dispatcher.decide(problem_of(due), control(promise_after_s=100))
    assert started_ids(due, outcome) == {"W"}


def test_a_promise_from_arrival_is_what_the_job_is_told_at_once() -> None:
    """With promises from arrival (the `book` profile), a job that cannot start gets its
    promise at the first decision that sees it, and the report gives every waiting job's."""
    snapshot = Snapshot(1000, nodes(2), (runs("r", 900, ["n0", "n1"], 200),),
                        (job("a", 990, 2, 100), job("b", 995, 1, 100)))
    outcome = Hcp19Dispatcher().decide(problem_of(snapshot), control(0))
    assert started_ids(snapshot, outcome) == set()
    assert promises_of(snapshot, outcome) == {"a": 1100, "b": 1200}


def _with_predictions(snapshot: Snapshot, predicted: dict[str, int]) -> Problem:
    """The problem with d_i = `predicted` where given (a predictor's), else requested times."""
    durations = {q.id: predicted.get(q.id, q.requested_time) for q in snapshot.queued}
    return build_problem(snapshot, durations, {r.id: r.requested_time for r in snapshot.running})


@pytest.mark.parametrize(("system", "starts"), [(4, set()), (6, {"y"})])
def test_a_young_job_may_not_sit_on_the_oldest_promises_nodes_past_it_if_it_ran_its_limit(
    system: int, starts: set[str],
) -> None:
    """W (all of n0-n3 from 1,100, where r holds n0 and n1 until then) is the oldest promise.
    y is predicted to end at 1,050 but may run until its requested 1,500: on 4 nodes it could
    only sit on W's, so it waits (it would break W's promise if the prediction failed); on 6
    nodes it starts on n4 and n5, off W's nodes."""
    running = (runs("r", 900, ["n0", "n1"], 200),) if system == 4 else (
        runs("r", 900, ["n0", "n1", "n2", "n3"], 200),)
    snapshot = Snapshot(1000, nodes(system), running,
                        (job("W", 700, 4, 300), job("y", 990, 2, 500)))
    outcome = Pcp20Dispatcher().decide(_with_predictions(snapshot, {"y": 50}),
                                       control(promise_after_s=100))
    assert started_ids(snapshot, outcome) == starts
    assert promises_of(snapshot, outcome)["W"] == 1100
    if starts:
        placed = outcome.placements[1]
        assert {snapshot.nodes[n].id for n in placed} == {"n4", "n5"}


# -- an overrun -------------------------------------------------------------------------------


def test_a_job_outliving_its_expected_end_moves_the_promises_by_the_least_possible() -> None:
    """r was expected to end at 1,100 and is still running then: it is assumed to need one
    more second (the papers' rule), so W's promise moves from 1,100 to 1,101 and the one behind
    it, V (all nodes after W), from 1,400 to 1,401 — by the least possible, each reported."""
    dispatcher = Pcp20Dispatcher()
    first = Snapshot(1000, nodes(4), (runs("r", 900, ["n0", "n1"], 200),),
                     (job("W", 700, 4, 300), job("V", 800, 4, 100)))
    outcome = dispatcher.decide(problem_of(first), control(0))
    assert promises_of(first, outcome) == {"W": 1100, "V": 1400}
    overrun = Snapshot(1100, nodes(4), (runs("r", 900, ["n0", "n1"], 200),),
                       (job("W", 700, 4, 300), job("V", 800, 4, 100)))
    outcome = dispatcher.decide(problem_of(overrun), control(0))
    assert started_ids(overrun, outcome) == set()
    assert promises_of(overrun, outcome) == {"W": 1101, "V": 1401}
    moved = {overrun.queued[i].id: s for i, s in outcome.promises_moved.items()}
    assert moved == {"W": 1, "V": 1}


def test_room_a_job_freed_early_goes_to_the_highest_slowdown_without_delaying_a_promise(
) -> None:
    """r was expected to run until 1,200 and ends at 1,100. W (promised 1,200) and V (1,500)
    are compressed in the papers' priority order: V, with the higher current slowdown (4.0
    against W's 2.3), takes the freed room and starts now; W keeps 1,200 — no promise moves
    later, and none is reported moved."""
    dispatcher = Pcp20Dispatcher()
    first = Snapshot(1000, nodes(4), (runs("r", 900, ["n0", "n1"], 300),),
                     (job("W", 700, 4, 300), job("V", 800, 4, 100)))
    outcome = dispatcher.decide(problem_of(first), control(0))
    assert promises_of(first, outcome) == {"W": 1200, "V": 1500}
    early = Snapshot(1100, nodes(4), (), (job("W", 700, 4, 300), job("V", 800, 4, 100)))
    outcome = dispatcher.decide(problem_of(early), control(0))
    assert started_ids(early, outcome) == {"V"}
    assert promises_of(early, outcome) == {"W": 1200}
    assert not outcome.promises_moved


# -- random event sequences ---------------------------------------------------------------------


@dataclass
class Running:
    job: QueuedJob
    start: int
    on: list[str]


MODELS: dict[str, type[CpDispatcher]] = {
    "hcp19": Hcp19Dispatcher, "pcp19": Pcp19Dispatcher, "pcp20": Pcp20Dispatcher}


def _replay(seed: int, promise_after_s: int, jobs: int = 30,
            early: bool = False, model: type[CpDispatcher] = Pcp20Dispatcher) -> tuple[int, int]:
    """A small event-driven replay: jobs arrive at random and run for exactly d_i from where
    they are started (with `early`, for a random part of it, as jobs do under wall-time
    estimates: the expected durations are then upper bounds, which still hold); a decision at
    every arrival and end. Checks at
    every decision: no promise moves later, a job starts no later than any promise it was
    given, none is reported moved, every decision is valid. Returns (decisions, promises
    seen) so the caller can see it checked something."""
    rng = random.Random(seed)
    dispatcher = model()
    system = nodes(6)
    arrivals = sorted((1000 + rng.randrange(0, 3000), k) for k in range(jobs))
    pending = [job(f"j{k}", at, rng.choice((1, 1, 2, 3, 6)), rng.choice((30, 100, 400, 1000)))
               for at, k in arrivals]
    actual = {j.id: max(1, round(j.requested_time * rng.uniform(0.1, 1.0))) if early
              else j.requested_time for j in pending}
    queue: list[QueuedJob] = []
    running: list[Running] = []
    promised: dict[str, int] = {}
    decisions = seen = 0
    t = pending[0].submit_time
    while pending or queue:
        running = [r for r in running if r.start + actual[r.job.id] > t]  # ended
        while pending and pending[0].submit_time <= t:
            queue.append(pending.pop(0))
        snapshot = Snapshot(t, system, tuple(
            runs(r.job.id, r.start, r.on, r.job.requested_time) for r in running), tuple(queue))
        outcome = dispatcher.decide(problem_of(snapshot), control(promise_after_s))
        decisions += 1
        assert not outcome.promises_moved, (seed, t, outcome.promises_moved)
        starts = tuple(
            JobStart(snapshot.queued[i].id, tuple(system[n].id for n in where),
                     snapshot.queued[i].requested_time)
            for i, where in outcome.placements.items())
        assert check_decision(snapshot, Decision(snapshot.time, starts)) == []
        for start in starts:
            assert t <= promised.pop(start.job_id, t), (seed, start.job_id)
        for job_id, at in promises_of(snapshot, outcome).items():
            assert at <= promised.get(job_id, at), (seed, job_id, promised.get(job_id), at)
            promised[job_id] = at
            seen += 1
        started = {s.job_id: list(s.nodes) for s in starts}
        running += [Running(q, t, started[q.id]) for q in queue if q.id in started]
        queue = [q for q in queue if q.id not in started]
        events = [r.start + actual[r.job.id] for r in running]
        events += [pending[0].submit_time] if pending else []
        if not events:
            break
        t = min(events)
    assert not queue and not promised  # every job started, every promise kept
    return decisions, seen


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("early", [False, True], ids=["exact", "early"])
@pytest.mark.parametrize("promise_after_s", [0, 300])
@pytest.mark.parametrize("seed", range(4))
def test_no_promise_moves_later_while_the_expected_durations_hold(
    seed: int, promise_after_s: int, early: bool, model: str,
) -> None:
    """Under each of the three models: the promises are constraints of the model, and the
    starts it chooses are checked against them node by node."""
    decisions, promises = _replay(seed, promise_after_s, early=early, model=MODELS[model])
    assert decisions >= 30 and promises > 0


def _mixed_snapshot(seed: int) -> Snapshot:
    """Two kinds of node (cores and memory), running work on some, and 24 queued jobs of one
    to four units asking for cores and memory; the oldest waited longest."""
    rng = random.Random(seed)
    system = tuple(Node(f"n{i}", NodeState.UP, {"core": c, "mem": m}) for i, (c, m) in
                   enumerate([(8, 32)] * 6 + [(16, 64)] * 4))
    running = []
    for k, n in enumerate(rng.sample(range(len(system)), 5)):
        cores = rng.choice((4, 8))
        running.append(RunningJob(
            id=f"r{k}", user="u", name="r", start_time=900, requested_time=3000,
            expected_duration=rng.choice((150, 400, 900)),
            units=(UnitAllocation(system[n].id, {"core": cores, "mem": 4 * cores}),)))
    queued = tuple(
        QueuedJob(id=f"q{k}", user="u", name="q", queue="batch", submit_time=100 + 30 * k,
                  units=rng.choice((1, 1, 2, 4)),
                  unit_request={"core": rng.choice((2, 4, 8)), "mem": rng.choice((4, 16, 30))},
                  requested_time=rng.choice((60, 300, 1200, 3600)))
        for k in range(24))
    return Snapshot(1000, system, tuple(running), queued)


def test_the_selected_model_decides_under_the_promise_book() -> None:
    """HCP'19, PCP'19 and PCP'20 under the book (only the oldest job holds a promise: the
    others are the model's to choose) decide differently on these snapshots, each decision
    valid and the head's promise the same under the three."""
    differ = 0
    for seed in range(8):
        snapshot = _mixed_snapshot(seed)
        decisions = {}
        for name, model in MODELS.items():
            outcome = model().decide(problem_of(snapshot), control(36_000))
            starts = tuple(
                JobStart(snapshot.queued[i].id, tuple(snapshot.nodes[n].id for n in where),
                         snapshot.queued[i].requested_time)
                for i, where in outcome.placements.items())
            assert check_decision(snapshot, Decision(snapshot.time, starts)) == []
            accounted = set(outcome.considered) | {i for i, _ in outcome.skipped}
            assert accounted | set(outcome.placements) == set(range(len(snapshot.queued)))
            decisions[name] = {s.job_id: sorted(s.nodes) for s in starts}
        differ += len({str(sorted(d.items())) for d in decisions.values()}) > 1
    assert differ >= 3, differ  # the book before issue #41 decided alike: 0 of 8


# -- over gRPC ---------------------------------------------------------------------------------


def test_the_service_reports_each_waiting_jobs_promise_and_keeps_it(
    client: DispatcherClient,
) -> None:
    """The hand case through a real server: the report's expected starts carry W's promise
    (1,100), marked promised; the next snapshot keeps it; after an overrun it says by how much
    it moved."""
    def request(t: int, running: tuple[RunningJob, ...]) -> pb.DispatchRequest:
        snapshot = Snapshot(t, nodes(4), running, (job("W", 700, 4, 300),))
        message = snapshot_to_pb(snapshot)
        message.cluster = "promise-book-test"
        message.dispatcher = pb.DISPATCHER_PCP20
        message.predictor = pb.PREDICTOR_WALLTIME
        message.search.profile = "book"
        return message

    def expected(response: pb.DispatchResponse) -> list[tuple[str, int, bool, int]]:
        return [(e.job_id, e.start_time, e.promised, e.moved_later_seconds)
                for e in response.report.expected_starts]

    r = (runs("r", 900, ["n0", "n1"], 200),)
    assert expected(client.dispatch(request(1000, r))) == [("W", 1100, True, 0)]
    assert expected(client.dispatch(request(1050, r))) == [("W", 1100, True, 0)]
    assert expected(client.dispatch(request(1100, r))) == [("W", 1101, True, 1)]


def test_a_promise_sent_back_is_kept_by_a_server_that_never_made_it(
    client: DispatcherClient,
) -> None:
    """Replicas behind a load balancer: a promise made by one server, sent back with the job
    (QueuedJob.promised_start), is kept by another that holds no book for this cluster — here a
    fresh dispatcher in this process, and the service under another cluster name."""
    snapshot = Snapshot(1050, nodes(4), (runs("r", 900, ["n0", "n1"], 200),),
                        (dataclasses.replace(job("W", 700, 4, 300), promised_start=1100),
                         job("long", 990, 2, 500)))
    outcome = Pcp20Dispatcher().decide(problem_of(snapshot), control(0))
    assert promises_of(snapshot, outcome)["W"] == 1100
    assert "long" not in started_ids(snapshot, outcome)  # it would delay W's promise
    message = snapshot_to_pb(snapshot)
    message.cluster = "another-replica"
    message.dispatcher = pb.DISPATCHER_PCP20
    message.predictor = pb.PREDICTOR_WALLTIME
    message.search.profile = "book"
    message.search.promise_after_s = 10_000  # `long` holds no promise: only W's protects W
    response = client.dispatch(message)
    assert "long" not in {s.job_id for s in response.starts}
    assert ("W", 1100, True) in [(e.job_id, e.start_time, e.promised)
                                 for e in response.report.expected_starts]


def test_conservative_reports_its_reservations_as_promises_and_easy_its_heads_plan() -> None:
    """What `squeue --start` shows, for the baselines that plan: conservative's reservations
    are kept and only move earlier (promises); so does EASY's head reservation, made anew at
    each decision: the head stays the head until it starts and nothing backfilled delays it."""
    from hpcdispatch.server.dispatchers import BY_NAME

    snapshot = Snapshot(1000, nodes(2), (runs("r", 900, ["n0", "n1"], 200),),
                        (job("a", 990, 2, 100), job("b", 995, 1, 100)))
    conservative = BY_NAME["conservative"].decide(problem_of(snapshot), control(-1))
    assert {snapshot.queued[i].id: v for i, v in conservative.expected_starts.items()} == {
        "a": (100, True), "b": (200, True)}
    easy = BY_NAME["easy"].decide(problem_of(Snapshot(
        1000, nodes(2), (runs("r", 900, ["n0"], 200),),
        (job("a", 990, 2, 100), job("b", 995, 1, 50)))), control(-1))
    assert easy.expected_starts == {0: (100, True)}  # a, the head; b backfills now
