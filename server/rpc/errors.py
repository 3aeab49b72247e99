"""Rich gRPC errors: INVALID_ARGUMENT carrying a google.rpc.BadRequest (grpcio-status)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from ..intake.validation import Violation


def abort_invalid_argument(
    context: grpc.ServicerContext, message: str, violations: Sequence[Violation]
) -> NoReturn:
    bad_request = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in violations
        ]
    )
    detail = any_pb2.Any()
    detail.Pack(bad_request)
    status = status_pb2.Status(
        code=code_pb2.INVALID_ARGUMENT, message=message, details=[detail]
    )
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover
