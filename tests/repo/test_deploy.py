"""deploy/: the Grafana dashboard queries exported metrics; compose and Kubernetes files hold."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import load_config
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import (
    dashboard_queries,
    exported_names,
    metrics_server,
    promql_metric_names,
    scrape_text,
    small_request,
)
from tests.paths import ROOT

DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "hpcdispatch.json"
DELTA_MAX_SECONDS = 16  # the longest decision (papers profile)
K8S_VERSIONS = (kubernetes_validate.latest_version(), "1.27")  # gRPC probes: GA in 1.27


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def k8s_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def k8s_kind(kind: str, name: str = "hpcdispatch") -> dict[str, Any]:
    return next(d for d in k8s_documents()
                if d["kind"] == kind and d["metadata"]["name"] == name)


def entrypoint_ports() -> tuple[int, int]:
    """(gRPC, metrics) ports of the Dockerfile's ENTRYPOINT."""
    text = (ROOT / "Dockerfile").read_text()
    argv = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))  # type: ignore[union-attr]
    grpc_port = int(argv[argv.index("--listen") + 1].rsplit(":", 1)[1])
    return grpc_port, int(argv[argv.index("--metrics-port") + 1])


# -- Grafana dashboard ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Series names a real server exports after a decision and a completion report."""
    with metrics_server() as server, DispatcherClient(server.target) as client:
        request = small_request()
        response = client.dispatch(request)
        start = response.starts[0]
        client.report_completions([pb.JobCompletion(
            job_id=start.job_id, user="u", units=len(start.units),
            unit_request=dict(start.units[0].amounts), requested_time=3600,
            start_time=request.time, end_time=request.time + 60)])
        assert server.metrics_port
        return exported_names(scrape_text(server.metrics_port))


def test_every_dashboard_query_names_exported_metrics(exported: set[str]) -> None:
    queries = dashboard_queries(load_dashboard())
    assert len(queries) >= 15
    used = set()
    for query in queries:
        names = promql_metric_names(query)
        assert names, f"no metric in {query!r}"
        missing = names - exported
        assert not missing, f"{query!r} uses metrics the service does not export: {missing}"
        used |= names
    # The dashboard covers the service's main families.
    for needed in ("hpcdispatch_decision_seconds_bucket", "hpcdispatch_decision_build_seconds_sum",
                   "hpcdispatch_decision_solve_seconds_sum", "hpcdispatch_decisions_total",
                   "hpcdispatch_decision_attempts_sum", "hpcdispatch_queue_depth",
                   "grpc_server_handled_total"):
        assert needed in used, needed


def test_the_metric_name_check_can_fail(exported: set[str]) -> None:
    bad = 'sum(rate(hpcdispatch_decision_latency_seconds_bucket{dispatcher="x"}[5m]))'
    assert promql_metric_names(bad) - exported == {"hpcdispatch_decision_latency_seconds_bucket"}


def test_dashboard_has_the_panels_operators_need() -> None:
    dashboard = load_dashboard()
    titles = " | ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("latency", "build vs solve", "status", "attempts", "queue depth",
                  "request rate", "errors"):
        assert topic in titles, topic
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    latency = next(p for p in dashboard["panels"] if "latency quantiles" in p["title"].lower())
    exprs = " ".join(t["expr"] for t in latency["targets"])
    assert "histogram_quantile" in exprs and "dispatcher" in exprs


# -- compose -------------------------------------------------------------------------------------


def test_compose_stack_is_wired() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"hpcdispatch", "hpcdispatch-2", "postgres", "prometheus", "grafana"} <= services.keys()
    grpc_port, metrics_port = entrypoint_ports()
    assert {f"{grpc_port}:{grpc_port}", f"{metrics_port}:{metrics_port}"} <= set(
        services["hpcdispatch"]["ports"])
    assert (DEPLOY / services["hpcdispatch"]["build"]["context"] / "Dockerfile").exists()
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} is missing"
    # Prometheus scrapes the service's metrics port.
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prometheus["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]]
    assert {f"hpcdispatch:{metrics_port}", f"hpcdispatch-2:{metrics_port}"} <= set(targets)
    # Grafana: the data source is that Prometheus; the dashboards folder is where it is mounted.
    datasources = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())["datasources"]
    assert datasources[0]["url"] == "http://prometheus:9090" and datasources[0]["isDefault"]
    providers = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/hpcdispatch.yaml").read_text())["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    dashboards = mounts[providers[0]["options"]["path"]]
    assert (DEPLOY / dashboards / DASHBOARD.name).exists()
    # The server's configuration loads, and the stop grace period outlasts its grace_seconds.
    config = load_config(str(DEPLOY / "server.yaml"), env={})
    stop = int(services["hpcdispatch"]["stop_grace_period"].removesuffix("s"))
    assert DELTA_MAX_SECONDS < config.grace_seconds < stop


