"""Replicas and promises (issue #42, item 5): `hpcdispatch serve` processes, each with its own
memory, as behind a load balancer. Two sharing a key keep each other's promises exactly; one
whose key differs (or that has none, and signs with a random key of its own) keeps none of
them; and over random sequences of decisions alternating between two replicas, no forged,
replayed or foreign promise is ever believed while every real one keeps its start. A token
also signs the older promises its start was planned around and the job's shape (issue #51):
a newer job's token sent without the older promise is not believed, and a job whose shape
changed is promised anew, reported."""

from __future__ import annotations

import itertools
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdispatch.client import DispatcherClient
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import free_port, scrape_text, value
from tests.processes import start_serve, stop_process
from tests.promise_cases import T, plan, promises, request

KEY = "3f9c2b7a41d85e60c1a4b9f07e2d3c58a6b1e9d4f7c20a85b3e6d1c9f4a7b2e0"
NEW_KEY = "a0b1c2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccddeeff"
REASONS = ("missing", "malformed", "expired", "invalid", "older", "reshaped")
_clusters = itertools.count()


@dataclass
class Replica:
    """A server process, its address and /metrics port; its log drained (and kept)."""

    proc: subprocess.Popen[str]
    target: str
    metrics_port: int
    lines: list[str] = field(default_factory=list, repr=False)
    client: DispatcherClient | None = field(default=None, repr=False)

    def dispatch(self, message: pb.DispatchRequest) -> pb.DispatchResponse:
        if self.client is None:
            self.client = DispatcherClient(self.target, timeout=60)
        return self.client.dispatch(message)

    def refused(self, reason: str | None = None) -> float:
        text = scrape_text(self.metrics_port)
        return sum(value(text, "hpcdispatch_promises_refused_total", reason=r)
                   for r in ([reason] if reason else REASONS))


def start_replica(folder: Path, keys: tuple[str, ...] | None) -> Replica:
    folder.mkdir(parents=True)
    config = folder / "server.yaml"
    lines = [f"metrics_port: {free_port()}", "workers: 4"]
    if keys is not None:
        (folder / "promise.keys").write_text("\n".join(keys) + "\n")
        lines.append(f"promise_key_file: {folder / 'promise.keys'}")
    config.write_text("\n".join(lines) + "\n")
    proc, port, logged = start_serve(config)
    replica = Replica(proc, f"127.0.0.1:{port}", int(lines[0].split()[1]), logged)
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: replica.lines.extend(stdout), daemon=True).start()
    return replica


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Replica]]:
    """one and twin share KEY; rotating signs with NEW_KEY and still accepts KEY (a rotation
    under way); keyless has no key file (a random key of its own)."""
    folder = tmp_path_factory.mktemp("replicas")
    started: dict[str, Replica] = {}
    try:
        for name, keys in (("one", (KEY,)), ("twin", (KEY,)), ("rotating", (NEW_KEY, KEY)),
                           ("keyless", None)):
            started[name] = start_replica(folder / name, keys)
        yield started
    finally:
        for replica in started.values():
            if replica.client is not None:
                replica.client.close()
            stop_process(replica.proc, 15)


def test_replicas_sharing_a_key_keep_each_others_promises_exactly(
    replicas: dict[str, Replica],
) -> None:
    """one promises A T + 1,000 and B T + 2,000; E, seen late, would go before B if planned
    from nothing. twin and rotating keep both promises sent back, as one itself does, and
    give the same promise the same token (twin) or one of the new key (rotating)."""
    one, twin, rotating = replicas["one"], replicas["twin"], replicas["rotating"]
    real = promises(one.dispatch(request(T, "shared")))
    assert {job: start for job, (start, _) in real.items()} == {"A": T + 1000, "B": T + 2000}
    expected = ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0),
                     ("E", T + 4000, True, 0)])
    on_twin = twin.dispatch(request(T + 1, "shared", real, late_e=True))
    on_rotating = rotating.dispatch(request(T + 1, "shared", real, late_e=True))
    assert plan(on_twin) == plan(on_rotating) == expected
    assert promises(on_twin)["A"] == real["A"]  # B's token signs E's promise now (older)
    assert promises(on_rotating)["A"][0] == real["A"][0]
    assert promises(on_rotating)["A"][1] != real["A"][1]
    assert twin.refused() == 0 and rotating.refused() == 0
    # Back to one: the twin's tokens are its own; the rotating replica's new key is not.
    assert plan(one.dispatch(request(T + 2, "shared", promises(on_twin), late_e=True))) == expected
    assert one.refused() == 0
    one.dispatch(request(T + 3, "shared", promises(on_rotating), late_e=True))
    assert one.refused("invalid") == 3


def test_a_replica_with_another_key_or_none_keeps_none_of_them(
    replicas: dict[str, Replica],
) -> None:
    """Without the key, the promises sent back are refused, counted and logged: E is planned
    before B, as from nothing; the keyless replica's own promises are refused by one too."""
    one, keyless = replicas["one"], replicas["keyless"]
    real = promises(one.dispatch(request(T, "foreign")))
    refused = keyless.dispatch(request(T + 1, "foreign", real, late_e=True))
    assert plan(refused) == ([], [("A", T + 1000, True, 0), ("B", T + 3000, True, 0),
                                  ("E", T + 2000, True, 0)])
    assert keyless.refused("invalid") == 2
    assert any('"promises refused' in line and '"foreign"' in line for line in keyless.lines)
    before = one.refused("invalid")
    one.dispatch(request(T + 2, "foreign", promises(refused), late_e=True))
    assert one.refused("invalid") == before + 3


# -- random sequences of decisions on two replicas --------------------------------------------

NODES = ("n0", "n1", "n2")
FORGERIES = ("no token, now", "an earlier start", "another job's promise",
             "a foreign key's token", "an altered expiry")


@dataclass(frozen=True)
class Job:
    id: str
    arrives: int  # seconds after T
    units: int  # whole 4-core nodes
    seconds: int  # exact run time (= requested = expected)


@dataclass
class Caller:
    """A workload manager that starts what it is told and sends back every promise."""

    cluster: str
    jobs: list[Job]
    t: int = T
    running: dict[str, tuple[int, int, list[str]]] = field(default_factory=dict)
    queued: dict[str, Job] = field(default_factory=dict)
    told: dict[str, tuple[int, str]] = field(default_factory=dict)  # latest promise, token
    first: dict[str, int] = field(default_factory=dict)  # first promised start
    started: dict[str, int] = field(default_factory=dict)

    def request(self, promises: dict[str, tuple[int, str]] | None = None) -> pb.DispatchRequest:
        message = pb.DispatchRequest(time=self.t, cluster=self.cluster,
                                     dispatcher=pb.DISPATCHER_PCP20,
                                     predictor=pb.PREDICTOR_WALLTIME)
        message.search.profile = "book"
        message.search.promise_after_s = 0  # the ladder's first rung: every job from arrival
        for node in NODES:
            message.nodes.add(id=node, state=pb.NODE_STATE_UP, capacity={"core": 4})
        for job_id, (start, seconds, nodes) in self.running.items():
            message.running_jobs.add(
                id=job_id, start_time=start, requested_time=seconds, expected_duration=seconds,
                units=[pb.UnitAllocation(node_id=n, amounts={"core": 4}) for n in nodes])
        sent = self.told if promises is None else promises
        for job in self.queued.values():
            q = message.queued_jobs.add(id=job.id, submit_time=T + job.arrives, units=job.units,
                                        unit_request={"core": 4}, requested_time=job.seconds)
            if job.id in sent:
                q.promised_start, q.promise_token = sent[job.id]
        return message

    def arrive_and_end(self) -> None:
        for job in self.jobs:
            if T + job.arrives <= self.t and job.id not in self.queued and (
                    job.id not in self.started):
                self.queued[job.id] = job
        self.running = {j: r for j, r in self.running.items() if r[0] + r[1] > self.t}

    def apply(self, answer: pb.DispatchResponse) -> None:
        """Check the answer against the promises sent, start what it says, keep its promises."""
        now = promises(answer)
        for s in answer.starts:
            if s.job_id in self.told:  # a promise is kept: started no later
                assert self.t <= self.told[s.job_id][0], (s.job_id, self.t, self.told)
            self.started[s.job_id] = self.t
            job = self.queued.pop(s.job_id)
            self.running[job.id] = (self.t, job.seconds, [u.node_id for u in s.units])
        for e in answer.report.expected_starts:
            assert e.moved_later_seconds == 0
        for job_id, (start, _) in now.items():
            if job_id in self.told:  # a real promise sent back keeps its start exactly
                assert start == self.told[job_id][0], (job_id, start, self.told[job_id])
            self.first.setdefault(job_id, start)
        assert set(now) == set(self.queued)  # the book promises every waiting job
        self.told = now

    def order(self, job_id: str) -> tuple[int, str]:
        """Submit order (q_i, then id), in which each token signs the promises before it."""
        return T + self.queued[job_id].arrives, job_id

    def next_time(self) -> int | None:
        times = [T + j.arrives for j in self.jobs if T + j.arrives > self.t]
        times += [s + d for s, d, _ in self.running.values() if s + d > self.t]
        times += [s for s, _ in self.told.values() if s > self.t]
        return min(times, default=None)


