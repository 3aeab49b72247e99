"""The replay's default gRPC path: one session stream, the simulator's changes sent as deltas.

The simulator knows what changed since its previous decision call (`StateChange`), so this
backend writes that change as the session's delta (`delta_of`) instead of building the whole
state as a DispatchRequest and diffing it with the previous one (GrpcBackend's session path);
the whole state is built only to open (or resync) the session. The session's calls, and the
completion reports, go on one bidirectional stream (hpcdispatch.client.session_stream), in
order. The decisions are those of the unary session path and of the in-process path
(tests/server/in_process/test_in_process_replay.py); the simulator checks each one, as on every
gRPC path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hpcdispatch.client import DispatcherClient
from hpcdispatch.client.session import copy_options
from hpcdispatch.proto_convert import (
    add_queued_jobs,
    add_running_jobs,
    add_windows,
    completion_to_pb,
)
from hpcdispatch.snapshot import JobCompletion, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .adapter import GrpcBackend, answer_at
from .backend import Answer, StateChange


def delta_of(change: StateChange, template: pb.DispatchRequest) -> pb.UpdateSessionRequest:
    """The session delta of `change` with the template's decision options (no session id or
    sequence number: the client's session sets them)."""
    delta = pb.UpdateSessionRequest(time=change.time, ended_job_ids=change.ended,
                                    cancelled_job_ids=change.cancelled)
    copy_options(delta, template)  # a plugin's dispatcher and predictor go by name
    add_queued_jobs(delta.submitted, change.submitted)
    add_running_jobs(delta.started, change.started)
    if change.windows is not None:  # set, even when it clears them all
        add_windows(delta.windows.windows, change.windows)
        delta.windows.SetInParent()
    return delta


class StreamBackend(GrpcBackend):
    """DispatchBackend over a session stream, fed the simulator's changes (module doc)."""

    def __init__(self, client: DispatcherClient, template: pb.DispatchRequest | None = None,
                 timeout: float | None = None, own_service: bool = False) -> None:
        super().__init__(client, template, timeout, stream=True, own_service=own_service)
        # The replay's own service checks each decision in this process, against the session
        # state the simulator's changes made (decision_check, as in-process): the simulator
        # does not check it a second time. A service others share is checked here as well.
        self.checks_decisions = own_service
        # The queued jobs' per-unit requests, by id, kept from the changes: what the answer's
        # unit amounts are checked against (answer_at), without the whole state.
        self._requests: dict[str, Mapping[str, int]] = {}

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        requests = self._requests
        for job in change.submitted:
            requests[job.id] = job.unit_request
        for job_id in change.cancelled:
            del requests[job_id]
        for running in change.started:
            del requests[running.id]
        session = self.session
        assert session is not None
        delta = None if session.session_id is None else delta_of(change, self.template)
        response = session.decide_change(delta, lambda: self.request_of(whole()), self.timeout)
        return answer_at(response, change.time, requests)

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        if not self.reports_completions:
            return
        assert self.session is not None
        request = pb.ReportCompletionsRequest(
            completions=[completion_to_pb(c) for c in completions], cluster=self.template.cluster)
        self.session.report_completions(request, timeout=self.timeout)
