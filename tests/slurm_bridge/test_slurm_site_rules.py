"""A site's rules read from Slurm (issue #50, item 3), on output captured from real Slurm 22.05
daemons (tests/slurm_cluster.py, 4 nodes × 2 CPUs; partitions batch = n[1-4], left = n[1-2],
right = n[3-4]; n1 Features=fast, n3 Features=fast,big; n4 drained; at 1796182950 =
2026-12-02T03:42:30Z):

* tests/data/slurm/sinfo_rules.json, squeue_rules.json: `sinfo --json`, `squeue --json --all`
  (held jobs with --constraint fast&big, fast|big, [fast|big], big, "fast,big" (kept by Slurm
  as fast&big), --nice=100 then `scontrol update nice=-50`, -A acct1/acct2,
  --reservation=mag; a job running in the MAGNETIC reservation mag);
* tests/data/slurm/scontrol_reservations.txt: `TZ=UTC scontrol show reservation -o`: maint
  (MAINT on n3, 03:50:07-04:50:07, Users=root), acres (n4, Accounts=acct1,acct2), mag
  (MAGNETIC on n2, Users=root, active), drainmaint (MAINT on the drained n4, active until
  03:57:29).
"""

from __future__ import annotations

import calendar
import dataclasses
import time

import pytest
from structlog.testing import capture_logs

from hpcdispatch.constraints import constraint_rules
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.intake.validation import validate_dispatch_request
from hpcdispatch.slurm_bridge.bridge import Bridge, BridgeConfig
from hpcdispatch.slurm_bridge.metrics import BridgeMetrics
from hpcdispatch.slurm_bridge.site_rules import NICE_OFFSET
from hpcdispatch.slurm_bridge.slurm_json import SlurmParseError, parse_jobs, parse_nodes
from hpcdispatch.slurm_bridge.slurm_reservations import parse_reservations
from hpcdispatch.slurm_bridge.snapshot_builder import (
    BuilderSettings,
    BuiltSnapshot,
    build_snapshot,
)
from hpcdispatch.snapshot import NodeState, UnavailabilityWindow
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.slurm_bridge.test_slurm_bridge import DATA, FakeService, FakeSlurm, load, make_bridge

NOW = 1_796_182_950  # when the fixtures were captured
MANAGED = BuilderSettings(frozenset({"left", "right"}))


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def reservations_text() -> str:
    return (DATA / "scontrol_reservations.txt").read_text()


def built_rules(settings: BuilderSettings = MANAGED) -> BuiltSnapshot:
    nodes = parse_nodes(load("sinfo_rules.json"))
    jobs = parse_jobs(load("squeue_rules.json"))
    return build_snapshot(nodes, jobs, settings, NOW,
                          reservations=parse_reservations(reservations_text()))


def test_parse_node_features_and_partitions() -> None:
    nodes = {n.name: n for n in parse_nodes(load("sinfo_rules.json"))}
    assert {n: (x.partitions, x.features) for n, x in nodes.items()} == {
        "n1": (("batch", "left"), ("fast",)), "n2": (("batch", "left"), ()),
        "n3": (("batch", "right"), ("fast", "big")), "n4": (("batch", "right"), ())}
    assert "DRAIN" in nodes["n4"].flags


def test_parse_job_constraint_nice_account_reservation() -> None:
    jobs = {j.id: j for j in parse_jobs(load("squeue_rules.json"))}
    assert {i: jobs[i].constraint for i in ("2", "3", "8", "9", "10")} == {
        "2": "fast&big", "3": "fast|big", "8": "fast&big", "9": "big", "10": "[fast|big]"}
    assert jobs["4"].nice == -50  # printed as 4294967246
    assert jobs["1"].nice == 0  # printed as null
    assert (jobs["3"].account, jobs["9"].account) == ("acct1", "acct2")
    assert (jobs["7"].reservation, jobs["6"].reservation, jobs["5"].reservation) == (
        "mag", "mag", "")
    assert jobs["3"].partitions == ("left", "right")


