"""Prometheus metrics of a real server, read from its /metrics port after real gRPC calls."""

from __future__ import annotations

import base64
import math
import ssl
import urllib.error
import urllib.request

import bcrypt
import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.rpc.metrics import SECONDS_BUCKETS, ServiceMetrics, status_label
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.certificates import CertificateAuthority, Pem
from tests.instances import Crashing, OverAllocating
from tests.observability import (
    metrics_server,
    samples,
    scrape_settled,
    scrape_text,
    small_request,
    value,
)

DISPATCH = {"grpc_service": "hpcdispatch.v1.DispatcherService", "grpc_method": "Dispatch"}


def test_one_decision_is_counted_with_the_reports_numbers() -> None:
    with metrics_server() as server, DispatcherClient(server.target) as client:
        assert server.metrics_port
        request = small_request()
        request.dispatcher = pb.DISPATCHER_PCP20
        response = client.dispatch(request)
        report = response.report
        text = scrape_text(server.metrics_port)

    assert value(text, "grpc_server_started_total", grpc_type="unary", **DISPATCH) == 1
    assert value(text, "grpc_server_handled_total", grpc_code="OK", **DISPATCH) == 1
    assert value(text, "grpc_server_handling_seconds_count", **DISPATCH) == 1
    assert value(text, "grpc_server_handling_seconds_sum", **DISPATCH) >= report.total_seconds
    d = {"dispatcher": "pcp20"}
    assert value(text, "hpcdispatch_decision_seconds_count", **d) == 1
    assert value(text, "hpcdispatch_decision_seconds_sum", **d) == pytest.approx(
        report.total_seconds)
    assert value(text, "hpcdispatch_decision_build_seconds_sum", **d) == pytest.approx(
        report.build_seconds)
    assert value(text, "hpcdispatch_decision_solve_seconds_sum", **d) == pytest.approx(
        report.solve_seconds)
    assert report.total_seconds > 0
    assert value(text, "hpcdispatch_decision_attempts_sum", **d) == len(report.attempts)
    assert value(text, "hpcdispatch_decisions_total", status=status_label(report.status), **d) == 1
    assert value(text, "hpcdispatch_decisions_total") == 1
    assert value(text, "hpcdispatch_model_variables_sum", **d) == report.model_variables
    assert value(text, "hpcdispatch_model_constraints_sum", **d) == report.model_constraints
    assert value(text, "hpcdispatch_jobs_considered_total", **d) == len(report.considered_job_ids)
    assert value(text, "hpcdispatch_jobs_started_total", **d) == len(response.starts) > 0
    assert value(text, "hpcdispatch_queue_depth") == len(request.queued_jobs)
    assert value(text, "hpcdispatch_running_jobs") == len(request.running_jobs)
    assert value(text, "hpcdispatch_predictions_pending") == len(response.starts)
    assert value(text, "hpcdispatch_fallback_decisions_total") == 0

    # No job id appears in any label.
    job_ids = {j.id for j in request.queued_jobs} | {j.id for j in request.running_jobs}
    label_values = {v for s in samples(text) for v in s.labels.values()}
    assert not job_ids & label_values


def test_decision_histograms_span_1ms_to_60s() -> None:
    with metrics_server() as server, DispatcherClient(server.target) as client:
        client.dispatch(small_request())
        assert server.metrics_port
        text = scrape_text(server.metrics_port)
    for name in ("hpcdispatch_decision_seconds", "hpcdispatch_decision_build_seconds",
                 "hpcdispatch_decision_solve_seconds", "grpc_server_handling_seconds"):
        bounds = sorted(
            float(s.labels["le"]) for s in samples(text)
            if s.name == f"{name}_bucket" and s.labels.get("grpc_method", "Dispatch") == "Dispatch"
        )
        assert bounds[0] == 0.001 and bounds[-2] == 60.0 and math.isinf(bounds[-1]), name
        assert bounds[:-1] == list(SECONDS_BUCKETS), name


