"""What a session stream's protobuf costs per decision, beside the decision itself.

    python -m benchmarks.speed.stream_encoding --trace kth-sp2 --limit-jobs 5000

Replays the first N jobs in-process (`hpcdispatch simulate --in-process`, wall-time
estimates) and, at every decision, also does the protobuf work the stream path adds to it,
timed apart in thread CPU: the client building its delta (`stream_backend.delta_of`) and
serializing its stream message, the server parsing it, the server building the answer's
starts (`proto_convert.add_starts`, as the decision front does; the report's few scalar
fields are left out) and serializing the stream answer, and the client parsing that. Printed:
CPU µs per decision of the in-process decision (the session update and the checked decision)
and of each protobuf step, so that "an in-process decision plus the encoding" is a number to
hold the stream path's CPU per decision against (BENCHMARKS.md §5.6).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

from hpcdispatch.cli import main as cli_main
from hpcdispatch.proto_convert import add_starts
from hpcdispatch.sim_adapter import in_process_backend
from hpcdispatch.sim_adapter.backend import Answer, StateChange
from hpcdispatch.sim_adapter.stream_backend import delta_of
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

SPENT: dict[str, float] = defaultdict(float)  # step -> thread CPU seconds
COUNT = [0]


def timed_steps(decide: Callable[..., Answer]) -> Callable[..., Answer]:
    def measured(backend: in_process_backend.InProcessBackend, change: StateChange,
                 whole: Callable[[], Snapshot]) -> Answer:
        clock = time.thread_time
        began = clock()
        answer = decide(backend, change, whole)
        decided = clock()
        SPENT["in-process update + decision"] += decided - began
        if COUNT[0]:  # (the first decision opens the session with the whole snapshot)
            message = pb.SessionStreamRequest(tag=COUNT[0])
            message.update.CopyFrom(delta_of(change, backend.template))
            sent = message.SerializeToString()
            encoded = clock()
            pb.SessionStreamRequest.FromString(sent)
            parsed = clock()
            state = backend.session.state if backend.session is not None else None
            unit_requests = {} if state is None else {j: q.unit_request
                                                      for j, q in state.queued.items()}
            reply = pb.SessionStreamResponse(tag=COUNT[0])
            add_starts(reply.updated.decision, answer.decision.starts, unit_requests)
            back = reply.SerializeToString()
            answered = clock()
            pb.SessionStreamResponse.FromString(back)
            done = clock()
            SPENT["client: delta built + serialized"] += encoded - decided
            SPENT["server: delta parsed"] += parsed - encoded
            SPENT["server: answer built + serialized"] += answered - parsed
            SPENT["client: answer parsed"] += done - answered
        COUNT[0] += 1
        return answer

    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="kth-sp2")
    parser.add_argument("--limit-jobs", type=int, default=5000)
    parser.add_argument("--dispatcher", default="easy")
    args = parser.parse_args(argv)
    backend = in_process_backend.InProcessBackend
    backend.decide = timed_steps(backend.decide)  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as out:
        cli_main(["simulate", "--trace", args.trace, "--limit-jobs", str(args.limit_jobs),
                  "--dispatcher", args.dispatcher, "--predictor", "walltime", "--in-process",
                  "--no-progress", "--out", out])
    decisions = COUNT[0]
    print(f"{decisions} decisions; thread CPU µs per decision", file=sys.stderr)
    protobuf = 0.0
    for step, seconds in SPENT.items():
        per = seconds / max(decisions - (step != "in-process update + decision"), 1) * 1e6
        protobuf += per if step.startswith(("client", "server")) else 0.0
        print(f"{step:40s} {per:8.0f}")
    print(f"{'protobuf, all four steps':40s} {protobuf:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