def forge(kind: str, caller: Caller, victim: str, foreign: Replica) -> dict[str, tuple[int, str]]:
    """The promises to send with `victim`'s replaced by a forgery of `kind`."""
    start, token = caller.told[victim]
    others = [j for j in caller.told if j != victim]
    foreign_promises = (promises(foreign.dispatch(caller.request()))
                        if kind == "a foreign key's token" else {})
    if kind == "no token, now":
        forged = (caller.t, "")
    elif kind == "an earlier start":
        forged = (start - 1 - (start - caller.t) // 2, token)
    elif kind == "another job's promise" and others:
        forged = caller.told[others[0]]
    elif foreign_promises:  # the keyless replica's, for this job or (started there) another
        forged = foreign_promises.get(victim, next(iter(foreign_promises.values())))
    else:  # an altered expiry (also the fallback of the two above)
        version, expires, mac = token.split(".")
        forged = (start, f"{version}.{int(expires) + 3600}.{mac}")
    return {**caller.told, victim: forged}


jobs = st.lists(
    st.builds(lambda arrives, units, seconds: (arrives, units, seconds),
              st.integers(0, 3000), st.integers(1, 3), st.integers(100, 3000)),
    min_size=2, max_size=7,
).map(lambda raw: [Job(f"j{i}", a, u, s) for i, (a, u, s) in enumerate(sorted(raw))])


@settings(max_examples=20, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=jobs, choices=st.lists(st.tuples(st.booleans(), st.integers(0, 2 * len(FORGERIES))),
                                   min_size=40, max_size=40),
       blocked_until=st.integers(100, 2000))
def test_two_replicas_believe_no_forged_promise_and_keep_every_real_one(
    replicas: dict[str, Replica], jobs: list[Job], choices: list[tuple[bool, int]],
    blocked_until: int,
) -> None:
    """A caller alternates at random between one and twin (sharing a key), sending back every
    promise it was told, and at random steps first sends one promise forged (FORGERIES) to the
    replica it then asks: the forged decision is the one without that promise at all, the
    forgery is counted, and the real promises keep their starts to the second until each job
    starts, no later than its first promise."""
    caller = Caller(f"property-{next(_clusters)}", jobs)
    caller.running["r"] = (T - 100, 100 + blocked_until, ["n0", "n1"])
    caller.arrive_and_end()
    for on_twin, forgery in choices:
        replica = replicas["twin" if on_twin else "one"]
        if forgery < len(FORGERIES) and caller.told:
            victim = sorted(caller.told)[forgery % len(caller.told)]
            before = replica.refused()
            forged = replica.dispatch(caller.request(
                forge(FORGERIES[forgery], caller, victim, replicas["keyless"])))
            # The forgery, and each newer promise (planned around the victim's: `older`).
            newer = sum(caller.order(j) > caller.order(victim) for j in caller.told)
            assert replica.refused() == before + 1 + newer, (FORGERIES[forgery], victim,
                                                              caller.told)
            without = {j: p for j, p in caller.told.items() if j != victim}
            stripped = replica.dispatch(caller.request(without))
            assert plan(forged) == plan(stripped), FORGERIES[forgery]
        caller.apply(replica.dispatch(caller.request()))
        upcoming = caller.next_time()
        if upcoming is None:
            break
        caller.t = upcoming
        caller.arrive_and_end()
    assert not caller.queued and set(caller.started) == {j.id for j in jobs}
    assert all(caller.started[j] <= first for j, first in caller.first.items())


# -- promises across replicas (issue #51, item 1) ----------------------------------------------


def moved(response: pb.DispatchResponse) -> dict[str, int]:
    return {e.job_id: e.moved_later_seconds for e in response.report.expected_starts}


def test_a_fresh_replica_sent_only_the_newer_jobs_token_keeps_the_older_promise(
    replicas: dict[str, Replica],
) -> None:
    """The issue's first case: one promises A T + 1,000 and B T + 2,000; twin, which made
    neither, is sent B's real token alone at T + 60. Believed (main before this change), B
    started at once and A moved to T + 2,060. B's token signs A's promise, which B's start was
    planned around: without it B's promise is not believed (counted `older`), and twin plans
    both from nothing, A first."""
    one, twin = replicas["one"], replicas["twin"]
    real = promises(one.dispatch(request(T, "b2-fresh")))
    before = twin.refused("older")
    answer = twin.dispatch(request(T + 60, "b2-fresh", {"B": real["B"]}))
    assert plan(answer) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])
    assert twin.refused("older") == before + 1
    assert any('"promises refused' in line and '"b2-fresh"' in line for line in twin.lines)
    # Both sent back, as told: twin keeps them exactly, and so does one.
    for replica in (twin, one):
        both = replica.dispatch(request(T + 61, "b2-fresh", real))
        assert plan(both) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])