def test_an_invalid_snapshot_counts_as_invalid_argument_and_no_decision() -> None:
    with metrics_server() as server, DispatcherClient(server.target) as client:
        request = small_request()
        request.queued_jobs[0].units = 0
        with pytest.raises(grpc.RpcError) as caught:
            client.dispatch(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert server.metrics_port
        text = scrape_settled(server.metrics_port)
    assert value(text, "grpc_server_handled_total", grpc_code="InvalidArgument", **DISPATCH) == 1
    assert value(text, "grpc_server_handled_total", grpc_code="OK", **DISPATCH) == 0
    assert value(text, "hpcdispatch_decisions_total") == 0


def test_fallbacks_and_failed_checks_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, OverAllocating())
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_HCP19, Crashing())
    with metrics_server() as server, DispatcherClient(server.target) as client:
        for kind in (pb.DISPATCHER_FCFS, pb.DISPATCHER_HCP19, pb.DISPATCHER_EASY):
            request = small_request()
            request.dispatcher = kind
            client.dispatch(request)
        assert server.metrics_port
        text = scrape_text(server.metrics_port)
    fallbacks = "hpcdispatch_fallback_decisions_total"
    assert value(text, fallbacks, dispatcher="fcfs", reason="check_failed") == 1
    assert value(text, fallbacks, dispatcher="hcp19", reason="dispatcher_error") == 1
    assert value(text, fallbacks) == 2
    assert value(text, "hpcdispatch_decision_check_failures_total", dispatcher="fcfs") == 1
    assert value(text, "hpcdispatch_decision_check_failures_total") == 1
    assert value(text, "hpcdispatch_decisions_total", status="fallback") == 2
    assert value(text, "hpcdispatch_decisions_total", dispatcher="easy") == 1


def test_predictor_error_once_completions_arrive() -> None:
    with metrics_server() as server, DispatcherClient(server.target) as client:
        request = small_request(queued=40)
        request.predictor = pb.PREDICTOR_WALLTIME  # the errors below are labelled by it
        response = client.dispatch(request)
        assert len(response.starts) >= 2
        queued = {j.id: j for j in request.queued_jobs}
        completions, expected_errors = [], []
        for i, start in enumerate(response.starts):
            actual = 100 + 37 * i
            expected_errors.append(abs(actual - start.expected_duration))
            job = queued[start.job_id]
            completions.append(pb.JobCompletion(
                job_id=start.job_id, user=job.user, name=job.name, queue=job.queue,
                units=job.units, unit_request=dict(job.unit_request),
                requested_time=job.requested_time, start_time=request.time,
                end_time=request.time + actual,
            ))
        # One of them reported, plus a job the service never started.
        stranger = pb.JobCompletion(job_id="never-started", user="u", units=1,
                                    unit_request={"core": 1}, requested_time=60,
                                    start_time=0, end_time=30)
        client.report_completions([completions[0], stranger])
        assert server.metrics_port
        first = scrape_text(server.metrics_port)
        client.report_completions(completions[1:])
        second = scrape_text(server.metrics_port)

    name = "hpcdispatch_predictor_absolute_error_seconds"
    assert value(first, f"{name}_count", predictor="walltime") == 1
    assert value(first, f"{name}_sum", predictor="walltime") == expected_errors[0]
    assert value(first, "hpcdispatch_predictions_pending") == len(response.starts) - 1
    assert value(second, f"{name}_count", predictor="walltime") == len(response.starts)
    assert value(second, f"{name}_sum", predictor="walltime") == sum(expected_errors)
    assert value(second, "hpcdispatch_predictions_pending") == 0


