"""Health under overload: the services' readiness turns NOT_SERVING while no decision can be
admitted, and back to SERVING as soon as one can.

The health service answers for the server ("") and for each service by name. Kubernetes'
readiness probe asks for `hpcdispatch.v1.DispatcherService` (deploy/k8s/deployment.yaml): when
no decision could be admitted for `health_overload_seconds` (every decision thread busy, or
every slot busy and refusing), DispatcherService and SessionService say NOT_SERVING, so a load
balancer sends new work to another replica while this one finishes its own. The server's own
status ("", which the liveness probe and the container's HEALTHCHECK ask for) stays SERVING:
a busy replica is alive, and restarting it would lose the decisions it is making. A graceful
stop turns every status NOT_SERVING for good, whatever the load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from grpc_health.v1 import health_pb2

log = structlog.get_logger("hpcdispatch.server")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The watch looks this often at most (seconds), and at least four times per overload period.
LONGEST_TICK_SECONDS = 0.5


async def watch_overload(health: Any, services: Iterable[str], admitting: Callable[[], bool],
                         after: float) -> None:
    """Until cancelled: `services` NOT_SERVING on `health` (a grpc_health aio HealthServicer)
    once `admitting()` has been false for `after` seconds, SERVING once it is true again."""
    loop = asyncio.get_running_loop()
    tick = min(LONGEST_TICK_SECONDS, after / 4)
    names = tuple(services)
    blocked_since: float | None = None
    overloaded = False
    while True:
        now = loop.time()
        if admitting():
            blocked_since = None
        elif blocked_since is None:
            blocked_since = now
        now_overloaded = blocked_since is not None and now - blocked_since >= after
        if now_overloaded != overloaded:
            overloaded = now_overloaded
            if overloaded:
                log.warning("overloaded: no decision could be admitted; readiness NOT_SERVING",
                            for_s=round(now - (blocked_since or now), 3), services=names)
            else:
                log.info("admitting decisions again; readiness SERVING", services=names)
            for name in names:
                await health.set(name, NOT_SERVING if overloaded else SERVING)
        await asyncio.sleep(tick)
