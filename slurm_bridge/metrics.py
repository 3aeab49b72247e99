"""Prometheus metrics of the bridge, in their own registry (prefix hpcdispatch_bridge_)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class BridgeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        p = "hpcdispatch_bridge_"
        self.cycles = Counter(p + "cycles_total", "Dispatch cycles by outcome",
                              ["outcome"], registry=r)
        self.cycle_seconds = Histogram(p + "cycle_duration_seconds",
                                       "Wall time of one cycle", buckets=CYCLE_BUCKETS,
                                       registry=r)
        self.dispatch_seconds = Histogram(p + "dispatch_duration_seconds",
                                          "Wall time of the decision call (session or Dispatch)",
                                          buckets=CYCLE_BUCKETS, registry=r)
        self.decisions = Counter(
            p + "decisions_total", "Decisions received, by how they were asked (via: "
            "session_open = a whole snapshot opening the session, session_delta = the changes "
            "since the previous decision, full_snapshot = Dispatch)", ["via"], registry=r)
        self.session_resyncs = Counter(
            p + "session_resyncs_total", "Sessions opened again with the whole snapshot, by "
            "reason (the service's SessionFailure, e.g. server_restarted or unknown_session; "
            "not_a_delta; session_lost = dropped after a failed call)", ["reason"], registry=r)
        self.jobs_released = Counter(p + "jobs_released_total",
                                     "Jobs pinned to the decided nodes and released", registry=r)
        self.jobs_decided = Counter(p + "jobs_decided_total",
                                    "Job starts received from the service", registry=r)
        self.errors = Counter(p + "errors_total", "Errors by kind", ["kind"], registry=r)
        self.reconciliations = Counter(p + "reconciliations_total",
                                       "Cases where Slurm did something else, by kind",
                                       ["kind"], registry=r)
        self.completions = Counter(p + "completions_reported_total",
                                   "Finished jobs reported to the predictors", registry=r)
        self.left_to_slurm = Counter(
            p + "jobs_left_to_slurm_total",
            "Held jobs released unpinned to Slurm: rules the snapshot cannot express",
            registry=r)
        self.promise_comments = Counter(
            p + "promise_comments_total", "Comments of held jobs updated to show their promised "
            "start and likely start (action=shown) or given back without them "
            "(action=cleared)", ["action"], registry=r)
        self.held_jobs = Gauge(p + "held_jobs", "Held jobs managed by the bridge", registry=r)
        self.in_flight_jobs = Gauge(p + "in_flight_jobs",
                                    "Released jobs Slurm has not started yet", registry=r)
        self.nodes = Gauge(p + "nodes", "Nodes of the managed partitions by state", ["state"],
                           registry=r)
        self.backoff_seconds = Gauge(p + "backoff_seconds",
                                     "Current wait before the next cycle after errors",
                                     registry=r)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose /metrics on the given port (background thread)."""
        start_http_server(port, addr=addr, registry=self.registry)
