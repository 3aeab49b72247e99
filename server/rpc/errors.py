"""Rich gRPC errors (grpcio-status): INVALID_ARGUMENT carrying a google.rpc.BadRequest, and any
status with google.rpc details, always small enough for the caller's metadata limit.

The status travels in trailing metadata: `grpc-message` (the message, percent-encoded) and
`grpc-status-details-bin` (the google.rpc.Status with its details, base64). gRPC clients refuse
metadata beyond 8 KB by default (grpc.max_metadata_size) and then report RESOURCE_EXHAUSTED,
which the project's client retries, instead of the error. So the message is cut to
MAX_MESSAGE_BYTES once encoded, each field violation's field and description to their share, and
violations are left off (the message says how many) until the whole status fits
MAX_DETAILS_BYTES; whatever is cut says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from ..intake.shown import clipped
from ..intake.violations import Violation

# Of the caller's 8 KB: the message as `grpc-message` carries it (percent-encoded), and the
# serialized google.rpc.Status (message again, and details) before base64 (4/3 of it); the
# rest is for the other metadata (x-request-id, ...).
MAX_MESSAGE_BYTES = 1024
MAX_DETAILS_BYTES = 3584
MAX_FIELD_CHARS = 200
MAX_DESCRIPTION_CHARS = 400


def encoded_size(text: str) -> int:
    """Bytes of `text` as grpc-message carries it: printable ASCII but '%' as is, the rest
    percent-encoded (3 bytes for each UTF-8 byte)."""
    return sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in text.encode("utf-8"))


def fitted_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """`message`, cut so that its encoded size stays within `limit` bytes, saying so."""
    if encoded_size(message) <= limit:
        return message
    keep = limit // 3
    while keep > 0 and encoded_size(clipped(message, keep)) > limit:
        keep = keep * 2 // 3
    return clipped(message, keep)


def abort_with_details(
    context: grpc.ServicerContext, code: grpc.StatusCode, message: str,
    details: Sequence[Message] = (),
) -> NoReturn:
    """Abort the call with `code`, `message` and google.rpc `details`, fitted to the limit."""
    status = status_pb2.Status(code=code.value[0], message=fitted_message(message))
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    if status.ByteSize() > MAX_DETAILS_BYTES:
        del status.details[:]  # cannot happen with the details made here; never too large
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def bad_request(violations: Sequence[Violation], budget: int) -> tuple[
    error_details_pb2.BadRequest, int
]:
    """The violations as a BadRequest of at most `budget` bytes, each field and description
    cut to its share; returns it and how many violations were left off."""
    request = error_details_pb2.BadRequest()
    for listed, v in enumerate(violations):
        item = error_details_pb2.BadRequest.FieldViolation(
            field=clipped(v.field, MAX_FIELD_CHARS),
            description=clipped(v.description, MAX_DESCRIPTION_CHARS),
        )
        if request.ByteSize() + item.ByteSize() + 4 > budget:
            return request, len(violations) - listed
        request.field_violations.append(item)
    return request, 0


def abort_invalid_argument(
    context: grpc.ServicerContext, message: str, violations: Sequence[Violation]
) -> NoReturn:
    """INVALID_ARGUMENT with a BadRequest naming each violation (as many as fit)."""
    message = fitted_message(message, MAX_MESSAGE_BYTES - 64)
    budget = MAX_DETAILS_BYTES - len(message.encode("utf-8")) - 96
    details, left_off = bad_request(violations, budget)
    if left_off:
        message = f"{message} ({left_off} more not listed)"
    abort_with_details(context, grpc.StatusCode.INVALID_ARGUMENT, message, [details])
