"""The `dispatch` start table of a hand-made answer (issue #49, item 2): a promise shows the start
it is guaranteed by (STARTS_BY) and its likely start (LIKELY), an estimate its likely start
only; a promise moved later says by how much and why; the footer claims the guarantee and no
more."""

from __future__ import annotations

from hpcdispatch.start_table import HEADER, date, start_rows, start_table
from hpcdispatch.v1 import dispatcher_pb2 as pb

T = 1_795_240_000


def answer() -> tuple[pb.DispatchRequest, pb.DispatchResponse]:
    request = pb.DispatchRequest(time=T)
    for job_id, user in (("p1", "alice"), ("p2", "bob"), ("p3", "carol"), ("e1", "dave")):
        request.queued_jobs.add(id=job_id, user=user, queue="batch")
    response = pb.DispatchResponse(time=T)
    starts = response.report.expected_starts
    kept = starts.add(job_id="p1", start_time=T + 7_200, promised=True)
    kept.likely_start = T + 1_800
    moved = starts.add(job_id="p2", start_time=T + 9_000, promised=True,
                       moved_later_seconds=3_900,
                       move_reason=pb.PROMISE_MOVE_REASON_NODE_UNAVAILABLE)
    moved.likely_start = T + 8_000
    starts.add(job_id="p3", start_time=T + 10_000, promised=True)  # no likely start given
    starts.add(job_id="e1", start_time=T + 600, promised=False)
    return request, response


def test_promises_show_starts_by_and_likely_estimates_likely_only() -> None:
    rows = {r[0]: dict(zip(HEADER, r, strict=True)) for r in start_rows(*answer())}
    assert list(rows) == ["e1", "p1", "p2", "p3"]  # soonest start first
    assert rows["p1"] == {
        "JOBID": "p1", "PARTITION": "batch", "USER": "alice", "KIND": "promised",
        "STARTS_BY": date(T + 7_200), "LIKELY": date(T + 1_800), "IN": "30m",
        "MOVED_LATER": "-", "WHY": "-"}
    assert (rows["p2"]["MOVED_LATER"], rows["p2"]["WHY"]) == ("+1h05m", "node-down")
    assert (rows["p3"]["LIKELY"], rows["p3"]["IN"]) == ("-", "2h46m")  # until STARTS_BY
    assert (rows["e1"]["KIND"], rows["e1"]["STARTS_BY"], rows["e1"]["LIKELY"],
            rows["e1"]["IN"]) == ("estimate", "-", date(T + 600), "10m")


def test_the_footer_claims_the_guarantee_and_no_more() -> None:
    footer = start_table(*answer()).splitlines()[-1]
    assert footer.startswith("3 promised (starts by STARTS_BY unless a node goes down or a "
                             "running job runs past its requested time")
    assert "1 estimated" in footer
    assert "kept" not in footer and "only ever moved earlier" not in footer
