"""An error raised by the client itself, read as the errors of failed gRPC calls are read."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import status_pb2

# Where gRPC carries a google.rpc.Status with details (grpcio-status reads it there).
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class CallError(grpc.RpcError, grpc.Call):
    """A failed call: code(), details(), and its google.rpc.Status (when it has details) in
    trailing_metadata(), so that `grpc_status.rpc_status.from_call` reads its BadRequest or
    ErrorInfo as it reads a unary call's (a session stream's per-message error, for one)."""

    def __init__(self, code: grpc.StatusCode, message: str,
                 status: status_pb2.Status | None = None) -> None:
        super().__init__()
        self._code = code
        self._message = message
        self.status = status

    @staticmethod
    def of_status(status: status_pb2.Status) -> CallError:
        """The error a google.rpc.Status says."""
        code = next((c for c in grpc.StatusCode if c.value[0] == status.code),
                    grpc.StatusCode.UNKNOWN)
        return CallError(code, status.message, status)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    # (grpc-stubs type RpcError's and Call's trailing_metadata differently; both are tuples)
    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:  # type: ignore[override]
        if self.status is None or not self.status.details:
            return ()
        return ((STATUS_DETAILS_KEY, self.status.SerializeToString()),)

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False

    def __str__(self) -> str:
        return f"{self.code().name}: {self.details()}"
