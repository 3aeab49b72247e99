# syntax=docker/dockerfile:1
# hpcdispatch: the gRPC dispatching service. Two stages: build a virtual environment with the
# package and its dependencies, then copy only that environment into a slim runtime image.
# Ports: 50051 gRPC (DispatcherService, health, reflection), 9464 Prometheus /metrics.
# Extra `serve` flags go after the image name (e.g. --config /etc/hpcdispatch/server.yaml);
# on SIGTERM in-flight decisions get grace_seconds (default 30) to finish, so stop the
# container with a longer timeout (docker stop -t 40; compose stop_grace_period).

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY . .
RUN /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/pip check

FROM python:3.11-slim-bookworm AS runtime
RUN groupadd --system --gid 10001 hpcdispatch \
    && useradd --system --uid 10001 --gid hpcdispatch --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin hpcdispatch
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HPCDISPATCH_LOG_FORMAT=json
WORKDIR /tmp
USER 10001:10001
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, grpc; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; r = g.HealthStub(grpc.insecure_channel('127.0.0.1:50051')).Check(h.HealthCheckRequest(), timeout=3); sys.exit(r.status != h.HealthCheckResponse.SERVING)"]
ENTRYPOINT ["hpcdispatch", "serve", "--listen", "0.0.0.0:50051", "--metrics-port", "9464", "--metrics-host", "0.0.0.0"]