def test_compose_replicas_share_one_knowledge_base() -> None:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    replicas = [services["hpcdispatch"], services["hpcdispatch-2"]]
    urls = {r["environment"]["HPCDISPATCH_PREDICTOR_STORE"] for r in replicas}
    assert len(urls) == 1
    url = urlsplit(urls.pop())
    assert url.scheme == "postgresql" and url.password is None  # libpq reads PGPASSWORD
    postgres = services["postgres"]
    assert url.hostname == "postgres" and url.port == 5432
    assert url.username == postgres["environment"]["POSTGRES_USER"]
    assert url.path.lstrip("/") == postgres["environment"]["POSTGRES_DB"]
    for replica in replicas:
        assert replica["environment"]["PGPASSWORD"] == postgres["environment"]["POSTGRES_PASSWORD"]
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
    host_ports = [p.split(":")[0] for r in replicas for p in r["ports"]]
    assert len(host_ports) == len(set(host_ports))  # the two replicas do not clash
    assert "healthcheck" in postgres


# -- Kubernetes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate(version: str) -> None:
    documents = k8s_documents()
    assert {d["kind"] for d in documents} >= {"Deployment", "Service", "ConfigMap", "Secret",
                                              "StatefulSet"}
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)


def test_k8s_validation_can_fail() -> None:
    broken = copy.deepcopy(k8s_kind("Deployment"))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["grpc"]["port"] = "grpc"  # gRPC probes take a number
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)
    unknown = copy.deepcopy(k8s_kind("Deployment"))
    unknown["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown, K8S_VERSIONS[0], strict=True)


def test_k8s_deployment_is_safe_to_run_and_stop(tmp_path: Path) -> None:
    deployment = k8s_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    grpc_port, metrics_port = entrypoint_ports()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": grpc_port, "metrics": metrics_port}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port, probe
    assert container["readinessProbe"]["grpc"]["service"] == "hpcdispatch.v1.DispatcherService"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= container["resources"][kind].keys(), kind
    # The ConfigMap is what --config reads, it loads, and the grace periods are ordered:
    # longest decision < grace_seconds < terminationGracePeriodSeconds.
    configmap = k8s_kind("ConfigMap")
    config_file = tmp_path / "server.yaml"
    config_file.write_text(configmap["data"]["server.yaml"])
    config = load_config(str(config_file), env={})
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["args"] == ["--config", f"{mount['mountPath']}/server.yaml"]
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert DELTA_MAX_SECONDS < config.grace_seconds < pod["terminationGracePeriodSeconds"]
    # A writable /tmp, since the root file system is read-only.
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


def test_k8s_replicas_share_the_postgres_knowledge_base() -> None:
    deployment = k8s_kind("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    url = urlsplit(env["HPCDISPATCH_PREDICTOR_STORE"]["value"])
    assert url.scheme == "postgresql" and url.password is None
    database = k8s_kind("Service", "hpcdispatch-postgres")
    assert url.hostname == database["metadata"]["name"]
    assert url.port == database["spec"]["ports"][0]["port"]
    statefulset = k8s_kind("StatefulSet", "hpcdispatch-postgres")
    assert database["spec"]["selector"].items() <= (
        statefulset["spec"]["template"]["metadata"]["labels"].items())
    postgres = statefulset["spec"]["template"]["spec"]["containers"][0]
    postgres_env = {e["name"]: e for e in postgres["env"]}
    assert url.username == postgres_env["POSTGRES_USER"]["value"]
    assert url.path.lstrip("/") == postgres_env["POSTGRES_DB"]["value"]
    # One password, from one Secret, for the server and the replicas.
    secret = k8s_kind("Secret", "hpcdispatch-postgres")
    for reference in (env["PGPASSWORD"], postgres_env["POSTGRES_PASSWORD"]):
        key = reference["valueFrom"]["secretKeyRef"]
        assert key["name"] == secret["metadata"]["name"] and key["key"] in secret["stringData"]
    assert statefulset["spec"]["volumeClaimTemplates"], "the history needs a persistent volume"


def test_k8s_service_selects_the_pods() -> None:
    service = k8s_kind("Service")
    labels = k8s_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = k8s_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


# -- configuration reference ---------------------------------------------------------------------


def test_configuration_reference_documents_every_key_and_flag() -> None:
    from hpcdispatch.cli import build_parser
    from hpcdispatch.server.config import ServerConfig

    text = (ROOT / "docs" / "configuration.md").read_text()
    # Rows of the key tables (header "| key | environment | ..."); the search profiles' and
    # search parameters' tables describe request fields, not server keys.
    rows, in_keys = {}, False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_keys = False
        elif line.startswith("| key | environment |"):
            in_keys = True
        elif in_keys and (m := re.match(r"^\| `(\w+)` \|", line)):
            rows[m.group(1)] = line
    keys = [f.name for f in dataclasses.fields(ServerConfig)]
    assert sorted(rows) == sorted(keys)
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = {o for action in serve._actions for o in action.option_strings}
    for key in keys:
        assert f"`HPCDISPATCH_{key.upper()}`" in rows[key], key
        flag = "--" + key.replace("_", "-")
        assert (f"`{flag}`" in rows[key]) == (flag in flags), key
    for field in dataclasses.fields(ServerConfig):
        documented = rows[field.name].split("|")[4].strip().strip("`")
        default = field.default
        expected = ("not set" if default is None or default == ()  # optional / empty list
                    else str(int(default)) if isinstance(default, float) and default.is_integer()
                    else str(default))
        assert documented == expected, field.name


def _key_row(key: str) -> str:
    """The row of `key` in docs/configuration.md's key tables."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith(f"| `{key}` | `HPCDISPATCH_")]
    assert len(rows) == 1, key
    return rows[0]


def _names_in(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z0-9-]+)`", cell))


def test_the_default_rows_name_every_dispatcher_predictor_and_profile() -> None:
    """The rows of the defaults list what the code has, so a new profile (issue #24's
    `packing` was missing) or dispatcher cannot be left out."""
    from hpcdispatch.catalog import DISPATCHER_NAMES, PREDICTOR_NAMES
    from hpcdispatch.server.domain.profiles import PROFILES

    for key, names in (("default_dispatcher", DISPATCHER_NAMES),
                       ("default_predictor", PREDICTOR_NAMES), ("default_profile", PROFILES)):
        meaning = _key_row(key).split("|")[6]
        named = _names_in(meaning.split("(see")[0].split(". ")[0])
        assert named == set(names), (key, sorted(set(names) ^ named))


def test_the_profile_tables_have_a_row_per_profile() -> None:
    """The one modes table (docs/dispatchers.md, *Modes*) and the parameters' table
    (docs/configuration.md) name every profile, the default as such, and no retired one."""
    from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES, RETIRED

    for page, header in (("docs/dispatchers.md", "| mode |"),
                         ("docs/configuration.md", "| profile | δ / δmax / k |")):
        text = (ROOT / page).read_text()
        table = text[text.index(header):].split("\n\n", 1)[0]
        rows = re.findall(r"^\| `([a-z]+)`( \(default\))? \| ", table, re.M)
        assert {name for name, _ in rows} == set(PROFILES), page
        assert [name for name, default in rows if default] == [DEFAULT_PROFILE], page
        assert not {name for name, _ in rows} & set(RETIRED), page


def _documented_metrics(page: str, section: str) -> set[str]:
    """The metric names in backticks of `section` (from its heading to the next one)."""
    text = (ROOT / page).read_text()
    start = text.index(section)
    following = re.search(r"^#{2,3} ", text[start + len(section):], re.M)
    body = text[start: start + len(section) + following.start()] if following else text[start:]
    return set(re.findall(r"`((?:hpcdispatch|grpc_server)_[a-z_]+)`", body))


def _exported_metrics(registry: Any, prefix: str = "") -> set[str]:
    """Every metric a registry exports, as the pages name them (counters with `_total`)."""
    return {prefix + family.name.removeprefix(prefix) + ("_total" if family.type == "counter"
                                                         else "")
            for family in registry.collect()}


def test_every_service_metric_is_in_the_deployment_page_and_no_other() -> None:
    from hpcdispatch.server.rpc.metrics import ServiceMetrics

    documented = _documented_metrics("docs/deployment.md", "### Metrics")
    exported = _exported_metrics(ServiceMetrics().registry)
    assert sorted(exported - documented) == [] and sorted(documented - exported) == []


def test_every_bridge_metric_is_in_the_bridge_page_and_no_other() -> None:
    from hpcdispatch.slurm_bridge.metrics import BridgeMetrics

    text = (ROOT / "docs" / "slurm-bridge.md").read_text()
    section = text[text.index("## Metrics"):]
    section = section[section.index("\n"): section.index("\n## ", 1)]  # below the heading
    documented = {"hpcdispatch_bridge_" + name
                  for name in re.findall(r"`([a-z_]+)(?:\{[^`]*\})?`", section)}
    exported = _exported_metrics(BridgeMetrics().registry)
    assert sorted(exported - documented) == [] and sorted(documented - exported) == []