def test_parse_reservations() -> None:
    res = {r.name: r for r in parse_reservations(reservations_text())}
    assert list(res) == ["maint", "acres", "mag", "drainmaint"]
    assert (res["maint"].start, res["maint"].end) == (utc("2026-12-02T03:50:07"),
                                                      utc("2026-12-02T04:50:07"))
    assert res["maint"].maintenance and res["maint"].nodes == ("n3",)
    assert res["maint"].users == ("root",)
    assert res["acres"].accounts == ("acct1", "acct2") and res["acres"].users == ()
    assert "MAGNETIC" in res["mag"].flags and not res["mag"].maintenance
    assert parse_reservations("No reservations in the system\n") == []
    with pytest.raises(SlurmParseError, match="StartTime"):
        parse_reservations("ReservationName=x StartTime=tomorrow EndTime=2026-12-02T04:50:07")


@pytest.mark.parametrize(("constraint", "rules"), [
    ("", ((), ())), ("(null)", ((), ())), ("fast", (("fast",), ())),
    ("fast&big", (("fast", "big"), ())), ("fast,big", (("fast", "big"), ())),
    ("a&b&a", (("a", "b"), ())),
    # OR: an OR of AND-terms, folded left to right as Slurm evaluates it (no precedence)
    ("fast|big", ((), (("fast",), ("big",)))), ("a|b|c", ((), (("a",), ("b",), ("c",)))),
    ("a&b|c", ((), (("a", "b"), ("c",)))), ("a|b&c", ((), (("a", "c"), ("b", "c")))),
    ("a|b&c|d", ((), (("a", "c"), ("b", "c"), ("d",)))), ("a|a", (("a",), ())),
    ("[fast|big]", None), ("fast*2", None), ("(fast&big)", None),
    ("!fast", None), ("[fast&big]", None), ("fast||big", None), ("|fast", None),
])
def test_which_constraints_the_snapshot_expresses(
        constraint: str, rules: tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None,
) -> None:
    assert constraint_rules(constraint) == rules


def test_snapshot_carries_partitions_features_priority_and_windows() -> None:
    built = built_rules()
    snap = built.snapshot
    nodes = {n.id: n for n in snap.nodes}
    assert {n: (x.partitions, x.features) for n, x in nodes.items()} == {
        "n1": (("batch", "left"), ("fast",)), "n2": (("batch", "left"), ()),
        "n3": (("batch", "right"), ("fast", "big")), "n4": (("batch", "right"), ())}
    queued = {q.id: q for q in snap.queued}
    # 4 is of batch (not managed); 10 (matching OR) goes to Slurm; 3 (OR) and 7
    # (--reservation=mag) are queued.
    assert set(queued) == {"2", "3", "5", "7", "8", "9"}
    assert built.to_slurm.keys() == {"10"}
    assert {i: (q.partitions, q.required_features, q.feature_alternatives, q.account,
                q.reservation) for i, q in queued.items()} == {
        "2": (("right",), ("fast", "big"), (), "", ""),
        "3": (("left", "right"), (), (("fast",), ("big",)), "acct1", ""),
        "5": (("left",), (), (), "", ""), "7": (("left",), (), (), "", "mag"),
        "8": (("right",), ("fast", "big"), (), "", ""),
        "9": (("right",), ("big",), (), "acct2", "")}
    assert {q.priority for q in queued.values()} == {NICE_OFFSET}
    # Only n3 may take the constrained jobs; fast|big, n1 or n3.
    assert {i: [n for n in nodes if q.may_use(nodes[n])] for i, q in queued.items()} == {
        "2": ["n3"], "3": ["n1", "n3"], "5": ["n1", "n2"], "7": ["n1", "n2"], "8": ["n3"],
        "9": ["n3"]}
    assert snap.windows == (
        UnavailabilityWindow(("n3",), utc("2026-12-02T03:50:07"), utc("2026-12-02T04:50:07")),
        # not MAGNETIC: a job without --reservation never runs in it, whatever its account
        UnavailabilityWindow(("n4",), utc("2026-12-02T04:00:07"), utc("2026-12-02T04:20:07"),
                             name="acres"),
        # the job asking for mag (7) runs only in it: n2, until 04:12:16
        UnavailabilityWindow(("n2",), utc("2026-12-02T03:42:16"), utc("2026-12-02T04:12:16"),
                             users=("root",), name="mag"),
        UnavailabilityWindow(("n4",), utc("2026-12-02T03:42:29"), utc("2026-12-02T03:57:29")),
    )
    # n4 is drained inside the maintenance drainmaint: up, kept free by the window until
    # 03:57:29, when it comes back.
    assert {n: x.state for n, x in nodes.items()} == {
        "n1": NodeState.UP, "n2": NodeState.UP, "n3": NodeState.UP, "n4": NodeState.UP}
    assert validate_dispatch_request(snapshot_to_pb(snap), load_config(env={}),
                                     [pb.PREDICTOR_UNSPECIFIED]) == []


