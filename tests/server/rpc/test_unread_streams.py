"""A session stream whose client does not read its answers (issue #51, item 4), through a real
server on loopback: the server takes up a stream's next message only once the answer before it
is written, so it decides no further ahead than the caller's own receive window lets it, and
what the caller sent and the server has not taken up stays within one HTTP/2 window per stream
(the server's bandwidth-delay probe is off: with it, gRPC grew each stream's window to about
4 MiB, and 20 streams that never read pushed the server to 1.1 GB; BENCHMARKS.md §8.3).

The client's receive window here is smaller than one answer, so a written answer waits for
the client to read it; each verdict is read at an event (an answer counted by the server, an
answer read), WAIT only bounds the waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.server.sessions.test_session_calls import SYSTEM, WAIT

MESSAGES = 60  # the client sends this many, as fast as the stream takes them
READS = 3
# The client's window: less than one answer (an EASY decision of 100 queued jobs, a few KB).
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]
# Bytes the client may get through beyond the messages taken up: one HTTP/2 window (64 KiB) in
# the server and as much again buffered by the client's own transport (measured: 16 messages
# of 6.4 KB; with the probe on, 39 to 60 of the 60).
BYTES_AHEAD = 2 * 65_536


def answered(server: RunningServer) -> float:
    """Stream messages the server answered (decided and handed to gRPC to write)."""
    return sum(sample.value for metric in server.metrics.registry.collect()
               if metric.name == "hpcdispatch_session_stream_messages"
               for sample in metric.samples if sample.name.endswith("_total"))


async def until(condition: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < end, f"not reached: {what}"
        await asyncio.sleep(0.005)


def open_message(tag: int) -> pb.SessionStreamRequest:
    snapshot = snapshot_to_pb(synthetic_snapshot(SYSTEM, 100, 0.7, seed=tag))
    snapshot.dispatcher = pb.DISPATCHER_EASY
    snapshot.predictor = pb.PREDICTOR_WALLTIME
    return pb.SessionStreamRequest(tag=tag, open=pb.OpenSessionRequest(snapshot=snapshot,
                                                                       decide=True))


async def unread_stream(server: RunningServer) -> None:
    channel = grpc.aio.insecure_channel(server.target, options=SMALL_WINDOW)
    call = pb_grpc.SessionServiceStub(channel).StreamSession()
    message = open_message(1)
    written = 0

    async def send() -> None:
        nonlocal written
        for _ in range(MESSAGES):
            await call.write(message)
            written += 1

    sender = asyncio.create_task(send())
    try:
        for read in range(READS):
            await until(lambda read=read: answered(server) >= read + 1,  # type: ignore[misc]
                        f"answer {read + 1} made")
            # Its answer waits for the client to read it: nothing more is decided...
            assert answered(server) == read + 1
            # ...and little more of what the client sent got through.
            assert (written - read - 2) * message.ByteSize() <= BYTES_AHEAD, written
            answer = await call.read()
            assert isinstance(answer, pb.SessionStreamResponse) and answer.tag == 1
        assert not sender.done()  # the client's writes wait for the server: flow control
    finally:
        sender.cancel()
        call.cancel()
        await channel.close()


def test_a_stream_whose_client_does_not_read_makes_the_server_decide_no_further_ahead(
    serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=4)
    asyncio.run(unread_stream(server))


def test_the_bandwidth_delay_probe_is_off_on_the_server() -> None:
    from hpcdispatch.server.config import ServerConfig
    from hpcdispatch.server.rpc.app import _channel_options

    assert ("grpc.http2.bdp_probe", 0) in _channel_options(ServerConfig())
