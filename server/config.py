"""Server configuration: defaults < config file (YAML) < environment (HPCDISPATCH_*) < flags.

Every key is documented in docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "HPCDISPATCH_"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"  # host:port; port 0 picks a free port
    workers: int = 4  # gRPC worker threads; decisions may use workers - 1 of them
    # Decisions solved at the same time (others wait for a slot while their deadline allows);
    # 0: the number of CPUs this process may use.
    decision_concurrency: int = 0
    max_nodes: int = 200_000  # nodes per snapshot
    max_jobs: int = 200_000  # running + queued jobs per snapshot
    max_units: int = 100_000  # units of one job
    max_message_bytes: int = 256 * 1024 * 1024  # largest request / response
    max_decision_seconds: float = 60.0  # cap when the caller sets no deadline
    default_dispatcher: str = "pcp20"  # fcfs | easy | hcp19 | pcp19 | pcp20
    # walltime | last-two | data-driven | oracle. data-driven: best for pcp20 in every benchmark
    # (BENCHMARKS.md §4); with no completions reported it predicts the requested time.
    default_predictor: str = "data-driven"
    default_profile: str = "fast"  # papers | fast
    solver_workers: int = 1  # CP-SAT search workers per decision
    predictor_store: str | None = None  # SQLite file of the predictors' knowledge base
    grace_seconds: float = 30.0  # SIGTERM: time in-flight decisions get to finish
    metrics_port: int | None = None  # Prometheus /metrics HTTP port; None or 0: off
    metrics_host: str | None = None  # address /metrics binds to; None: the host of `listen`
    log_format: str = "auto"  # json | console | auto (console on a terminal, else json)
    log_level: str = "info"  # debug | info | warning | error
    tls_cert: str | None = None  # PEM certificate chain of the server; with tls_key: TLS on
    tls_key: str | None = None  # PEM private key of the server
    tls_client_ca: str | None = None  # PEM CA bundle; set: clients must present a cert (mTLS)


NONE_WORDS = ("", "none", "None", "null")


def _coerce(name: str, raw: Any, kind: Any) -> Any:
    text = str(raw)
    optional = str(kind).endswith("| None")
    if optional and (raw is None or text in NONE_WORDS):
        return None
    base = str(kind).removesuffix("| None").strip()
    try:
        if base in ("int", str(int)):
            return int(text)
        if base in ("float", str(float)):
            return float(text)
    except ValueError as exc:
        raise ValueError(f"configuration key {name!r}: {raw!r} is not a number") from exc
    return text


def load_config(
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServerConfig:
    """Merge the sources; unknown keys are errors that name the key and the source."""
    types = {f.name: f.type for f in fields(ServerConfig)}
    values: dict[str, Any] = {}
    if file:
        data = yaml.safe_load(Path(file).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{file}: expected a mapping of configuration keys")
        for key, raw in data.items():
            name = str(key).replace("-", "_")
            if name not in types:
                raise ValueError(f"{file}: unknown configuration key {key!r}")
            values[name] = _coerce(name, raw, types[name])
    for key, raw in (os.environ if env is None else env).items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name not in types:
                raise ValueError(f"environment: unknown configuration variable {key}")
            values[name] = _coerce(name, raw, types[name])
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _coerce(name, raw, types[name])
    return dataclasses.replace(ServerConfig(), **values)
