"""The Helm chart renders what operations rely on, lints clean and makes valid Kubernetes objects.

Rendered and linted by the Helm v4 SDK itself (``helm-python-sdk``: Helm's Go library, no
binary), checked against the Kubernetes JSON schemas (``kubernetes-validate``, strict: unknown
fields are errors) and against the chart's own ``values.schema.json``. All in the dev extra.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

CHART = Path(__file__).resolve().parents[2] / "helm" / "fleet"
#: Kubernetes version the manifests are validated (and linted) for: a recent one bundled.
KUBE_VERSION = "1.35.0"
#: ``--set`` expressions, parsed by Helm's own strvals (types as the CLI would give them).
KEDA = "worker.keda.enabled=true,worker.keda.redis.address=redis:6379"
INLINE = "database.url=postgresql+psycopg://u:p@db/fleet,redis.url=redis://r"
HA = "beat.replicas=2,api.replicas=3,worker.autoscaling.minReplicas=3"
EVENTS = "events.replicas=2"
#: Behind PgBouncer in transaction mode, migrations on a direct URL from the user's Secret.
POOLER = (
    "database.existingSecret=fleet-env,redis.existingSecret=fleet-env,"
    "database.pooler=transaction,database.migrate.existingSecret=fleet-env"
)
#: PostgreSQL over verify-full with a client certificate, files from the user's Secret.
PG_TLS = (
    "database.tls.mode=verify-full,database.tls.secretName=pg-tls,"
    "database.tls.certKey=tls.crt,database.tls.keyKey=tls.key"
)
#: Redis through three sentinels, over TLS with the CA from the user's Secret.
SENTINELS = (
    "redis.sentinels={s0:26379,s1:26379,s2:26379},redis.sentinelMaster=fleet,"
    "redis.sentinelPassword.existingSecret=sentinel,redis.tls.secretName=redis-tls"
)
VALUES = {
    "default": "",
    "pg-tls": PG_TLS,
    "sentinels": SENTINELS,
    "keda": KEDA,
    "ha": HA,
    "inline-secrets": INLINE,
    "events": EVENTS,
    "pooler": POOLER,
}
WORKLOADS = {"Deployment", "Job"}
#: Custom resources of KEDA: no schema of theirs ships with kubernetes-validate, so these are
#: the only kinds not validated against one (their fields are asserted below instead).
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
WARNING = 2  # lint message severity: 1 info, 2 warning, 3 error


def _values(*sets: str) -> dict[str, Any]:
    expression = ",".join(s for s in sets if s)
    return helm.parse_set_string(expression) if expression else {}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def _render(chart: helm.Chart, *sets: str) -> list[dict[str, Any]]:
    """``helm template t CHART --set …``: every object of every template, NOTES.txt aside."""
    manifests = chart.render(_values(*sets), name="t", namespace="default", is_install=True)
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml"))
        for doc in yaml.safe_load_all(text)
        if doc
    ]


@pytest.fixture(scope="module")
def render(chart: helm.Chart) -> Any:
    return lambda *sets: _render(chart, *sets)


def _component(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    found = [
        d
        for d in docs
        if d["kind"] == kind
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {kind} for {component}, got {len(found)}"
    return found[0]


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("sets", VALUES.values(), ids=VALUES.keys())
def test_lint_is_clean(sets: str) -> None:
    report = helm.lint(CHART, _values(sets), strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert not problems and not report["errors"], json.dumps(report, indent=1)


@pytest.mark.parametrize("sets", VALUES.values(), ids=VALUES.keys())
def test_every_manifest_is_valid_for_kubernetes(render: Any, sets: str) -> None:
    unvalidated = set()
    for doc in render(sets):
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except SchemaNotFoundError:
            unvalidated.add(doc["kind"])
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where} is not a valid {KUBE_VERSION} object: {path}: {exc.message}")
    assert unvalidated <= KEDA_KINDS, f"no Kubernetes schema for {unvalidated - KEDA_KINDS}"
    assert bool(unvalidated) == ("keda" in sets)


@pytest.mark.parametrize(
    ("sets", "replicas"), [("", 1), (KEDA, 1), (HA, 2)], ids=["default", "keda", "ha"]
)
def test_beat_runs_one_or_more_sweepers(render: Any, sets: str, replicas: int) -> None:
    beat = _component(render(sets, "worker.replicas=5"), "Deployment", "beat")
    assert beat["spec"]["replicas"] == replicas
    # Several sweepers are harmless (one sweeps per interval): no need to stop one first.
    assert beat["spec"].get("strategy", {}).get("type", "RollingUpdate") == "RollingUpdate"
    (container,) = beat["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["fleet", "beat"]


def test_event_streams_get_processes_of_their_own_when_asked(render: Any) -> None:
    assert not [d for d in render("") if "events" in d["metadata"]["name"]]
    docs = render(EVENTS)
    events = _component(docs, "Deployment", "events")
    api = _component(docs, "Deployment", "api")
    assert events["spec"]["replicas"] == 2
    (container,) = events["spec"]["template"]["spec"]["containers"]
    (api_container,) = api["spec"]["template"]["spec"]["containers"]
    assert container["command"] == api_container["command"]  # the same `fleet serve`
    assert container["env"] == api_container["env"]
    assert container["readinessProbe"] == api_container["readinessProbe"]
    service = _component(docs, "Service", "events")
    assert service["spec"]["selector"] == events["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] != api["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("sets", ["", EVENTS], ids=["api", "events"])
def test_fleet_serve_serves_its_metrics_on_a_port_of_their_own(render: Any, sets: str) -> None:
    docs = render(sets)
    for component in ("api", "events") if sets else ("api",):
        (container,) = _component(docs, "Deployment", component)["spec"]["template"]["spec"][
            "containers"
        ]
        assert container["command"][-2:] == ["--metrics-port", "9464"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http": 8080, "metrics": 9464}
        # no Service routes to it: it stays for the monitoring network's scrapes
        service = _component(docs, "Service", component)
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    (plain,) = _component(render("api.metricsPort=0"), "Deployment", "api")["spec"]["template"][
        "spec"
    ]["containers"]
    assert "--metrics-port" not in plain["command"] and len(plain["ports"]) == 1


def test_migrate_job_is_a_pre_install_and_pre_upgrade_hook(render: Any) -> None:
    job = _component(render(), "Job", "migrate")
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert sorted(h.strip() for h in hooks) == ["pre-install", "pre-upgrade"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["fleet", "migrate"]


def test_worker_grace_period_follows_the_shutdown_grace(render: Any) -> None:
    """Unset, a worker pod gets the shutdown grace plus 30 s (its runs hand back at their step
    boundary within the grace, then settle and exit); set, the value given. A rolling update
    starts new worker pods before it stops old ones, and the pods name their build."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["worker"]["terminationGracePeriodSeconds"] is None
    grace = values["settings"]["shutdownGrace"]
    for sets, expected in [
        ("", grace + 30),
        ("settings.shutdownGrace=100", 130),
        ("worker.terminationGracePeriodSeconds=900", 900),
    ]:
        worker = _component(render(sets), "Deployment", "worker")
        assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == expected
    worker = _component(render(""), "Deployment", "worker")
    assert worker["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    env = {
        e["name"]: e.get("value")
        for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["FLEET_SHUTDOWN_GRACE"] == str(grace)
    assert env["FLEET_BUILD"] == yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    command = worker["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--runs") + 1] == str(values["worker"]["runs"])


