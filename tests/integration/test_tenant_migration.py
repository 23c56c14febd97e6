"""Upgrading a store kept before tenants: `fleet migrate` adds the columns (every row the
`default` tenant's) and then moves each conversation into its tenant by the config — an `api`
conversation only when all its tasks came from one tenant's callers — printing the counts; a
second run moves nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from fleet.domain.redaction import Redactor
from fleet.store import Store, db, migrate
from tests.conftest import write_config

pytestmark = pytest.mark.pg

REPO = Path(__file__).resolve().parents[2]
BEFORE = "0014_push_pending"


def _conversation(conn, scope: str, key: str, callers: list[str | None]) -> list[uuid.UUID]:
    conv = uuid.uuid4()
    conn.execute(
        text(
            "INSERT INTO conversations (id, deployment, scope, key, generation, last_seq, "
            "created_at, updated_at) VALUES (:id, 'chat', :scope, :key, 0, :n, now(), now())"
        ),
        {"id": conv, "scope": scope, "key": key, "n": len(callers)},
    )
    tasks = []
    for seq, caller in enumerate(callers, 1):
        task = uuid.uuid4()
        conn.execute(
            text(
                "INSERT INTO tasks (id, conversation_id, seq, generation, deployment, scope, "
                "conversation_key, status, input, submissions, input_bytes, not_before, labels, "
                "attempts, max_attempts, fence, cancel_requested, caller, created_at) VALUES "
                "(:id, :conv, :seq, 0, 'chat', :scope, :key, 'succeeded', '[]', 1, 0, now(), "
                "'{}', 1, 3, 1, false, :caller, now())"
            ),
            {"id": task, "conv": conv, "seq": seq, "scope": scope, "key": key, "caller": caller},
        )
        tasks.append(task)
    return tasks


def _legacy(engine: Engine) -> dict[str, list[uuid.UUID]]:
    """A store as it was before tenants: API conversations of one caller, of two, of the CLI;
    a webhook, an A2A and a delegated conversation; a singleton's."""
    with engine.begin() as conn:
        made = {
            "alpha": _conversation(conn, "api", "t-1", ["alpha", "alpha2"]),
            "mixed": _conversation(conn, "api", "t-2", ["alpha", "bravo"]),
            "cli": _conversation(conn, "api", "t-3", [None]),
            "gone": _conversation(conn, "api", "t-4", ["removed-caller"]),
            "shared": _conversation(conn, "api", "t-5", ["legacy"]),
            "hook": _conversation(conn, "webhook:gh", "pr-1", [None]),
            "a2a": _conversation(conn, "a2a:bob", "ctx", ["bob"]),
            "delegated": _conversation(conn, "agent:chat", "d-1", ["alpha"]),
            "solo": _conversation(conn, "deployment", "singleton", ["alpha", "bravo"]),
        }
        conn.execute(
            text(
                "INSERT INTO delegations (task_id, mode, parent_task_id, chain, created_at) "
                "VALUES (:t, 'call', :p, '[]', now())"
            ),
            {"t": made["delegated"][0], "p": made["alpha"][0]},
        )
        conn.execute(
            text(
                "INSERT INTO idempotency_keys (scope, key, task_id, created_at) "
                "VALUES ('api', 'delivery-1', :t, now())"
            ),
            {"t": made["alpha"][1]},
        )
    return made


def _config(root: Path) -> Path:
    write_config(root)
    (root / "callers").mkdir()
    files = {
        "alpha": 'source = "api"\ntenant = "acme"',
        "alpha2": 'source = "api"\ntenant = "acme"',
        "bravo": 'source = "api"',
        "legacy": 'source = "api"\nscope = "api"',
        "bob": 'source = "a2a"\ntenant = "bobco"',
    }
    for name, body in files.items():
        (root / "callers" / f"{name}.toml").write_text(f'{body}\nkey_sha256 = "{"c" * 64}"\n')
    (root / "triggers").mkdir()
    (root / "triggers" / "gh.toml").write_text('deployment = "chat"\npublic = true\n')
    return root


def test_fleet_migrate_moves_stored_conversations_into_their_tenants(
    tmp_path: Path, empty_pg_url: str
) -> None:
    engine = db.create(empty_pg_url)
    migrate.upgrade(engine, BEFORE)
    made = _legacy(engine)
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env |= {
        "FLEET_DATABASE_URL": empty_pg_url,
        "FLEET_HOME": str(tmp_path / "home"),
        "FLEET_CONFIG_DIR": str(_config(tmp_path / "config")),
    }

    def fleet_migrate(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "fleet.cli", "migrate", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc
        return proc.stdout

    out = fleet_migrate()
    assert f"migrated from {BEFORE} to {migrate.head()}" in out
    # alpha's (acme), the webhook's (gh), the A2A caller's (bobco), the delegated (acme)
    assert "4 conversation(s) moved into their tenant" in " ".join(out.split()), out
    # mixed callers, the CLI's, a caller no longer configured, a scope = "api" caller's
    assert "4 left in the shared 'api' scope" in " ".join(out.split()), out
    assert "1 other(s) left with tenant 'default'" in " ".join(out.split()), out  # singleton
    store = Store.open(empty_pg_url, Redactor(()))
    try:

        def where(name: str) -> tuple[str, str, str]:
            task = store.get_task(made[name][0])
            return task.tenant, task.scope, task.conversation

        assert where("alpha") == ("acme", "api:acme", "api:acme:t-1")
        assert where("mixed") == ("default", "api", "api:t-2")
        assert where("cli") == ("default", "api", "api:t-3")
        assert where("gone") == ("default", "api", "api:t-4")
        assert where("shared") == ("default", "api", "api:t-5")
        assert where("hook") == ("gh", "webhook:gh", "webhook:gh:pr-1")
        assert where("a2a") == ("bobco", "a2a:bob", "a2a:bob:ctx")
        assert where("delegated") == ("acme", "agent:chat", "agent:chat:d-1")
        assert where("solo")[0] == "default"
        # every task of a moved conversation moved with it, and its idempotency keys
        assert {store.get_task(t).tenant for t in made["alpha"]} == {"acme"}
        assert store.find_conversation("chat", "api:acme", "t-1", tenant="acme") is not None
        assert store.find_conversation("chat", "api", "t-1", tenant="default") is None
        with store.read() as conn:
            keys = conn.execute(text("SELECT tenant, scope FROM idempotency_keys")).all()
        assert [tuple(k) for k in keys] == [("acme", "api:acme")]
    finally:
        store.dispose()
    again = " ".join(fleet_migrate().split())
    assert "nothing to do" in again and "tenants:" not in again  # moves once, on the upgrade
    forced = " ".join(fleet_migrate("--tenants").split())
    assert "0 conversation(s) moved" in forced and "4 left in the shared" in forced
