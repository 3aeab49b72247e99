"""Session streams whose client never reads its answers: the server's RSS with N such streams,
and how many messages it read and answered ahead of the client (issue #51, item 4).

Each case runs a fresh server in a child process (`hpcdispatch.server.rpc.app.start_server`,
defaults but `listen` and the keys given with --set) on loopback, and drives it from this
process with grpc.aio: N session streams, each sending up to --messages `open` messages (a
snapshot of --queued jobs on the Eurora preset, decided with EASY) as fast as the stream takes
them, never reading an answer. A write that flow control holds back for --stall seconds ends
that stream's sending: the server is reading no more of it. After the last write (or --seconds
in all), the server's VmRSS from /proc, the messages its streams answered (its metrics) and the
writes the client got through.

    .venv/bin/python -m benchmarks.service.unread_streams [--streams 20,200] [--messages 200]
        [--queued 200] [--seconds 60] [--stall 2] [--probe-on] [--set max_sessions=16 ...]

Prints one line per case. Linux only (reads /proc/PID/status). Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing as mp
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import grpc

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from .knowledge_base_memory import rss_mb, setting


def serve(settings: dict[str, Any], probe_on: bool, pipe: Connection) -> None:
    """The child: a server with `settings` over the defaults (`probe_on`: with gRPC's
    bandwidth-delay probe, as before BENCHMARKS.md §8.3); sends its target, then answers each
    "count" with the stream messages it answered, until "stop"."""
    from hpcdispatch.server.config import load_config
    from hpcdispatch.server.logging_config import configure_logging
    from hpcdispatch.server.rpc import app
    from hpcdispatch.server.rpc.app import start_server

    if probe_on:
        options = app._channel_options
        app._channel_options = lambda config: [
            option for option in options(config) if option[0] != "grpc.http2.bdp_probe"]
    configure_logging("console", "error")  # no line per decision or stream
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", **settings)
    running = start_server(config)
    pipe.send(running.target)
    while pipe.recv() == "count":
        answered = sum(sample.value for metric in running.metrics.registry.collect()
                       if metric.name == "hpcdispatch_session_stream_messages"
                       for sample in metric.samples if sample.name.endswith("_total"))
        pipe.send(answered)
    running.stop(grace=0)


def open_message(tag: int, queued: int) -> pb.SessionStreamRequest:
    snapshot = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], queued, 0.7, seed=tag))
    snapshot.dispatcher = pb.DISPATCHER_EASY
    return pb.SessionStreamRequest(
        tag=tag, open=pb.OpenSessionRequest(snapshot=snapshot, decide=True))


async def never_read(stub: Any, message: pb.SessionStreamRequest,
                     messages: int, stall: float, until: float) -> int:
    """One stream of `stub` (a grpc.aio SessionService stub): `message` sent up to `messages`
    times, no answer read; the writes that got through before one was held back `stall`
    seconds (or `until`, a loop time, passed)."""
    call: Any = stub.StreamSession()
    written = 0
    loop = asyncio.get_running_loop()
    try:
        while written < messages and loop.time() < until:
            try:
                await asyncio.wait_for(call.write(message), timeout=stall)
            except TimeoutError:
                break
            written += 1
    except grpc.aio.AioRpcError:
        pass  # the server ended it (stream_idle_seconds): counted as far as it got
    return written


async def drive(target: str, streams: int, messages: int, queued: int, stall: float,
                seconds: float) -> tuple[int, grpc.aio.Channel]:
    """Every stream's writes through, and the channel (open: the streams too)."""
    message = open_message(1, queued)
    channel = grpc.aio.insecure_channel(target, options=[
        ("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
    stub: Any = pb_grpc.SessionServiceStub(channel)  # its calls are grpc.aio's
    until = asyncio.get_running_loop().time() + seconds
    written = await asyncio.gather(*(never_read(stub, message, messages, stall, until)
                                     for _ in range(streams)))
    return sum(written), channel


def run_case(streams: int, messages: int, queued: int, stall: float, seconds: float,
             settings: dict[str, Any], probe_on: bool) -> str:
    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=(settings, probe_on, child))
    process.start()
    try:
        target = parent.recv()
        assert process.pid is not None
        before = rss_mb(process.pid)
        began = time.monotonic()

        async def measured() -> tuple[int, float, float]:
            written, channel = await drive(target, streams, messages, queued, stall, seconds)
            await asyncio.sleep(stall)  # what the server still decides ahead, it does now
            rss = rss_mb(process.pid)  # type: ignore[arg-type]
            parent.send("count")
            answered = parent.recv()
            await channel.close(None)
            return written, rss, answered

        written, after, answered = asyncio.run(measured())
        size = open_message(1, queued).ByteSize()
        return (f"{'probe on: ' if probe_on else ''}{streams} streams never read, "
                f"{messages} open messages each at most "
                f"({size / 1024:.0f} KB, {queued} queued): {written} written "
                f"({written / streams:.1f} per stream), {answered:.0f} answered "
                f"({answered / streams:.1f} per stream); server RSS {before:.0f} -> "
                f"{after:.0f} MB ({time.monotonic() - began:.0f} s)")
    finally:
        parent.send("stop")
        process.join(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="20,200")
    parser.add_argument("--messages", type=int, default=200, help="per stream, at most")
    parser.add_argument("--queued", type=int, default=200, help="queued jobs per snapshot")
    parser.add_argument("--seconds", type=float, default=60.0, help="sending, at most")
    parser.add_argument("--stall", type=float, default=2.0,
                        help="a write held back this long ends its stream's sending")
    parser.add_argument("--probe-on", action="store_true",
                        help="the server with gRPC's bandwidth-delay probe on (as before)")
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=N",
                        help="a server configuration key (integer), e.g. max_sessions=16")
    args = parser.parse_args(argv)
    if sys.platform != "linux":
        print("needs Linux (/proc/PID/status)", file=sys.stderr)
        return 2
    settings = dict(args.set)
    for streams in (int(n) for n in args.streams.split(",")):
        print(run_case(streams, args.messages, args.queued, args.stall, args.seconds, settings,
                       args.probe_on), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
