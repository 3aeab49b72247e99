"""Save dispatching instances (DispatchRequest messages) seen during a replay.

`CapturingBackend` wraps the replay's `GrpcBackend`: it forwards every call and writes every
`every`-th request that has at least `min_queued` queued jobs, so the simulator needs no
change. Instances go to one file of length-delimited binary
messages (a varint byte length, then the serialized DispatchRequest), read back with
`read_instances`. After `limit` saved instances it raises `CaptureComplete`, which ends the
replay early.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from hpcdispatch.sim_adapter.adapter import GrpcBackend, answer_of
from hpcdispatch.sim_adapter.backend import Answer, StateChange
from hpcdispatch.snapshot import JobCompletion, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb


class CaptureComplete(Exception):
    """Raised by CapturingBackend once `limit` instances are saved (stops the replay)."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(handle: BinaryIO) -> int | None:
    """The next varint, or None at a clean end of file."""
    shift = result = 0
    while True:
        byte = handle.read(1)
        if not byte:
            if shift:
                raise ValueError("truncated length prefix")
            return None
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7


def write_instance(handle: BinaryIO, request: pb.DispatchRequest) -> None:
    data = request.SerializeToString()
    handle.write(_varint(len(data)))
    handle.write(data)


def write_instances(path: Path, requests: Iterable[pb.DispatchRequest]) -> int:
    """Write `requests` to `path` (replacing it); returns how many were written."""
    count = 0
    with path.open("wb") as handle:
        for request in requests:
            write_instance(handle, request)
            count += 1
    return count


def read_instances(path: Path) -> Iterator[pb.DispatchRequest]:
    """The DispatchRequest messages of a file written by this module, in order."""
    with path.open("rb") as handle:
        while (size := _read_varint(handle)) is not None:
            data = handle.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated message ({len(data)} of {size} bytes)")
            request = pb.DispatchRequest()
            request.ParseFromString(data)
            yield request


class CapturingBackend:
    """DispatchBackend that forwards to `inner` and saves selected requests to `handle`."""

    def __init__(
        self,
        inner: GrpcBackend,
        handle: BinaryIO,
        every: int = 1,
        min_queued: int = 1,
        limit: int | None = None,
    ) -> None:
        if every < 1 or min_queued < 1:
            raise ValueError("every and min_queued must be >= 1")
        self.inner = inner
        self.handle = handle
        self.every = every
        self.min_queued = min_queued
        self.limit = limit
        self.eligible = 0  # requests with at least min_queued queued jobs
        self.saved = 0

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        snapshot = whole()
        request = self.inner.request_of(snapshot)
        if len(request.queued_jobs) >= self.min_queued:
            self.eligible += 1
            if (self.eligible - 1) % self.every == 0:
                write_instance(self.handle, request)
                self.saved += 1
        response = self.inner.dispatch(request)
        if self.limit is not None and self.saved >= self.limit:
            raise CaptureComplete(f"{self.saved} instances saved")
        return answer_of(response, snapshot)

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        self.inner.report_completions(completions)
