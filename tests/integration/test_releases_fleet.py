"""Releases on real processes (PostgreSQL, Redis, Celery workers, beat, fleet serve): every
process registers itself with its release, runs record the release that ran them, and the
registry forgets a process that stopped or died; ``fleet migrate --contract`` is refused while a
process of an older release is registered."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import typer

from fleet.cli import ops
from fleet.config import Settings
from fleet.dispatch.registry import Membership, Registry
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, redis_client
from fleet.sdk.client import FleetClient
from fleet.version import __version__
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.pg, pytest.mark.redis, pytest.mark.timeout(180)]

OPS_KEY = "ops-key-0123456789abcdef"
PLAIN_KEY = "plain-key-0123456789abcdef"
BUILD = "build-a1"
AGENTS = {"slow": '[model]\nprovider = "echo"\ndelay_ms = 1500\n'}
DEPLOYMENTS = {"desk": 'agent = "slow"\n'}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    root = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    (root / "callers").mkdir()
    for name, key, extra in (
        ("ops", OPS_KEY, 'operator = true\ntenants = ["*"]\n'),
        ("plain", PLAIN_KEY, ""),
    ):
        digest = hashlib.sha256(key.encode()).hexdigest()
        (root / "callers" / f"{name}.toml").write_text(
            f'source = "api"\n{extra}key_sha256 = "{digest}"\n'
        )
    return root


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` run with: a short registry TTL, a build name for the processes."""
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=2.0,
        sweep_interval=1.0,
        registry_ttl=1.5,
        build=BUILD,
    )


def _cli(
    *args: str, key: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env={**base, "FLEET_API_KEY": key, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _roles(listing: dict[str, Any]) -> list[str]:
    return sorted(w["role"] for w in listing["workers"])


def test_processes_register_runs_name_their_release_and_the_dead_are_forgotten(
    rt: Runtime, fleet: Fleet, shared_settings: dict[str, Any]
) -> None:
    release = f"{__version__}+{BUILD}"
    worker = fleet.worker("a", concurrency=2)
    beat = fleet.beat()
    url = fleet.serve()
    registry = Registry(redis_client(rt.settings))
    wait_for(
        lambda: (
            _roles({"workers": [{"role": e.role} for e in registry.read()]})
            == ["api", "beat", "worker", "worker"]
        ),
        30,
        what="two pool processes, the beat and the API to register",
    )

    with FleetClient(url, PLAIN_KEY) as client:
        task_id = uuid.UUID(client.submit("desk", "hello", conversation_key="k1")["id"])
    busy = wait_for(
        lambda: [e for e in registry.read() if e.role == "worker" and e.runs_in_flight == 1],
        30,
        what="a worker entry to show its run in flight",
    )
    assert busy[0].free_slots == 0
    done = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t, 30, what="the task"
    )
    assert done.status == TaskStatus.SUCCEEDED
    runs = rt.store.runs_of(task_id)
    assert [r.release for r in runs] == [release]

    # Through the API (an operator key) and straight from Redis: the same processes.
    remote = _cli("--server", url, "workers", "ls", "--json", key=OPS_KEY)
    assert remote.returncode == 0, remote.stderr
    listing = json.loads(remote.stdout)
    assert _roles(listing) == ["api", "beat", "worker", "worker"]
    assert {w["release"] for w in listing["workers"]} == {release}
    assert listing["releases"] == [{"release": release, "processes": 4}]
    assert {w["pid"] for w in listing["workers"] if w["role"] == "beat"} == {beat.pid}
    local = _cli(
        "workers", "ls", "--json", key="", env={"FLEET_REDIS_URL": str(rt.settings.redis_url)}
    )
    assert local.returncode == 0, local.stderr
    assert _roles(json.loads(local.stdout)) == _roles(listing)
    shown = _cli("--server", url, "tasks", "show", str(task_id), key=PLAIN_KEY)
    assert shown.returncode == 0 and release in shown.stdout, shown.stdout + shown.stderr
    table = _cli("--server", url, "workers", "ls", key=OPS_KEY)
    assert release in table.stdout and "4 process(es)" in table.stdout

    refused = _cli("--server", url, "workers", "ls", key=PLAIN_KEY)
    assert refused.returncode == 2 and "not an operator" in refused.stderr

    # A beat killed outright: its entry is gone once its time is up; a worker stopped cleanly
    # removes its pool processes' entries as they end.
    beat.signal(signal.SIGKILL)
    worker.stop()
    wait_for(
        lambda: _roles({"workers": [{"role": e.role} for e in registry.read()]}) == ["api"],
        30,
        what="the dead beat's and the stopped worker's entries to go",
    )


def test_migrate_contract_is_refused_while_an_older_release_is_registered(
    redis_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    settings = Settings(home=tmp_path / "home", redis_url=redis_url, registry_ttl=30)
    registry = Registry(redis_client(settings))
    old = Membership(registry, "worker", ttl_s=30).entry()
    older = replace(old, release="0.2.0+old", schema="0020_releases")
    registry.put(older)
    try:
        with pytest.raises(typer.Exit) as exited:
            ops._refuse_contract_while_older_live(settings, ("0021_drop_something",))
        assert exited.value.exit_code == 2
        said = capsys.readouterr().err
        assert older.id in said and "0.2.0+old" in said and "0021_drop_something" in said
        # A contract step the registered release already knows breaks nothing: allowed.
        ops._refuse_contract_while_older_live(settings, ("0020_releases",))
    finally:
        registry.drop(older.id)
    ops._refuse_contract_while_older_live(settings, ("0021_drop_something",))
