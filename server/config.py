"""Server configuration: defaults < config file (YAML) < environment (HPCDISPATCH_*) < flags.

`ServerConfig` holds every key with its default, each documented in docs/configuration.md.
`load_config` merges the sources and checks every value in one place (`config_problems`); an
error names the key and the source its value came from. Beside them, what a key names is read
here too: the promise key file (`read_promise_keys`) and the knowledge base's limits
(`knowledge_base_limits`). Below the pipeline, above the core: of the core it reads only the
knowledge base's limits (`predictors/knowledge_base.py`, a dataclass of numbers).
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .predictors.knowledge_base import KnowledgeBaseLimits

ENV_PREFIX = "HPCDISPATCH_"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"  # host:port; port 0 picks a free port
    # Threads that work on calls (a unary call, or a session stream's message, holds one only
    # while it is worked on); decisions may hold workers - 1 of them.
    workers: int = 4
    # Decisions solved at the same time (others wait for a slot while their deadline allows);
    # 0: the number of CPUs this process may use.
    decision_concurrency: int = 0
    max_nodes: int = 200_000  # nodes per snapshot
    max_jobs: int = 200_000  # running + queued jobs per snapshot
    max_units: int = 100_000  # units of one job, queued (rn_i) or running (its unit list)
    # Units the running jobs of one snapshot (or session) hold in all: each is converted and kept.
    max_total_units: int = 1_000_000
    max_resource_types: int = 64  # distinct resource types per snapshot (and per map)
    # Names in one list of a site's rules: a node's or job's partitions or features, a
    # window's users or accounts.
    max_labels: int = 64
    # Characters of an identifier: job, node, user, queue, cluster, resource type, session id.
    max_id_chars: int = 256
    max_name_chars: int = 1024  # characters of a job name
    max_message_bytes: int = 256 * 1024 * 1024  # largest request / response
    max_decision_seconds: float = 60.0  # cap when the caller sets no deadline
    default_dispatcher: str = "pcp20"  # a registered dispatcher's name (hpcdispatch.catalog)
    # walltime | last-two | data-driven | oracle. data-driven: best for pcp20 in every benchmark
    # (docs/benchmarks/models-vs-papers.md §2); with no completions reported it predicts the
    # requested time.
    default_predictor: str = "data-driven"
    default_profile: str = "book"  # a name of server/domain/profiles.py PROFILES
    solver_workers: int = 1  # CP-SAT search workers per decision
    predictor_store: str | None = None  # SQLite file of the predictors' knowledge base
    # What the knowledge base keeps of reported completions, per client identity and cluster:
    # completions, and UTF-8 bytes of their text (beyond either, those no prediction reads go
    # first, then the oldest).
    knowledge_base_max_completions: int = 50_000
    knowledge_base_max_bytes: int = 4 * 1024 * 1024
    # Clusters with a history per client identity (one more forgets that identity's cluster
    # reported least recently), and held in memory with their predictors (the least recently
    # used dropped); identities with a history (one more forgets the least recently reporting).
    knowledge_base_max_clusters: int = 8
    knowledge_base_max_identities: int = 16
    grace_seconds: float = 30.0  # SIGTERM: time in-flight decisions get to finish
    metrics_port: int | None = None  # Prometheus /metrics HTTP port; None or 0: off
    metrics_host: str | None = None  # address /metrics binds to; None: the host of `listen`
    metrics_tls_cert: str | None = None  # PEM certificate chain of /metrics; with key: HTTPS
    metrics_tls_key: str | None = None  # PEM private key of metrics_tls_cert
    metrics_tls_client_ca: str | None = None  # PEM CA bundle; set: scrapers need a cert it signed
    metrics_basic_auth_user: str | None = None  # set: /metrics needs HTTP basic auth
    metrics_basic_auth_password_hash: str | None = None  # bcrypt hash of the user's password
    log_format: str = "auto"  # json | console | auto (console on a terminal, else json)
    log_level: str = "info"  # debug | info | warning | error | critical
    tls_cert: str | None = None  # PEM certificate chain of the server; with tls_key: TLS on
    tls_key: str | None = None  # PEM private key of the server
    tls_client_ca: str | None = None  # PEM CA bundle; set: clients must present a cert (mTLS)
    # mTLS: client identities (certificate SAN DNS / URI entries or CN) allowed to call the
    # service; empty: any certificate the client CA signed.
    tls_client_identities: tuple[str, ...] = ()
    # Sessions (SessionService) held at once; opening one more evicts the least recently used.
    max_sessions: int = 16
    # Sessions one client identity (its mTLS certificate) holds at once: opening one more evicts
    # that identity's least recently used session. Without client certificates every caller is
    # one identity, whose bound is max_sessions.
    max_sessions_per_identity: int = 4
    session_idle_seconds: float = 900.0  # a session unused this long is forgotten, seconds
    # The promise book's tokens (ExpectedStart.promise_token, server/intake/promise_tokens.py):
    # a file whose first key line is the key this server signs promises with, the further lines
    # keys it still accepts (rotation); None: a random key of this process, which accepts only
    # the promises it made itself. Replicas that share promises share this file.
    promise_key_file: str | None = None
    # A promise token is accepted until its promised start + this many seconds (caller's clock).
    promise_token_ttl_seconds: int = 86_400
    # A session stream with no message for this long is ended by the server (UNAVAILABLE; the
    # client starts a new one at its next call, its sessions are kept), seconds.
    stream_idle_seconds: float = 600.0
    # Decisions one client identity (its mTLS certificate) may have in progress or waiting for a
    # slot at once, of the workers - 1 decision threads; 0: all of them but one with client
    # certificates (tls_client_ca), all of them without (every caller is then one identity).
    max_decisions_per_identity: int = 0
    # With client certificates: decision threads beyond the workers - 1 shared ones, one each
    # for a client identity that holds none while the shared are all taken (the call pool has
    # a thread for each), so that no set of identities takes every decision from another.
    identity_reserve: int = 8
    # Health says NOT_SERVING for DispatcherService and SessionService (their readiness) once
    # no decision could be admitted for this long, and SERVING again as soon as one can, seconds.
    health_overload_seconds: float = 5.0

    def knowledge_base_limits(self) -> KnowledgeBaseLimits:
        """What the predictors' knowledge base keeps at most (the knowledge_base_* keys)."""
        return KnowledgeBaseLimits(
            max_completions=self.knowledge_base_max_completions,
            max_bytes=self.knowledge_base_max_bytes,
            max_clusters=self.knowledge_base_max_clusters,
            max_identities=self.knowledge_base_max_identities,
        )