#: Measured with ``bench.inflight`` (docs/performance/benchmarks.md): an idle worker process's
#: memory, and what each run in flight adds (rounded up).
IDLE_WORKER_MIB, MIB_PER_RUN = 120, 0.3


def _mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_a_worker_pod_holds_100_runs_a_process_within_its_memory(render: Any) -> None:
    """By default each worker process holds 100 runs in flight, and the pod's memory request
    covers its processes at that (an idle process plus 0.3 MiB a run), its limit twice it."""
    (container,) = _component(render(""), "Deployment", "worker")["spec"]["template"]["spec"][
        "containers"
    ]
    command = container["command"]
    processes = int(command[command.index("--concurrency") + 1])
    runs = int(command[command.index("--runs") + 1])
    assert runs >= 100
    need = processes * (IDLE_WORKER_MIB + runs * MIB_PER_RUN)
    request = _mib(container["resources"]["requests"]["memory"])
    limit = _mib(container["resources"]["limits"]["memory"])
    assert need <= request and 2 * need <= limit, (need, request, limit)


def test_the_pool_size_reaches_every_container(render: Any) -> None:
    for sets, expected in [("", "10"), ("database.poolSize=25", "25")]:
        for doc in [d for d in render(sets) if d["kind"] in WORKLOADS]:
            for container in _containers(doc):
                assert _env(container)["FLEET_DATABASE_POOL_SIZE"] == expected, sets


