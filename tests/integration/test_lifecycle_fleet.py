"""Conversation lifecycle on real workers (PostgreSQL, Redis, Celery processes, `fleet serve`,
`fleet beat`): reset and delete during a running task are refused, or with cancel-running stop
the run, and the next run's provenance holds nothing of the old generation; the sweeper keeps a
conversation within its stored cap, newest messages kept, runs still in order."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.domain import lifecycle as rules
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

OPS_KEY = "ops-key-0123456789abcdef"
AGENTS = {
    "stepper": 'tools = ["wait"]\nnotes = true\n[model]\nprovider = "echo"\ndelay_ms = 100\n',
    "capped": 'model = "echo"\nstored_messages = 6\n',
}
DEPLOYMENTS = {"desk": 'agent = "stepper"\n', "capped": 'agent = "capped"\n'}
OLD = "remember the old secret plan"
NOTE = "old generation note"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    root = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    (root / "callers").mkdir()
    digest = hashlib.sha256(OPS_KEY.encode()).hexdigest()
    (root / "callers" / "ops.toml").write_text(
        f'source = "api"\noperator = true\ntenants = ["*"]\nkey_sha256 = "{digest}"\n'
    )
    return root


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(
        tmp_path, pg_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0, prune_interval=1.0
    )


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 30) -> Task:
    found = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )
    assert isinstance(found, Task)
    return found


def fleet_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_API_KEY"] = OPS_KEY
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", "--server", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def refused_in_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleet: "), done
    return lines[0]


def busy_conversation(rt: Runtime) -> tuple[uuid.UUID, Task, Task]:
    """A conversation with an old exchange, a note, a long run under way and a task behind it."""
    first = rt.dispatcher.submit("desk", OLD, key="k").task
    assert finished(rt, first.id).status == TaskStatus.SUCCEEDED
    rt.store.set_note(first.conversation_id, "plan", NOTE, datetime.now(UTC))
    long = rt.dispatcher.submit("desk", '/tool wait {"seconds": 60}', key="k").task
    wait_for(lambda: rt.store.journal(long.id), 30, what="the long tool to start")
    behind = rt.dispatcher.submit("desk", "queued behind", key="k").task
    return first.conversation_id, long, behind


def nothing_old_in(rt: Runtime, task: Task) -> dict:
    """The run's provenance (its frozen context) holds nothing of the old generation."""
    (run,) = rt.store.runs_of(task.id)
    context = run.context
    text = json.dumps(context)
    for old in (OLD, NOTE, "seconds", "queued behind"):
        assert old not in text, f"{old!r} leaked into the next run's context"
    assert context["injected"] == [] and context["dropped"] == []
    return context


def test_reset_during_a_run_is_refused_or_stops_it_and_nothing_old_leaks(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a")
    url = fleet.serve()
    conv, long, behind = busy_conversation(rt)
    auth = {"Authorization": f"Bearer {OPS_KEY}"}
    with httpx.Client(base_url=url, headers=auth, timeout=90) as http:
        refused = http.post("/v1/conversations/api:k/reset", params={"deployment": "desk"}, json={})
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert "cancelRunning" in refused.json()["detail"]
        line = refused_in_one_line(fleet_cli(url, "conversations", "reset", "api:k", "-d", "desk"))
        assert "--cancel-running" in line
        refused_in_one_line(fleet_cli(url, "conversations", "delete", "api:k", "-d", "desk"))
        assert rt.store.get_task(long.id).status == TaskStatus.RUNNING  # refusals changed nothing
        assert rt.dispatcher.lifecycle.show("desk", "k").generation == 0

        asked = time.monotonic()
        done = http.post(
            "/v1/conversations/api:k/reset",
            params={"deployment": "desk"},
            json={"cancelRunning": True},
        )
        assert done.status_code == 200, done.text
        assert time.monotonic() - asked < 30, "the run should stop at its next step boundary"
        assert done.json()["generation"] == 1 and done.json()["notesRemoved"] == 1
        stopped = rt.store.get_task(long.id)
        assert stopped.status == TaskStatus.CANCELLED
        left = rt.store.get_task(behind.id)
        assert (left.status, left.error) == (TaskStatus.CANCELLED, rules.RESET_REASON)

    fresh = rt.dispatcher.submit("desk", "a clean start", key="k").task
    ran = finished(rt, fresh.id)
    assert ran.reply == "echo: a clean start [history: 0]"
    context = nothing_old_in(rt, ran)
    assert context.get("notes") in (None, [], "")
    assert [m.content for m in rt.store.messages(conv)] == ["a clean start", ran.reply]


def test_delete_with_cancel_running_stops_the_run_and_the_key_starts_fresh(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a")
    url = fleet.serve()
    conv, _, _ = busy_conversation(rt)
    done = fleet_cli(url, "conversations", "delete", "api:k", "-d", "desk", "--cancel-running")
    assert done.returncode == 0, done
    assert "deleted: 3 tasks" in done.stdout
    wait_for(
        lambda: rt.store.lookup("desk", "api", "k", tenant="default") is None, 5, what="the delete"
    )
    again = rt.dispatcher.submit("desk", "a clean start", key="k")
    assert again.fresh_after_delete is not None
    assert again.task.conversation_id != conv
    ran = finished(rt, again.task.id)
    assert ran.reply == "echo: a clean start [history: 0]"
    nothing_old_in(rt, ran)
    assert rt.store.tombstone("desk", "api", "k", tenant="default") is not None


def test_the_sweeper_keeps_the_stored_cap_newest_first_and_runs_stay_in_order(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a")
    beat = fleet.beat()
    conv = None
    for i in range(5):  # 10 messages; the cap is 6
        task = rt.dispatcher.submit("capped", f"m{i}", key="c").task
        assert finished(rt, task.id).status == TaskStatus.SUCCEEDED
        conv = task.conversation_id
    assert conv is not None
    wait_for(
        lambda: rt.dispatcher.lifecycle.show("capped", "c").stored == 6,
        30,
        what="the sweeper to enforce the stored cap",
    )
    kept = rt.store.messages(conv, limit=100)
    assert [m.content for m in kept if m.role == "user"] == ["m2", "m3", "m4"]
    assert [m.id for m in kept] == sorted(m.id for m in kept)
    nxt = rt.dispatcher.submit("capped", "m5", key="c").task
    ran = finished(rt, nxt.id)
    assert ran.reply == "echo: m5 [history: 6]"
    (run,) = rt.store.runs_of(ran.id)
    assert [r["id"] for r in run.context["injected"]] == [m.id for m in kept]
    wait_for(
        lambda: rt.dispatcher.lifecycle.show("capped", "c").stored == 6,
        30,
        what="the cap again after the next run",
    )
    user = [m.content for m in rt.store.messages(conv) if m.role == "user"]
    assert user == ["m3", "m4", "m5"]
    beat.wait_log(r"pruned \d+")