def test_a_drained_node_without_a_maintenance_stays_drained() -> None:
    nodes = parse_nodes(load("sinfo_rules.json"))
    jobs = parse_jobs(load("squeue_rules.json"))
    others = [r for r in parse_reservations(reservations_text()) if r.name != "drainmaint"]
    built = build_snapshot(nodes, jobs, MANAGED, NOW, reservations=others)
    assert {n.id: n.state for n in built.snapshot.nodes}["n4"] is NodeState.DRAINED
    # and after the maintenance ended, with the reservation still listed (ended: no window)
    later = build_snapshot(nodes, jobs, MANAGED, utc("2026-12-02T03:57:29"),
                           reservations=parse_reservations(reservations_text()))
    assert {n.id: n.state for n in later.snapshot.nodes}["n4"] is NodeState.DRAINED
    assert all(w.end > utc("2026-12-02T03:57:29") for w in later.snapshot.windows)


def test_nice_orders_the_held_jobs() -> None:
    built = built_rules(BuilderSettings(frozenset({"batch"})))
    (job,) = [q for q in built.snapshot.queued if q.id == "4"]
    assert job.priority == NICE_OFFSET + 50  # nice -50: before every job of nice 0


def test_the_bridge_leaves_what_it_cannot_express_to_slurm() -> None:
    slurm = FakeSlurm("squeue_rules.json", "sinfo_rules.json")
    slurm.reservations_text = reservations_text()
    service = FakeService({"9": ["n3"]})
    bridge = Bridge(BridgeConfig(frozenset({"left", "right"}), dispatcher=pb.DISPATCHER_EASY),
                    slurm, service, BridgeMetrics(), clock=lambda: NOW, out=lambda s: None)
    with capture_logs() as logs:
        result = bridge.cycle()
    assert result.ok and result.released == ["9"], result
    # released unpinned, after the decided jobs (placed on what the snapshot saw free)
    assert slurm.actions == [("pin", "9"), ("release", "9"), ("release", "10")]
    left = {e["job_id"]: e["reason"] for e in logs if e["event"] == "job_left_to_slurm"}
    assert left.keys() == {"10"}
    assert bridge.metrics.registry.get_sample_value(
        "hpcdispatch_bridge_jobs_left_to_slurm_total") == 1
    (request,) = service.requests
    assert len(request.windows) == 4 and {j.id for j in request.queued_jobs} == {
        "2", "3", "5", "7", "8", "9"}
    wire = {j.id: j for j in request.queued_jobs}
    assert [list(t.features) for t in wire["3"].feature_alternatives] == [["fast"], ["big"]]
    assert wire["7"].reservation == "mag"
    assert [w.name for w in request.windows] == ["", "acres", "mag", ""]


def test_a_reservation_the_snapshot_cannot_hold_is_left_to_slurm() -> None:
    """Job 7 asks for mag: left to Slurm when mag holds no managed node (here: not read), or
    when the job asks for a maintenance (maint, MAINT: its window has no name)."""
    nodes = parse_nodes(load("sinfo_rules.json"))
    jobs = parse_jobs(load("squeue_rules.json"))
    others = [r for r in parse_reservations(reservations_text()) if r.name != "mag"]
    built = build_snapshot(nodes, jobs, MANAGED, NOW, reservations=others)
    assert "reservation 'mag'" in built.to_slurm["7"]
    into_maint = [dataclasses.replace(j, reservation="maint") if j.id == "7" else j
                  for j in jobs]
    built = build_snapshot(nodes, into_maint, MANAGED, NOW,
                           reservations=parse_reservations(reservations_text()))
    assert "reservation 'maint', a maintenance" in built.to_slurm["7"]


def test_a_failed_reservation_read_fails_the_cycle_and_nothing_is_released() -> None:
    slurm = FakeSlurm()
    slurm.reservations_text = "ReservationName=broken Nodes=n1\n"
    bridge = make_bridge(slurm, FakeService({"1": ["n2", "n2", "n3"]}))
    result = bridge.cycle()
    assert not result.ok and result.error_kind == "slurm_parse"
    assert slurm.actions == []