@pytest.mark.parametrize("sets", [*VALUES.values()], ids=[*VALUES.keys()])
def test_every_container_gets_the_store_and_broker(render: Any, sets: str) -> None:
    workloads = [d for d in render(sets) if d["kind"] in WORKLOADS]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in workloads}
    expected = {"api", "worker", "beat", "migrate"} | ({"events"} if sets == EVENTS else set())
    assert components == expected
    for doc in workloads:
        for container in _containers(doc):
            names = {e["name"] for e in container["env"]}
            where = f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            assert {"FLEET_DATABASE_URL", "FLEET_REDIS_URL", "FLEET_LOG_FORMAT"} <= names, where
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_log_format_reaches_every_container(render: Any) -> None:
    for doc in [d for d in render("settings.logFormat=json") if d["kind"] in WORKLOADS]:
        for container in _containers(doc):
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["FLEET_LOG_FORMAT"] == "json", doc["metadata"]["name"]
            assert env["FLEET_CELERY_EVENTS"] == "true", doc["metadata"]["name"]


def test_autoscaling_is_hpa_by_default_and_keda_when_enabled(render: Any) -> None:
    default = render()
    assert _component(default, "HorizontalPodAutoscaler", "worker")
    assert not [d for d in default if d["kind"] == "ScaledObject"]

    keda = render(KEDA)
    scaled = _component(keda, "ScaledObject", "worker")
    worker = _component(keda, "Deployment", "worker")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == "fleet"
    assert trigger["metadata"]["address"] == "redis:6379"
    # KEDA reads trigger metadata as strings only.
    assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger["metadata"]
    assert not [d for d in keda if d["kind"] == "HorizontalPodAutoscaler"]
    assert "replicas" not in worker["spec"], "an autoscaler owns the replica count"


def test_keda_password_comes_through_a_trigger_authentication(render: Any) -> None:
    docs = render(KEDA, "worker.keda.redis.passwordSecret.name=redis-auth")
    auth = _component(docs, "TriggerAuthentication", "worker")
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": "redis-auth", "key": "redis-password"}
    ]
    scaled = _component(docs, "ScaledObject", "worker")
    assert scaled["spec"]["triggers"][0]["authenticationRef"] == {"name": auth["metadata"]["name"]}