NONE_WORDS = ("", "none", "None", "null")
TRUE_WORDS = ("true", "yes", "1", "on")
FALSE_WORDS = ("false", "no", "0", "off")
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
DEFAULT_SOURCE = "default"
# gRPC keeps message sizes in a C int.
MAX_MESSAGE_BYTES_LIMIT = 2**31 - 1
# At most this many reserve decision threads (identity_reserve): each is a thread of the pool.
MAX_IDENTITY_RESERVE = 256


def key_types() -> dict[str, Any]:
    """Each key's type, resolved (`int`, `str | None`, `tuple[str, ...]`, ...)."""
    return typing.get_type_hints(ServerConfig)


def _is_optional(kind: Any) -> bool:
    return isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)


def _base(kind: Any) -> Any:
    if _is_optional(kind):
        return next(a for a in typing.get_args(kind) if a is not type(None))
    return kind


def _coerce(name: str, raw: Any, kind: Any, source: str = DEFAULT_SOURCE) -> Any:
    """`raw` (YAML value, environment or flag text) as the key's type; errors name the source."""
    where = f"{source}: configuration key {name!r}"
    if _is_optional(kind) and (raw is None or str(raw) in NONE_WORDS):
        return None
    base = _base(kind)
    if base is bool:
        word = str(raw).strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ValueError(f"{where}: {raw!r} is not a boolean (true/false, yes/no, 1/0)")
    if typing.get_origin(base) is tuple:
        items = raw if isinstance(raw, list | tuple) else str(raw).replace(",", " ").split()
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(raw, bool) and base in (int, float):
        raise ValueError(f"{where}: {raw!r} is not a number")
    try:
        if base is int:
            return int(str(raw).strip())
        if base is float:
            return float(str(raw).strip())
    except ValueError as exc:
        raise ValueError(f"{where}: {raw!r} is not a number") from exc
    if isinstance(raw, dict | list):
        raise ValueError(f"{where}: expected a single value, got {raw!r}")
    return str(raw)


def _port(value: int, allow_zero: bool = True) -> bool:
    return (0 if allow_zero else 1) <= value <= 65535


# check(key, ok, message): records `message` against `key` unless ok (the first per key).
Check = Callable[[str, bool, str], None]