def grown(message: pb.DispatchRequest, job_id: str, units: int | None = None,
          requested: int | None = None) -> pb.DispatchRequest:
    """`message` with one queued job's units or requested time changed."""
    job = next(q for q in message.queued_jobs if q.id == job_id)
    job.units = units or job.units
    job.requested_time = requested or job.requested_time
    return message


def test_a_grown_job_sent_with_its_token_alone_is_promised_anew_and_the_older_promise_stays(
    replicas: dict[str, Replica],
) -> None:
    """The issue's second case: one holds A at T + 1,000 and B at T + 2,000; B comes back grown
    from 1 to 2 units with its token alone. Before, B kept its promise and moved before A, to
    T + 1,000, and A moved to T + 3,000 with moved_later_seconds 0. The token signs A's promise
    (not sent: `older`) and B's shape: B is promised anew after A, A keeps T + 1,000; sent with
    A's token too, B's is refused as `reshaped`, counted and logged."""
    one = replicas["one"]
    real = promises(one.dispatch(request(T, "b2-grown")))
    expected = ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])
    before = one.refused("older")
    assert plan(one.dispatch(grown(request(T, "b2-grown", {"B": real["B"]}), "B", 2))) == expected
    assert one.refused("older") == before + 1
    before = one.refused("reshaped")
    assert plan(one.dispatch(grown(request(T + 60, "b2-grown", real), "B", 2))) == expected
    assert one.refused("reshaped") == before + 1
    assert any('"reshaped": 1' in line and '"b2-grown"' in line for line in one.lines)


def test_a_forged_or_older_promise_omitting_token_cannot_move_the_older_promise(
    replicas: dict[str, Replica],
) -> None:
    """On twin, which made neither promise, B's token with its part that signs the older
    promises altered, or in the format before this change (which signed neither them nor the
    shape), is not believed: A keeps T + 1,000 and B does not start ahead of it."""
    one, twin = replicas["one"], replicas["twin"]
    real = promises(one.dispatch(request(T, "b2-forged")))
    start, token = real["B"]
    _, expires, macs = token.split(".")
    forgeries = {"older": (start, token[:-11] + "A" * 11),
                 "malformed": (start, f"1.{expires}.{macs[:22]}")}
    for reason, forged in forgeries.items():
        before = twin.refused(reason)
        answer = twin.dispatch(request(T + 60, "b2-forged", {"A": real["A"], "B": forged}
                                       if reason == "older" else {"B": forged}))
        assert plan(answer) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])
        assert twin.refused(reason) == before + 1


def test_every_promise_that_moves_later_says_by_how_much_and_is_counted(
    replicas: dict[str, Replica],
) -> None:
    """A comes back to twin asking for 1,500 s instead of 1,000, with both tokens: A's is real
    but made for another shape (`reshaped`), B's believed (it was planned around A's promise,
    sent). A is promised anew: B starts now and A's new promise is T + 2,060, 1,060 s later,
    which the answer says and the histogram counts."""
    one, twin = replicas["one"], replicas["twin"]
    real = promises(one.dispatch(request(T, "b2-later")))
    name = "hpcdispatch_promise_moved_later_seconds_count"
    before = value(scrape_text(twin.metrics_port), name, dispatcher="pcp20")
    answer = twin.dispatch(grown(request(T + 60, "b2-later", real), "A", requested=1500))
    assert plan(answer) == (["B"], [("A", T + 2060, True, 1060)])
    for e in answer.report.expected_starts:  # later than promised: said, by exactly that
        assert e.moved_later_seconds == max(0, e.start_time - real[e.job_id][0])
    assert value(scrape_text(twin.metrics_port), name, dispatcher="pcp20") == before + 1
