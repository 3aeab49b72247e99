"""What a session call's transport costs: CPU per round trip of the service's unary call and of
its session stream, and of a bare echo service on grpcio's sync and asyncio (`grpc.aio`) APIs.

    python -m benchmarks.speed.session_transport --calls 5000 --rounds 3

Each figure is CPU (user + system of this process: client and server both run in it, as in a
replay with the embedded service) and voluntary context switches per round trip, measured over
`--calls` calls after one warm-up call, median of `--rounds`; rows of one round run one after
the other, so compare them within a run. The service rows send the cheapest session call
(closing an unknown session); the echo rows a 300-byte message, on:

- `sync unary`: a unary call on grpcio's thread-pool server;
- `sync stream`: one bidirectional stream on that server, one message at a time;
- `aio stream`: the same on `grpc.aio` (server and client on one event loop).

`service: aio stream close` is the service's stream from a `grpc.aio` client whose event loop
the calling thread runs for each call, as a synchronous simulator on `grpc.aio` would (issue
#52 item 3: does the replay client gain from leaving grpcio's sync API and its threads?).

The service runs on grpcio's thread-pool server, whose interceptors (metrics, request ids,
identities, draining, decode errors) and handlers are synchronous; the echo rows tell how much
moving it to `grpc.aio` could save per round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import resource
import statistics
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.embedded import embedded_server
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

PAYLOAD = b"x" * 300
ECHO = "bench.Echo"


def usage() -> tuple[float, int]:
    """(CPU seconds, voluntary context switches) of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw


def per_call(calls: int, one: Callable[[], object]) -> tuple[float, float]:
    """(CPU µs, context switches) per call of `one`, after a warm-up call."""
    one()
    cpu, switches = usage()
    for _ in range(calls):
        one()
    cpu_after, switches_after = usage()
    return (cpu_after - cpu) / calls * 1e6, (switches_after - switches) / calls


def service_rows(calls: int) -> dict[str, tuple[float, float]]:
    close = pb.CloseSessionRequest(session_id="unknown")
    with (embedded_server() as target, DispatcherClient(target, timeout=30) as client,
          grpc.insecure_channel(target) as channel):
        stream = client.session_stream()
        unary = pb_grpc.SessionServiceStub(channel).CloseSession
        rows = {
            "service: unary CloseSession": per_call(calls, lambda: unary(close, timeout=30)),
            "service: stream close": per_call(calls, lambda: stream.call("close", close, 30)),
            "service: aio stream close": aio_client_row(target, close, calls),
        }
        stream.close()
    return rows


def aio_client_row(target: str, close: pb.CloseSessionRequest,
                   calls: int) -> tuple[float, float]:
    """The service's stream from a `grpc.aio` client whose loop the calling thread runs for each
    call (what a synchronous simulator on grpc.aio would do), instead of grpcio's sync client
    and its threads."""
    loop = asyncio.new_event_loop()

    async def started() -> tuple[grpc.aio.Channel, Any]:  # made on `loop`, which they use
        channel = grpc.aio.insecure_channel(target)
        stub: Any = pb_grpc.SessionServiceStub(channel)  # the aio stub: no request iterator
        return channel, stub.StreamSession()

    channel, call = loop.run_until_complete(started())
    tag = 0

    async def exchange() -> pb.SessionStreamResponse:
        nonlocal tag
        tag += 1
        await call.write(pb.SessionStreamRequest(tag=tag, timeout_ms=30_000, close=close))
        answer: pb.SessionStreamResponse = await call.read()
        return answer

    try:
        return per_call(calls, lambda: loop.run_until_complete(exchange()))
    finally:
        loop.run_until_complete(call.done_writing())
        loop.run_until_complete(channel.close(None))
        # The loop is left open: gRPC's poller may still hand it the channel's last events.


def _echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


def _echo_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from requests


def echo_sync_rows(calls: int) -> dict[str, tuple[float, float]]:
    handlers = grpc.method_handlers_generic_handler(ECHO, {
        "Unary": grpc.unary_unary_rpc_method_handler(_echo),
        "Stream": grpc.stream_stream_rpc_method_handler(_echo_stream)})
    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary(f"/{ECHO}/Unary", None, None)
            outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
            answers = iter(channel.stream_stream(f"/{ECHO}/Stream", None, None)(
                iter(outbox.get, None)))

            def exchange() -> bytes:
                outbox.put(PAYLOAD)
                answer: bytes = next(answers)
                return answer

            rows = {"echo: sync unary": per_call(calls, lambda: unary(PAYLOAD, timeout=30)),
                    "echo: sync stream": per_call(calls, exchange)}
            outbox.put(None)
    finally:
        server.stop(None)
    return rows


def echo_aio_row(calls: int) -> dict[str, tuple[float, float]]:
    async def echo_stream(requests: AsyncIterator[bytes],
                          context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    async def run() -> tuple[float, float]:
        handlers = grpc.method_handlers_generic_handler(ECHO, {
            "Stream": grpc.stream_stream_rpc_method_handler(echo_stream)})
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handlers,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(f"/{ECHO}/Stream", None, None)(None)
            await call.write(PAYLOAD)
            await call.read()
            cpu, switches = usage()
            for _ in range(calls):
                await call.write(PAYLOAD)
                await call.read()
            cpu_after, switches_after = usage()
            await call.done_writing()
        await server.stop(None)
        return (cpu_after - cpu) / calls * 1e6, (switches_after - switches) / calls

    return {"echo: aio stream": asyncio.run(run())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for rows in (service_rows(args.calls), echo_sync_rows(args.calls),
                     echo_aio_row(args.calls)):
            for name, sample in rows.items():
                runs.setdefault(name, []).append(sample)
    print(f"{args.calls} round trips per row, median of {args.rounds} rounds")
    print(f"{'transport':<30}  {'CPU µs / round trip':>20}  {'context switches':>16}")
    for name, figures in runs.items():
        cpu = statistics.median(f[0] for f in figures)
        switches = statistics.median(f[1] for f in figures)
        print(f"{name:<30}  {cpu:>20.0f}  {switches:>16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