def config_problems(config: ServerConfig) -> dict[str, str]:
    """Key -> what is wrong with its value; empty when the configuration is valid."""
    problems: dict[str, str] = {}

    def check(key: str, ok: bool, message: str) -> None:
        if not ok and key not in problems:
            problems[key] = message

    _check_limits(config, check)
    _check_names(config, check)
    _check_security(config, check)
    return problems


def _check_limits(config: ServerConfig, check: Check) -> None:
    """The address, threads, sizes and times."""
    host, _, port = config.listen.rpartition(":")
    check("listen", bool(host) and port.isdigit() and _port(int(port)),
          f"{config.listen!r} is not host:port (port 0..65535; 0 picks a free one)")
    check("workers", config.workers >= 2,
          f"must be >= 2 (one thread stays free for health checks), got {config.workers}")
    check("decision_concurrency", config.decision_concurrency >= 0,
          f"must be >= 0 (0: the number of CPUs), got {config.decision_concurrency}")
    for key in ("max_nodes", "max_jobs", "max_units", "max_total_units", "max_resource_types",
                "max_labels", "max_id_chars", "max_name_chars", "max_sessions_per_identity",
                "solver_workers", "knowledge_base_max_completions", "knowledge_base_max_bytes",
                "knowledge_base_max_clusters", "knowledge_base_max_identities"):
        value = getattr(config, key)
        check(key, value >= 1, f"must be >= 1, got {value}")
    check("max_message_bytes", 1024 <= config.max_message_bytes <= MAX_MESSAGE_BYTES_LIMIT,
          f"must be between 1024 and 2^31 - 1, got {config.max_message_bytes}")
    check("max_decision_seconds",
          math.isfinite(config.max_decision_seconds) and config.max_decision_seconds > 0,
          f"must be > 0 seconds, got {config.max_decision_seconds}")
    check("max_sessions", config.max_sessions >= 1,
          f"must be >= 1, got {config.max_sessions}")
    check("session_idle_seconds",
          math.isfinite(config.session_idle_seconds) and config.session_idle_seconds > 0,
          f"must be > 0 seconds, got {config.session_idle_seconds}")
    check("grace_seconds", math.isfinite(config.grace_seconds) and config.grace_seconds >= 0,
          f"must be >= 0 seconds, got {config.grace_seconds}")
    check("promise_token_ttl_seconds", config.promise_token_ttl_seconds >= 0,
          f"must be >= 0 seconds, got {config.promise_token_ttl_seconds}")
    if config.promise_key_file:
        try:
            read_promise_keys(config.promise_key_file)
        except ValueError as exc:
            check("promise_key_file", False, str(exc))
    for key in ("stream_idle_seconds", "health_overload_seconds"):
        seconds = getattr(config, key)
        check(key, math.isfinite(seconds) and seconds > 0, f"must be > 0 seconds, got {seconds}")
    check("identity_reserve", 0 <= config.identity_reserve <= MAX_IDENTITY_RESERVE,
          f"must be 0 to {MAX_IDENTITY_RESERVE} decision threads (a thread each), got "
          f"{config.identity_reserve}")
    check("max_decisions_per_identity", config.max_decisions_per_identity >= 0,
          f"must be >= 0 (0: all decision threads but one with client certificates), got "
          f"{config.max_decisions_per_identity}")


def _check_names(config: ServerConfig, check: Check) -> None:
    """The defaults name a registered dispatcher, predictor, profile; logging's names."""
    from hpcdispatch.catalog import dispatcher_names, predictor_names

    from .domain.profiles import PROFILES, retired_profile

    # The names registered (docs/plugins.md): the built-ins and the installed plugins.
    dispatchers, predictors = dispatcher_names(), predictor_names()
    check("default_dispatcher", config.default_dispatcher in dispatchers,
          f"unknown dispatcher {config.default_dispatcher!r}; one of {sorted(dispatchers)}")
    check("default_predictor", config.default_predictor in predictors,
          f"unknown predictor {config.default_predictor!r}; one of {sorted(predictors)}")
    retired = retired_profile(config.default_profile)
    check("default_profile", config.default_profile in PROFILES,
          f"{retired}; one of {sorted(PROFILES)}" if retired else
          f"unknown profile {config.default_profile!r}; one of {sorted(PROFILES)}")
    check("log_format", config.log_format in LOG_FORMATS,
          f"unknown log format {config.log_format!r}; one of {list(LOG_FORMATS)}")
    check("log_level", config.log_level in LOG_LEVELS,
          f"unknown log level {config.log_level!r}; one of {list(LOG_LEVELS)}")


