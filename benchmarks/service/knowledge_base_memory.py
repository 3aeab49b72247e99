"""What the service keeps of what callers send: the server's RSS per 10,000 reported completions
(long and short job names) and per distinct cluster name (issue #33, item 4).

Each case runs a fresh server in a child process (`hpcdispatch.server.rpc.app.start_server`,
defaults but `listen`, and the knowledge-base keys given with --set) and drives it over real gRPC
from this process: completions in reports of 1,000, each 10,000 followed by a Dispatch of that
cluster (so the predictors' index reads them), then the server's VmRSS from /proc. The names:
`long` are 1,000 characters, every one distinct (the review's case: 27.5 KB a completion);
`short` are `app<i mod 500>` (0.58 KB). `clusters` sends one completion and one Dispatch for
each of N distinct cluster names.

    .venv/bin/python -m benchmarks.service.knowledge_base_memory [--completions 40000]
        [--clusters 2000]
        [--set knowledge_base_max_completions=100000 ...]

Prints one line per case: RSS at start and at the end, and the growth per 10,000 completions
(per cluster name for `clusters`). Linux only (reads /proc/PID/status).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
from multiprocessing.connection import Connection
from typing import Any

from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb

BATCH = 1_000  # completions per report
STEP = 10_000  # completions between two RSS readings
USERS = 100
LONG_NAME_CHARS = 1_000


def serve(settings: dict[str, Any], pipe: Connection) -> None:
    """The child: a server with `settings` over the defaults; sends its target, waits."""
    from hpcdispatch.server.config import load_config
    from hpcdispatch.server.logging_config import configure_logging
    from hpcdispatch.server.rpc.app import start_server

    configure_logging("console", "warning")  # no line per decision
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", **settings)
    running = start_server(config)
    pipe.send(running.target)
    pipe.recv()  # until the parent is done
    running.stop(grace=0)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/PID/status")


def job_name(i: int, names: str) -> str:
    if names == "long":  # distinct, 1,000 characters
        return f"{i:08d}-" + "n" * (LONG_NAME_CHARS - 9)
    return f"app{i % 500}"


def completion(i: int, names: str) -> pb.JobCompletion:
    start = 1_000_000 + i * 10
    return pb.JobCompletion(
        job_id=f"j{i}", user=f"u{i % USERS}", name=job_name(i, names), queue="batch",
        units=1 + i % 4, unit_request={"core": 1 + i % 8}, requested_time=3_600,
        start_time=start, end_time=start + 60 + i % 3_000,
    )


def decide(client: DispatcherClient, cluster: str) -> None:
    """A small decision of `cluster` (its predictors read what was reported) that starts
    nothing (no node holds its jobs), so that the metrics keep no prediction of it."""
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 5, seed=1))
    for job in request.queued_jobs:
        job.unit_request["core"] = 1_000
    request.cluster = cluster
    request.dispatcher = pb.DISPATCHER_EASY
    assert not client.dispatch(request, timeout=60).starts


def run_case(case: str, total: int, clusters: int, settings: dict[str, Any]) -> str:
    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(settings, child))
    process.start()
    try:
        target = parent.recv()
        assert process.pid is not None
        with DispatcherClient(target, timeout=60) as client:
            decide(client, "default")  # warm up: every module loaded, one decision made
            client.report_completions([completion(-1, "short")])
            decide(client, "default")
            before = rss_mb(process.pid)
            if case == "clusters":
                readings = []
                for c in range(clusters):
                    name = f"cluster-{c:06d}"
                    client.report_completions([completion(c, "short")], cluster=name)
                    decide(client, name)
                    if (c + 1) % (clusters // 4 or 1) == 0:
                        readings.append(f"{rss_mb(process.pid):.0f}")
                after = rss_mb(process.pid)
                return (f"clusters: {clusters} distinct cluster names, RSS {before:.0f} -> "
                        f"{after:.0f} MB (every {clusters // 4}: {', '.join(readings)}), "
                        f"{(after - before) * 1024 / clusters:.2f} KB per name")
            readings = []
            for done in range(0, total, BATCH):
                client.report_completions(
                    [completion(i, case) for i in range(done, min(done + BATCH, total))])
                if (done + BATCH) % STEP == 0 or done + BATCH >= total:
                    decide(client, "default")
                    readings.append(f"{rss_mb(process.pid):.0f}")
            after = rss_mb(process.pid)
            per_step = (after - before) * STEP / total
            return (f"{case} names: {total} completions, RSS {before:.0f} -> {after:.0f} MB "
                    f"(every {STEP}: {', '.join(readings)}), {per_step:.1f} MB per {STEP} "
                    f"({(after - before) * 1024 / total:.2f} KB each)")
    finally:
        parent.send("stop")
        process.join(timeout=30)


def setting(text: str) -> tuple[str, int]:
    key, _, value = text.partition("=")
    return key.strip(), int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--completions", type=int, default=40_000)
    parser.add_argument("--clusters", type=int, default=2_000)
    parser.add_argument("--cases", default="long,short,clusters")
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=N",
                        help="a ServerConfig key of the server (repeatable)")
    args = parser.parse_args(argv)
    settings = dict(args.set)
    for case in args.cases.split(","):
        print(run_case(case, args.completions, args.clusters, settings), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