def test_inline_secrets_exist_before_the_migration_hook(render: Any) -> None:
    assert not [d for d in render() if d["kind"] == "Secret"]
    docs = render(INLINE)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert set(secret["data"]) == {"database-url", "redis-url"}
    job = _component(docs, "Job", "migrate")
    weight = int(job["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < weight


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_pooler_mode_reaches_every_container_when_set(render: Any) -> None:
    for sets, expected in [("", None), (POOLER, "transaction"), ("database.pooler=none", "none")]:
        for doc in [d for d in render(sets) if d["kind"] in WORKLOADS]:
            for container in _containers(doc):
                env = _env(container)
                assert env.get("FLEET_DATABASE_POOLER") == expected, (sets, doc["metadata"]["name"])


def test_postgres_tls_reaches_every_container_with_its_files(render: Any) -> None:
    folder = "/etc/fleet/tls/postgres"
    for doc in [d for d in render(PG_TLS) if d["kind"] in WORKLOADS]:
        spec = doc["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "tls-postgres"]
        assert volume["secret"]["secretName"] == "pg-tls"
        assert {i["key"] for i in volume["secret"]["items"]} == {"ca.crt", "tls.crt", "tls.key"}
        for container in _containers(doc):
            env = _env(container)
            assert env["PGSSLMODE"] == "verify-full", doc["metadata"]["name"]
            assert env["PGSSLROOTCERT"] == f"{folder}/ca.crt"
            assert (env["PGSSLCERT"], env["PGSSLKEY"]) == (f"{folder}/tls.crt", f"{folder}/tls.key")
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert mounts["tls-postgres"] == {
                "name": "tls-postgres",
                "mountPath": folder,
                "readOnly": True,
            }
    for doc in [d for d in render("") if d["kind"] in WORKLOADS]:
        for container in _containers(doc):
            assert not {k for k in _env(container) if k.startswith("PGSSL")}
            assert "tls-postgres" not in {m["name"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("side", ["database", "redis"])
def test_a_client_certificate_needs_its_key(chart: helm.Chart, side: str) -> None:
    values = _values(f"{side}.tls.secretName=tls,{side}.tls.certKey=tls.crt")
    with pytest.raises(helm.HelmRenderError, match=rf"{side}.tls: certKey and keyKey go together"):
        chart.render(values, name="t", namespace="default")


def test_sentinels_and_redis_tls_reach_every_container(render: Any) -> None:
    for doc in [d for d in render(SENTINELS) if d["kind"] in WORKLOADS]:
        spec = doc["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "tls-redis"]
        assert volume["secret"]["secretName"] == "redis-tls"
        for container in _containers(doc):
            env = _env(container)
            assert env["FLEET_REDIS_SENTINELS"] == "s0:26379,s1:26379,s2:26379"
            assert env["FLEET_REDIS_SENTINEL_MASTER"] == "fleet"
            assert env["FLEET_REDIS_SENTINEL_PASSWORD"] == {
                "secretKeyRef": {"name": "sentinel", "key": "redis-sentinel-password"}
            }
            assert env["FLEET_REDIS_TLS_CA_FILE"] == "/etc/fleet/tls/redis/ca.crt"
            assert "FLEET_REDIS_TLS_CERT_FILE" not in env
            assert "/etc/fleet/tls/redis" in {m["mountPath"] for m in container["volumeMounts"]}
    for doc in [d for d in render("") if d["kind"] in WORKLOADS]:
        for container in _containers(doc):
            assert not {
                k for k in _env(container) if k.startswith(("FLEET_REDIS_S", "FLEET_REDIS_T"))
            }


def test_sentinels_need_the_master_name(chart: helm.Chart) -> None:
    values = _values("redis.sentinels={s0:26379}")
    with pytest.raises(helm.HelmRenderError, match=r"redis\.sentinelMaster is empty"):
        chart.render(values, name="t", namespace="default")


def test_migrations_url_goes_to_the_migration_hook_only(render: Any) -> None:
    for sets, ref in [
        ("", None),
        (POOLER, {"name": "fleet-env", "key": "migrate-database-url"}),
        (
            "database.existingSecret=env,redis.existingSecret=env,"
            "database.migrate.existingSecret=direct,database.migrate.existingSecretKey=url",
            {"name": "direct", "key": "url"},
        ),
        (f"{INLINE},database.migrate.url=postgresql+psycopg://u:p@db:5432/fleet", None),
    ]:
        docs = render(sets)
        for doc in [d for d in docs if d["kind"] in WORKLOADS]:
            (container,) = _containers(doc)
            got = _env(container).get("FLEET_MIGRATE_DATABASE_URL")
            if doc["kind"] != "Job":
                assert got is None, (sets, doc["metadata"]["name"])
            elif ref is not None:
                assert got == {"secretKeyRef": ref}, sets
            elif "migrate.url" in sets:  # inline: in the chart's Secret, made before the hook
                (secret,) = [d for d in docs if d["kind"] == "Secret"]
                name = secret["metadata"]["name"]
                assert got == {"secretKeyRef": {"name": name, "key": "migrate-database-url"}}
                assert set(secret["data"]) == {"database-url", "migrate-database-url", "redis-url"}
            else:
                assert got is None, sets


def test_an_inline_migrations_url_needs_the_other_urls_too(chart: helm.Chart) -> None:
    values = _values("database.migrate.url=postgresql+psycopg://u:p@db:5432/fleet")
    with pytest.raises(helm.HelmRenderError, match=r"database\.url is empty"):
        chart.render(values, name="t", namespace="default")


# -- values.schema.json -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        ("worker.replicas=two", "'/worker/replicas': got string, want integer"),
        ("settings.logLevel=LOUD", "/settings/logLevel"),
        ("settings.logFormat=xml", "/settings/logFormat"),
        ("settings.celeryEvents=maybe", "/settings/celeryEvents"),
        ("settings.leaseTtl=soon", "/settings/leaseTtl"),
        ("api.service.type=Public", "/api/service/type"),
        ("events.replicas=-1", "/events/replicas"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("worker.autoscaling.targetCPUUtilizationPercentage=150", "/worker/autoscaling"),
        ("workers.replicas=2", "additional properties 'workers' not allowed"),
        ("worker.keda.enabled=true", "/worker/keda/redis/address"),
        ("worker.keda.enabled=true,worker.keda.redis.address=redis://r:6379", "/address"),
        ("database.existingSecret=Not_A_Name", "/database/existingSecret"),
        ("database.pooler=pgbouncer", "/database/pooler"),
        ("database.pooler=Transaction", "/database/pooler"),
        ("database.migrate.existingSecret=Not_A_Name", "/database/migrate/existingSecret"),
        ("database.migrateUrl=postgresql://db", "additional properties 'migrateUrl' not allowed"),
        ("database.tls.mode=verify", "/database/tls/mode"),
        ("redis.sentinels={redis://s0:26379}", "/redis/sentinels/0"),
        ("redis.tls.secretName=Not_A_Name", "/redis/tls/secretName"),
        ("database.tls.secretName=Not_A_Name", "/database/tls/secretName"),
        ("api.metricsPort=8080", "/api/metricsPort"),  # the API's own port
        ("api.metricsPort=70000", "/api/metricsPort"),
        ("worker.runs=0", "/worker/runs"),
        ("worker.runs=10001", "/worker/runs"),
        ("database.poolSize=1", "/database/poolSize"),
    ],
)
def test_bad_values_fail_rendering_naming_the_value(
    chart: helm.Chart, sets: str, named: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.render(_values(sets), name="t", namespace="default")
    assert named in str(caught.value)
    report = helm.lint(CHART, _values(sets), strict=True)
    assert any(named in e for e in report["errors"]), report["errors"]


@pytest.mark.parametrize(
    "sets",
    [
        "settings.leaseTtl=1500ms,settings.sweepInterval=2,settings.drainBudget=1.5m",
        "settings.logFormat=json,settings.logLevel=DEBUG",
        "tmpVolume.sizeLimit=1Gi,worker.resources.limits.cpu=2",
        "config.existingConfigMap=my-config,config.existingConfigMapFiles={agents/a.toml}",
        "database.pooler=session",
        "database.pooler=none,database.migrate.existingSecret=direct",
    ],
)
def test_good_values_render(render: Any, sets: str) -> None:
    assert render(sets)


def _schema_objects(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _schema_objects(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    return schema


def _walk(values: Any, schema: dict[str, Any], defs: dict[str, Any], path: str) -> Iterator[str]:
    """Yield each value of values.yaml that its schema leaves loose (no type, enum or ref)."""
    node = _schema_objects(schema, defs)
    if not ({"type", "enum", "oneOf", "const"} & node.keys()):
        yield f"{path or '/'}: no type"
    if isinstance(values, dict) and "properties" in node:
        if node.get("additionalProperties") is not False:
            yield f"{path or '/'}: accepts unknown keys"
        optional = node is defs["resources"]  # requests, limits: each may be left out
        unset = {k for k, v in values.items() if v is None}  # null: "derived unless given"
        if not optional and set(node.get("required", ())) != set(values) - {"global"} - unset:
            yield f"{path or '/'}: required lists {sorted(node.get('required', ()))}"
        for key, value in values.items():
            if key not in node["properties"]:
                yield f"{path}/{key}: not in the schema"
            else:
                yield from _walk(value, node["properties"][key], defs, f"{path}/{key}")


def test_the_schema_covers_every_value(chart: helm.Chart) -> None:
    schema = chart.schema
    assert schema is not None, "values.schema.json is missing"
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert list(_walk(defaults, schema, schema["$defs"], "")) == []
    chart.validate_schema(defaults)