def _check_security(config: ServerConfig, check: Check) -> None:
    """The metrics port, TLS files in pairs, client identities, the metrics' basic auth."""
    if config.metrics_port is not None:
        check("metrics_port", _port(config.metrics_port),
              f"must be a TCP port 0..65535 (0: off), got {config.metrics_port}")
    for prefix in ("", "metrics_"):
        cert, key = getattr(config, f"{prefix}tls_cert"), getattr(config, f"{prefix}tls_key")
        # Each pairing problem is reported on the key that is set (its source is known).
        check(f"{prefix}tls_key", bool(cert) or not key, f"needs {prefix}tls_cert")
        check(f"{prefix}tls_cert", bool(key) or not cert, f"needs {prefix}tls_key")
        check(f"{prefix}tls_client_ca", not getattr(config, f"{prefix}tls_client_ca") or (
            bool(cert and key)), f"needs {prefix}tls_cert and {prefix}tls_key")
    check("tls_client_identities", not config.tls_client_identities or bool(config.tls_client_ca),
          "needs tls_client_ca (identities come from client certificates)")
    user, password_hash = config.metrics_basic_auth_user, config.metrics_basic_auth_password_hash
    check("metrics_basic_auth_password_hash", bool(user) or not password_hash,
          "needs metrics_basic_auth_user")
    check("metrics_basic_auth_user", bool(password_hash) or not user,
          "needs metrics_basic_auth_password_hash (a bcrypt hash)")
    if password_hash:
        check("metrics_basic_auth_password_hash",
              password_hash.startswith(("$2a$", "$2b$", "$2y$")) and len(password_hash) == 60,
              "must be a bcrypt hash ($2b$..., 60 characters), e.g. from `htpasswd -nBC 10 USER`")


# A promise key line (promise_key_file): at least this many characters of a random text.
MIN_PROMISE_KEY_CHARS = 32


def read_promise_keys(path: str) -> tuple[bytes, ...]:
    """The keys of a promise key file, one per line (blank and # lines skipped), the signing
    key first; ValueError saying what is wrong with the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from exc
    keys = [k for k in (line.strip() for line in text.splitlines()) if k and not k.startswith("#")]
    if not keys:
        raise ValueError(f"{path}: holds no key (one key per line, the first signs)")
    short = [n for n, key in enumerate(keys, 1) if len(key) < MIN_PROMISE_KEY_CHARS]
    if short:
        raise ValueError(f"{path}: key {short[0]} has fewer than {MIN_PROMISE_KEY_CHARS} "
                         "characters (e.g. `openssl rand -hex 32`)")
    return tuple(key.encode("utf-8") for key in keys)


def validate_config(config: ServerConfig, sources: Mapping[str, str] | None = None) -> None:
    """Raise ValueError listing every invalid key, each with the source of its value."""
    problems = config_problems(config)
    if problems:
        lines = [
            f"{(sources or {}).get(key, DEFAULT_SOURCE)}: configuration key {key!r}: {message}"
            for key, message in problems.items()
        ]
        raise ValueError("invalid configuration:\n  " + "\n  ".join(lines))


def load_config(
    file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServerConfig:
    """Merge the sources and check the result; unknown keys and invalid values are errors that
    name the key and the source."""
    types_ = key_types()
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if file:
        data = yaml.safe_load(Path(file).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{file}: expected a mapping of configuration keys")
        for key, raw in data.items():
            name = str(key).replace("-", "_")
            if name not in types_:
                raise ValueError(f"{file}: unknown configuration key {key!r}")
            values[name] = _coerce(name, raw, types_[name], file)
            sources[name] = file
    for key, raw in (os.environ if env is None else env).items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name not in types_:
                raise ValueError(f"environment: unknown configuration variable {key}")
            values[name] = _coerce(name, raw, types_[name], f"environment {key}")
            sources[name] = f"environment {key}"
    for name, raw in (overrides or {}).items():
        if raw is not None:
            flag = "--" + name.replace("_", "-")
            values[name] = _coerce(name, raw, types_[name], f"flag {flag}")
            sources[name] = f"flag {flag}"
    config = dataclasses.replace(ServerConfig(), **values)
    validate_config(config, sources)
    return config
