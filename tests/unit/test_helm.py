"""The Helm chart renders what operations rely on: sweepers, a migration hook, graceful workers.

Needs the `helm` binary and PyYAML: a missing one skips locally and fails under CI=true.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest

CHART = Path(__file__).resolve().parents[2] / "helm" / "fleet"
KEDA = ("--set", "worker.keda.enabled=true", "--set", "worker.keda.redis.address=redis:6379")
INLINE = ("--set", "database.url=postgresql+psycopg://u:p@db/fleet", "--set", "redis.url=redis://r")
WORKLOADS = {"Deployment", "Job"}


def _missing(what: str) -> NoReturn:
    reason = f"{what} is not installed"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, but CI=true needs it")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def helm() -> str:
    path = shutil.which("helm")
    if path is None:
        _missing("the helm binary")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def yaml() -> Any:
    try:
        import yaml
    except ImportError:
        _missing("PyYAML")
    return yaml


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def render(helm: str, yaml: Any) -> Any:
    def _render(*args: str) -> list[dict[str, Any]]:
        out = _helm(helm, "template", "t", str(CHART), *args)
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return _render


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


@pytest.mark.parametrize("args", [(), KEDA], ids=["default", "keda"])
def test_lint_is_clean(helm: str, args: tuple[str, ...]) -> None:
    out = _helm(helm, "lint", "--strict", str(CHART), *args)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("args", "replicas"),
    [((), 1), (KEDA, 1), (("--set", "beat.replicas=2"), 2)],
    ids=["default", "keda", "ha"],
)
def test_beat_runs_one_or_more_sweepers(render: Any, args: tuple[str, ...], replicas: int) -> None:
    beat = _component(render(*args, "--set", "worker.replicas=5"), "Deployment", "beat")
    assert beat["spec"]["replicas"] == replicas
    # Several sweepers are harmless (one sweeps per interval): no need to stop one first.
    assert beat["spec"].get("strategy", {}).get("type", "RollingUpdate") == "RollingUpdate"
    (container,) = beat["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["fleet", "beat"]


def test_migrate_job_is_a_pre_install_and_pre_upgrade_hook(render: Any) -> None:
    job = _component(render(), "Job", "migrate")
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert sorted(h.strip() for h in hooks) == ["pre-install", "pre-upgrade"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["fleet", "migrate"]


def test_worker_grace_period_comes_from_values(render: Any, yaml: Any) -> None:
    default = yaml.safe_load((CHART / "values.yaml").read_text())["worker"]
    assert default["terminationGracePeriodSeconds"] >= 120
    for args, expected in [
        ((), default["terminationGracePeriodSeconds"]),
        (("--set", "worker.terminationGracePeriodSeconds=900"), 900),
    ]:
        worker = _component(render(*args), "Deployment", "worker")
        assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == expected


@pytest.mark.parametrize("args", [(), KEDA, INLINE], ids=["default", "keda", "inline-secrets"])
def test_every_container_gets_the_store_and_broker(render: Any, args: tuple[str, ...]) -> None:
    workloads = [d for d in render(*args) if d["kind"] in WORKLOADS]
    components = {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in workloads}
    assert components == {"api", "worker", "beat", "migrate"}
    for doc in workloads:
        for container in _containers(doc):
            names = {e["name"] for e in container["env"]}
            where = f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            assert {"FLEET_DATABASE_URL", "FLEET_REDIS_URL"} <= names, where
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, where
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_autoscaling_is_hpa_by_default_and_keda_when_enabled(render: Any) -> None:
    default = render()
    assert _component(default, "HorizontalPodAutoscaler", "worker")
    assert not [d for d in default if d["kind"] == "ScaledObject"]

    keda = render(*KEDA)
    scaled = _component(keda, "ScaledObject", "worker")
    worker = _component(keda, "Deployment", "worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert scaled["spec"]["triggers"][0]["metadata"]["listName"] == "fleet"
    assert not [d for d in keda if d["kind"] == "HorizontalPodAutoscaler"]
    assert "replicas" not in worker["spec"], "an autoscaler owns the replica count"


def test_inline_secrets_exist_before_the_migration_hook(render: Any) -> None:
    assert not [d for d in render() if d["kind"] == "Secret"]
    docs = render(*INLINE)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert set(secret["data"]) == {"database-url", "redis-url"}
    job = _component(docs, "Job", "migrate")
    weight = int(job["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < weight
