"""Decision time and model size against system size (64 … 100,000 nodes).

A fixed queue of 100 jobs, the machine about 70 % busy, the same instance for every dispatcher,
sent through a real service on loopback; time is measured at the client (the whole round trip:
encoding, validation, prediction, model, search, check), after one warm-up request per node
list (the service indexes a node list once, see server/intake/node_table.py; the warm-up's
own time is printed as the first row of each size). PCP'19's model grows with the nodes;
past the request deadline its build gives up and the heuristic answers (status HEURISTIC).

    python -m benchmarks.scale [--nodes 64,1000,10000,100000] [--seeds 3]
    python -m benchmarks.scale --sessions --dispatchers easy,pcp20 --timeout 120
    python -m benchmarks.scale --sessions --dispatchers easy,pcp20 --timeout 120 \\
        --cases 10000:1000,100000:1000 --repeats 3 --baseline-commit a8b54e1
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack

import grpc

from benchmarks.scale import sessions
from benchmarks.scale.baseline_server import baseline_server
from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.embedded import embedded_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb

DEFAULT_DISPATCHER = "pcp20"  # the service's default (server/config.py)
TARGET_NODES = 100_000
TARGET_MS = 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--nodes", default="64,1000,10000,100000")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--dispatchers", default="easy,hcp19,pcp19,pcp20")
    parser.add_argument("--timeout", type=float, default=30.0, help="request deadline, s")
    parser.add_argument("--sessions", action="store_true",
                        help="instead: session decisions next to full-snapshot Dispatch "
                        "(benchmarks/scale/sessions.py) for each NODES:QUEUED of --cases")
    parser.add_argument("--cases", default="10000:1000,100000:1000,10000:50000")
    parser.add_argument("--repeats", type=int, default=3, help="decisions per case (--sessions)")
    parser.add_argument("--dispatch-repeats", type=int,
                        help="with --sessions: Dispatch calls per case (default: --repeats), "
                        "so that many session decisions (their p99 and maximum) cost no more "
                        "than a few whole snapshots")
    parser.add_argument("--baseline-commit", metavar="REV",
                        help="with --sessions: also time Dispatch on the server of commit REV "
                        "(e.g. a8b54e1, where issue #12 was filed), started from an export of "
                        "that commit (benchmarks/scale/baseline_server.py), side by side")
    args = parser.parse_args()
    if args.baseline_commit and not args.sessions:
        parser.error("--baseline-commit needs --sessions")
    if args.sessions:
        cases = [(int(n), int(q)) for n, q in (c.split(":") for c in args.cases.split(","))]
        with ExitStack() as stack:
            target = stack.enter_context(embedded_server())
            baseline = None
            if args.baseline_commit:
                old = stack.enter_context(baseline_server(args.baseline_commit))
                baseline = (args.baseline_commit, old)
            sessions.run(target, cases, args.dispatchers.split(","), args.repeats,
                               args.timeout, baseline, args.dispatch_repeats)
        return
    print("| nodes | dispatcher | decision ms p50 | × EASY | server build ms | server solve ms |"
          " server total ms | variables | constraints | started | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    target_p50: float | None = None
    with embedded_server() as target, DispatcherClient(target, timeout=args.timeout) as client:
        for nodes in (int(n) for n in args.nodes.split(",")):
            system = homogeneous(f"h{nodes}", nodes, {"core": 32, "mem": 131072})
            requests = [
                snapshot_to_pb(synthetic_snapshot(system, 100, 0.7, seed=s))
                for s in range(args.seeds)
            ]
            # The first request of a node list builds the service's node table; the ones after
            # it (a workload manager's steady state, and every row below) only hash the list.
            warmup = pb.DispatchRequest()
            warmup.CopyFrom(requests[0])
            warmup.dispatcher = pb.DISPATCHER_EASY
            started = time.perf_counter()
            client.dispatch(warmup, timeout=args.timeout)
            cold = (time.perf_counter() - started) * 1000
            print(f"| {nodes} | easy, first request of this node list | {cold:.0f} | – | – | – "
                  "| – | – | – | – | – |", flush=True)
            easy: float | None = None
            for name in args.dispatchers.split(","):
                walls, responses = [], []
                try:
                    for request in requests:
                        request.dispatcher = pb.Dispatcher.ValueType(DISPATCHER_NAMES[name])
                        started = time.perf_counter()
                        responses.append(client.dispatch(request, timeout=args.timeout))
                        walls.append((time.perf_counter() - started) * 1000)
                except grpc.RpcError as exc:  # past the deadline: the dispatcher is unusable here
                    code = exc.code().name
                    print(f"| {nodes} | {name} | > {args.timeout * 1000:.0f} ({code}) | – | – "
                          "| – | – | – | – | – | – |", flush=True)
                    continue
                p50 = statistics.median(walls)
                easy = p50 if name == "easy" else easy
                if nodes == TARGET_NODES and name == DEFAULT_DISPATCHER:
                    target_p50 = p50
                reports = [r.report for r in responses]

                def med(values: list[float]) -> float:
                    return statistics.median(values)

                statuses = sorted({pb.SolveStatus.Name(r.status)[13:] for r in reports})
                print(
                    f"| {nodes} | {name} | {p50:.0f} | {p50 / easy if easy else float('nan'):.1f} "
                    f"| {med([r.build_seconds * 1000 for r in reports]):.0f} "
                    f"| {med([r.solve_seconds * 1000 for r in reports]):.0f} "
                    f"| {med([r.total_seconds * 1000 for r in reports]):.0f} "
                    f"| {med([r.model_variables for r in reports]):.0f} "
                    f"| {med([r.model_constraints for r in reports]):.0f} "
                    f"| {med([len(r.starts) for r in responses]):.0f} | {','.join(statuses)} |",
                    flush=True,
                )
    print()
    print(target_line(target_p50))


def target_line(p50_ms: float | None) -> str:
    """The issue's scale target: the default dispatcher's median decision at 100,000 nodes."""
    head = (f"**Target** — {DEFAULT_DISPATCHER} median decision at {TARGET_NODES:,} nodes under "
            f"{TARGET_MS:,.0f} ms:")
    if p50_ms is None:
        return f"{head} not measured (add {TARGET_NODES} to --nodes)."
    if p50_ms <= TARGET_MS:
        return f"{head} **met**: {p50_ms:,.0f} ms."
    return f"{head} **missed** by {p50_ms / TARGET_MS:.1f}× ({p50_ms:,.0f} ms)."


if __name__ == "__main__":
    main()