def test_the_prediction_memory_is_bounded_and_forgets_the_oldest() -> None:
    metrics = ServiceMetrics(prediction_memory=3)
    metrics.remember_predictions("c", pb.PREDICTOR_LAST_TWO, [(f"j{i}", 100) for i in range(5)])
    text = metrics.exposition().decode()
    assert value(text, "hpcdispatch_predictions_pending") == 3
    assert value(text, "hpcdispatch_predictions_evicted_total") == 2
    matched = metrics.observe_completions("c", [("j0", 0, 50), ("j4", 0, 160), ("j3", 0, 100)])
    assert matched == 2  # j0 was forgotten
    text = metrics.exposition().decode()
    name = "hpcdispatch_predictor_absolute_error_seconds"
    assert value(text, f"{name}_count", predictor="last-two") == 2
    assert value(text, f"{name}_sum", predictor="last-two") == 60
    # Another cluster's job of the same id is not a match.
    assert metrics.observe_completions("other", [("j2", 0, 1)]) == 0


def test_two_servers_in_one_process_keep_their_own_counts() -> None:
    with metrics_server() as a, metrics_server() as b:
        with DispatcherClient(a.target) as client:
            client.dispatch(small_request())
            client.dispatch(small_request(seed=2))
        with DispatcherClient(b.target) as client:
            client.dispatch(small_request())
        assert a.metrics_port and b.metrics_port and a.metrics_port != b.metrics_port
        assert value(scrape_text(a.metrics_port), "hpcdispatch_decisions_total") == 2
        assert value(scrape_text(b.metrics_port), "hpcdispatch_decisions_total") == 1


@pytest.mark.parametrize("port", [None, 0])
def test_metrics_are_off_without_a_port(port: int | None) -> None:
    with metrics_server(metrics_port=port) as server:
        assert server.metrics_port is None


# -- /metrics over HTTPS, with basic auth ----------------------------------------------------

SCRAPE_USER = "prometheus"
SCRAPE_PASSWORD = "scrape-secret"


@pytest.fixture(scope="module")
def metrics_pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pem, Pem, Pem]:
    """(CA, the endpoint's certificate, a scraper's client certificate)."""
    ca = CertificateAuthority(tmp_path_factory.mktemp("metrics-pki"))
    return (ca.pem, ca.issue("metrics", "localhost", server=True),
            ca.issue("prometheus", "prometheus", server=False))


def https_get(port: int, ca: Pem, user: str | None = None, password: str | None = None,
              client: Pem | None = None) -> tuple[int, str]:
    """GET https://127.0.0.1:port/metrics trusting `ca`: (HTTP status, body)."""
    context = ssl.create_default_context(cafile=str(ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_over_https_with_basic_auth(metrics_pki: tuple[Pem, Pem, Pem]) -> None:
    ca, cert, _ = metrics_pki
    password_hash = bcrypt.hashpw(SCRAPE_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    with metrics_server(metrics_tls_cert=str(cert.cert), metrics_tls_key=str(cert.key),
                        metrics_basic_auth_user=SCRAPE_USER,
                        metrics_basic_auth_password_hash=password_hash) as server:
        port = server.metrics_port
        assert port
        status, body = https_get(port, ca)
        assert status == 401 and "basic auth" in body
        assert https_get(port, ca, SCRAPE_USER, "wrong")[0] == 401
        assert https_get(port, ca, "someone", SCRAPE_PASSWORD)[0] == 401
        for _ in range(2):  # the second time from the verified-credentials memory
            status, body = https_get(port, ca, SCRAPE_USER, SCRAPE_PASSWORD)
            assert status == 200 and "hpcdispatch_build_info" in body
        with pytest.raises(OSError):  # plain HTTP is not served (reset or refused)
            scrape_text(port)


def test_metrics_over_https_can_require_a_client_certificate(
    metrics_pki: tuple[Pem, Pem, Pem],
) -> None:
    ca, cert, scraper = metrics_pki
    with metrics_server(metrics_tls_cert=str(cert.cert), metrics_tls_key=str(cert.key),
                        metrics_tls_client_ca=str(ca.cert)) as server:
        port = server.metrics_port
        assert port
        with pytest.raises(OSError):  # URLError, SSLError, ConnectionResetError
            https_get(port, ca)
        status, body = https_get(port, ca, client=scraper)
        assert status == 200 and "hpcdispatch_build_info" in body
