"""Configuration: every key checked in one place, errors naming the key and the source."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpcdispatch.server.config import ServerConfig, _coerce, config_problems, load_config
from hpcdispatch.server.rpc.app import start_server


def test_the_defaults_are_valid() -> None:
    assert config_problems(ServerConfig()) == {}
    assert load_config(env={}) == ServerConfig()


@pytest.mark.parametrize(("text", "value"), [
    ("true", True), ("True", True), ("yes", True), ("1", True), (True, True),
    ("false", False), ("False", False), ("no", False), ("0", False), (False, False),
])
def test_booleans_are_read_as_booleans(text: object, value: bool) -> None:
    assert _coerce("flag", text, bool, "environment HPCDISPATCH_FLAG") is value


def test_a_word_that_is_no_boolean_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"environment HPCDISPATCH_FLAG.*'flag'.*'maybe'"):
        _coerce("flag", "maybe", bool, "environment HPCDISPATCH_FLAG")


@pytest.mark.parametrize(("key", "raw", "expected"), [
    ("workers", "1", "must be >= 2"),  # one thread: decisions would starve health checks
    ("workers", "0", "must be >= 2"),
    ("decision_concurrency", "-1", "must be >= 0"),
    ("max_nodes", "0", "must be >= 1"),
    ("max_jobs", "-5", "must be >= 1"),
    ("max_units", "0", "must be >= 1"),
    ("max_labels", "0", "must be >= 1"),
    ("solver_workers", "0", "must be >= 1"),
    ("max_message_bytes", "100", "between 1024 and 2^31 - 1"),
    ("max_message_bytes", str(2**31), "between 1024 and 2^31 - 1"),
    ("max_decision_seconds", "0", "must be > 0"),
    ("max_decision_seconds", "nan", "must be > 0"),
    ("grace_seconds", "-1", "must be >= 0"),
    ("stream_idle_seconds", "0", "must be > 0"),
    ("stream_idle_seconds", "inf", "must be > 0"),
    ("health_overload_seconds", "-1", "must be > 0"),
    ("max_decisions_per_identity", "-1", "must be >= 0"),
    ("identity_reserve", "-1", "must be 0 to 256"),
    ("identity_reserve", "257", "must be 0 to 256"),
    ("default_dispatcher", "sjf", "unknown dispatcher"),
    ("default_predictor", "psychic", "unknown predictor"),
    ("default_profile", "turbo", "unknown profile"),
    # Issue #49: a retired profile says which mode replaces it.
    ("default_profile", "fast", "profile 'fast' was retired (issue #49); use `book`"),
    ("default_profile", "promises", "profile 'promises' was retired (issue #49); use `book`"),
    ("default_profile", "packing", "profile 'packing' was retired (issue #49); use `book`"),
    ("log_level", "loud", "unknown log level"),
    ("log_format", "xml", "unknown log format"),
    ("metrics_port", "70000", "TCP port"),
    ("listen", "localhost", "not host:port"),
    ("listen", "127.0.0.1:http", "not host:port"),
    ("tls_client_ca", "ca.pem", "needs tls_cert and tls_key"),
    ("metrics_tls_key", "m.key", "needs metrics_tls_cert"),
    ("metrics_basic_auth_user", "prometheus", "needs metrics_basic_auth_password_hash"),
    ("metrics_basic_auth_password_hash", "secret", "needs metrics_basic_auth_user"),
    ("tls_client_identities", "slurm-plugin", "needs tls_client_ca"),
])
def test_an_invalid_value_names_its_key_and_source(key: str, raw: str, expected: str) -> None:
    variable = "HPCDISPATCH_" + key.upper()
    with pytest.raises(ValueError) as caught:
        load_config(env={variable: raw})
    message = str(caught.value)
    assert f"environment {variable}: configuration key {key!r}" in message
    assert expected in message


def test_sources_are_named_for_file_and_flag(tmp_path: Path) -> None:
    file = tmp_path / "server.yaml"
    file.write_text("workers: 1\nmax-nodes: 0\n")
    with pytest.raises(ValueError) as caught:
        load_config(str(file), env={}, overrides={"log_level": "loud"})
    message = str(caught.value)
    assert f"{file}: configuration key 'workers'" in message
    assert f"{file}: configuration key 'max_nodes'" in message
    assert "flag --log-level: configuration key 'log_level'" in message


def test_a_config_file_naming_a_retired_profile_is_a_config_error(tmp_path: Path) -> None:
    file = tmp_path / "server.yaml"
    file.write_text("default_profile: qos\n")
    assert load_config(str(file), env={}).default_profile == "qos"  # still a mode
    file.write_text("default_profile: promises\n")
    with pytest.raises(ValueError, match=rf"{file}: configuration key 'default_profile': "
                       r"profile 'promises' was retired \(issue #49\); use `book`"):
        load_config(str(file), env={})


def test_a_number_that_does_not_parse_names_the_source(tmp_path: Path) -> None:
    file = tmp_path / "server.yaml"
    file.write_text("workers: many\n")
    with pytest.raises(ValueError, match=rf"{file}: configuration key 'workers': 'many' is not"):
        load_config(str(file), env={})
    with pytest.raises(ValueError, match="'grace_seconds': True is not a number"):
        file.write_text("grace_seconds: yes\n")  # YAML reads yes as a boolean
        load_config(str(file), env={})


def test_decision_concurrency_zero_means_the_cpu_count_and_is_valid() -> None:
    assert load_config(env={"HPCDISPATCH_DECISION_CONCURRENCY": "0"}).decision_concurrency == 0
    assert load_config(env={"HPCDISPATCH_DECISION_CONCURRENCY": "3"}).decision_concurrency == 3


def test_client_identities_from_a_list_or_text(tmp_path: Path) -> None:
    file = tmp_path / "server.yaml"
    file.write_text("tls_cert: s.crt\ntls_key: s.key\ntls_client_ca: ca.crt\n"
                    "tls_client_identities: [slurm-plugin, spiffe://hpc/bridge]\n")
    assert load_config(str(file), env={}).tls_client_identities == (
        "slurm-plugin", "spiffe://hpc/bridge")
    config = load_config(str(file), env={"HPCDISPATCH_TLS_CLIENT_IDENTITIES": "a, b c"})
    assert config.tls_client_identities == ("a", "b", "c")


def test_start_server_refuses_an_invalid_configuration_built_in_code() -> None:
    config = dataclasses.replace(ServerConfig(), listen="127.0.0.1:0", workers=1)
    with pytest.raises(ValueError, match="'workers': must be >= 2"):
        start_server(config)
