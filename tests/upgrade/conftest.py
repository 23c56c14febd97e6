"""The two releases of an upgrade test on one fresh database and one Redis database of their own:
``old`` (the previous release, from its worktree and venv: ``tests.support.upgrade``) and
``new`` (this tree), with the same settings and config; ``reader`` reads the database as this
release does."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.domain.redaction import Redactor
from fleet.store import Store
from tests.conftest import write_config
from tests.support import upgrade
from tests.support.upgrade import Previous, Side

#: The folder of the tests' tools (``upgrade_tools``), the only one both releases import from.
TOOLS = Path(__file__).parent / "tools"
CLIENT_KEY = "upgrade-client-0123456789abcdef"
OPS_KEY = "upgrade-ops-0123456789abcdef"
AGENTS = {
    # the counted tool between two slow model steps
    "counter": 'tools = ["upgrade_tools:count"]\n[model]\nprovider = "echo"\ndelay_ms = 300\n',
    # the counted tool holds its run until the test lets go (a hand-back mid-run)
    "holder": 'tools = ["upgrade_tools:count_then_hold"]\n'
    '[model]\nprovider = "echo"\ndelay_ms = 300\n',
}
DEPLOYMENTS = {name: f'agent = "{name}"\n' for name in AGENTS}


@pytest.fixture(scope="session")
def previous() -> Previous:
    """The previous release, set up (or found cached): a clear failure when there is none."""
    try:
        return upgrade.set_up(upgrade.previous_release())
    except upgrade.UpgradeSetupError as exc:
        pytest.fail(f"upgrade test: {exc}", pytrace=False)


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "side-effects.txt"


@pytest.fixture
def settings_env(
    tmp_path: Path, empty_pg_url: str, redis_url: str, counter: Path
) -> dict[str, str]:
    """The ``FLEET_*`` settings both releases run with (a fresh, empty database)."""
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    (config / "callers").mkdir()
    for name, key, extra in (
        ("ops", OPS_KEY, 'operator = true\ntenants = ["*"]\n'),
        ("client", CLIENT_KEY, ""),
    ):
        digest = hashlib.sha256(key.encode()).hexdigest()
        (config / "callers" / f"{name}.toml").write_text(
            f'source = "api"\n{extra}key_sha256 = "{digest}"\n'
        )
    return {
        "PYTHONUNBUFFERED": "1",
        "FLEET_DATABASE_URL": empty_pg_url,
        "FLEET_REDIS_URL": redis_url,
        "FLEET_CONFIG_DIR": str(config),
        "FLEET_LOG_LEVEL": "INFO",
        "FLEET_LEASE_TTL": "3",
        "FLEET_SWEEP_INTERVAL": "1",
        "FLEET_REGISTRY_TTL": "3",
        "FLEET_SHUTDOWN_GRACE": "10",
        "FLEET_TEST_COUNTER": str(counter),
        **{k: v for k, v in os.environ.items() if k == "FLEET_REDIS_TLS_CA_FILE"},
    }


@pytest.fixture
def old(previous: Previous, settings_env: dict[str, str], tmp_path: Path) -> Iterator[Side]:
    """The previous release's processes: its venv's python, from its worktree, no PYTHONPATH but
    the tools' folder."""
    env = {
        **previous.env(),
        **settings_env,
        "FLEET_HOME": str(tmp_path / "old-home"),
        "PYTHONPATH": str(TOOLS),
    }
    side = Side("old", previous.python, previous.src, env, tmp_path)
    yield side
    side.stop_all()


@pytest.fixture
def new(settings_env: dict[str, str], tmp_path: Path) -> Iterator[Side]:
    """This release's processes: this python, from this tree."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    path = os.pathsep.join(p for p in (str(TOOLS), base.get("PYTHONPATH", "")) if p)
    env = {**base, **settings_env, "FLEET_HOME": str(tmp_path / "new-home"), "PYTHONPATH": path}
    root = upgrade.ROOT
    side = Side("new", Path(sys.executable), root, env, tmp_path)
    yield side
    side.stop_all()


@pytest.fixture
def reader(empty_pg_url: str) -> Iterator[Store]:
    """The database, read as this release reads it."""
    store = Store.open(empty_pg_url, Redactor(()))
    yield store
    store.dispose()
