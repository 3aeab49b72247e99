"""The rules of a completion report (ReportCompletions), limits and validity together: its
finished jobs, checked as strictly as a snapshot's queued jobs."""

from __future__ import annotations

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .fields import MAX_DURATION, MAX_TIME, check_id, check_request, check_text
from .jobs import check_duration, check_time, check_units
from .violations import Violation, Violations


def validate_completions(
    request: pb.ReportCompletionsRequest, config: ServerConfig
) -> list[Violation]:
    """Every violation of a completion report, checked as strictly as a snapshot's queued jobs.

    A finished job needs its id and user (the predictors key on them), texts within the limits
    (`max_id_chars`, `max_name_chars`: they are kept in the knowledge base), 1..`max_units`
    units, a unit request like a queued job's, a requested time in (0, 2^31] s, start and end times
    within ±2^40 s, and an actual run time (end - start) in [0, 2^31] s. The report is
    all-or-nothing: the service stores none of it when any completion is invalid.
    """
    out = Violations()
    if len(request.completions) > config.max_jobs:
        out.add("completions", f"{len(request.completions)} completions exceed the limit of "
                f"{config.max_jobs} per report")
        return out.items
    check_id(request.cluster, "cluster", config, out)
    for i, completion in enumerate(request.completions):
        _check_completion(completion, f"completions[{i}]", config, out)
        if out.full:
            break
    return out.items


def _check_completion(
    completion: pb.JobCompletion, path: str, config: ServerConfig, out: Violations,
) -> None:
    check_id(completion.job_id, f"{path}.job_id", config, out)
    check_id(completion.user, f"{path}.user", config, out)
    check_id(completion.queue, f"{path}.queue", config, out)
    check_text(completion.name, f"{path}.name", config.max_name_chars, "max_name_chars", out)
    if not completion.job_id:
        out.add(f"{path}.job_id", "must not be empty")
    if not completion.user:
        out.add(f"{path}.user", "must not be empty")
    check_units(completion.units, f"{path}.units", config.max_units, out)
    check_request(completion.unit_request, f"{path}.unit_request", None, config, out)
    check_duration(completion.requested_time, f"{path}.requested_time", out)
    check_time(completion.start_time, f"{path}.start_time", out)
    check_time(completion.end_time, f"{path}.end_time", out)
    if completion.end_time < completion.start_time:
        out.add(f"{path}.end_time", f"{completion.end_time} is before start_time "
                f"{completion.start_time}")
    elif abs(completion.start_time) <= MAX_TIME and abs(completion.end_time) <= MAX_TIME:
        run_time = completion.end_time - completion.start_time
        if run_time > MAX_DURATION:
            out.add(f"{path}.end_time", f"run time {run_time} s (end_time - start_time) is "
                    "longer than 2^31 s")
