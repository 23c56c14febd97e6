"""Scopes isolate: API, webhook and A2A callers each try to read and continue the others'
conversations, through every door, and are refused (403/404, or for an A2A contextId a
conversation of their own)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, InvalidParamsError, TaskNotFoundError

from fleet.domain.redaction import Redactor
from fleet.domain.values import Task
from fleet.store import Store, TaskFilter
from tests.conftest import POOLER
from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import A2A, caller_toml, reply_text, write_intake_config

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

KEYS = {"api": "k-api-" + "1" * 24, "hook": "k-hook-" + "2" * 24, "alice": "k-a2a-" + "3" * 24}
ENV = {
    "FLEET_TEST_KEY_API": KEYS["api"],
    "FLEET_TEST_KEY_HOOK": KEYS["hook"],
    "FLEET_TEST_KEY_ALICE": KEYS["alice"],
}
CALLERS = {
    "app": caller_toml("api", "FLEET_TEST_KEY_API"),
    "hook": caller_toml("webhook:inbox", "FLEET_TEST_KEY_HOOK"),
    "alice": caller_toml("a2a", "FLEET_TEST_KEY_ALICE"),
}
TRIGGERS = {
    "inbox": """
        deployment = "chat"
        input = "/text"
        conversation_key = { header = "X-Thread" }
    """
}
KEY = "shared"  # every source uses the same bare key
# (caller "app" is a tenant of its own: its API scope is api:app)
SCOPED = {"api": f"api:app:{KEY}", "hook": f"webhook:inbox:{KEY}", "alice": f"a2a:alice:{KEY}"}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture
def base(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[str]:
    config = write_intake_config(tmp_path / "config", triggers=TRIGGERS, callers=CALLERS)
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1", concurrency=2)
        yield fleet.serve(**ENV)
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()), pooler=POOLER)
    yield s
    s.dispose()


def finished(store: Store, task_id: str) -> Task:
    def done() -> Task | None:
        task = store.get_task(uuid.UUID(task_id))
        return task if task.status.terminal else None

    return wait_for(done, 60, what=f"task {task_id} to finish")


def api_submit(base: str, who: str, key: str, text: str) -> httpx.Response:
    body = {"deployment": "chat", "input": text, "conversationKey": key}
    return httpx.post(f"{base}/v1/tasks", json=body, headers=bearer(who))


def deliver(base: str, who: str, thread: str, text: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/triggers/inbox",
        json={"text": text},
        headers={**bearer(who), "X-Thread": thread},
    )


def a2a_send_raw(base: str, who: str, context_id: str) -> httpx.Response:
    message = {"role": "user", "messageId": uuid.uuid4().hex, "parts": [{"text": "x"}]}
    message["contextId"] = context_id
    return httpx.post(
        f"{base}/a2a/chat",
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        headers=bearer(who),
    )


@pytest.mark.core
def test_no_source_reads_or_continues_another_sources_conversation(base: str, store: Store) -> None:
    # Each source starts a conversation under the same bare key: three conversations.
    r = api_submit(base, "api", KEY, "from api")
    assert r.status_code == 202, r.text
    api_task = finished(store, r.json()["id"])
    r = deliver(base, "hook", KEY, "from hook")
    assert r.status_code == 202, r.text
    hook_task = finished(store, r.json()["id"])

    async def a2a_first() -> str:
        async with A2A(base, "chat", key=KEYS["alice"], version="1.0") as alice:
            task = await alice.send("from alice", context_id=KEY)
            return task.id

    a2a_task = finished(store, asyncio.run(a2a_first()))
    tasks = {"api": api_task, "hook": hook_task, "alice": a2a_task}
    assert {w: t.conversation for w, t in tasks.items()} == SCOPED
    assert {t.reply for t in tasks.values()} == {
        "echo: from api [history: 0]",
        "echo: from hook [history: 0]",
        "echo: from alice [history: 0]",
    }

    runs = {who: store.list_runs(t.id)[0].id for who, t in tasks.items()}

    # -- the API caller ------------------------------------------------------------------------
    for other in ("hook", "alice"):
        tid = tasks[other].id
        assert httpx.get(f"{base}/v1/tasks/{tid}", headers=bearer("api")).status_code == 404
        r = httpx.get(f"{base}/v1/tasks/{tid}/runs", headers=bearer("api"))
        assert r.status_code == 404, r.text
        r = httpx.get(f"{base}/v1/runs/{runs[other]}", headers=bearer("api"))
        assert r.status_code == 404, r.text
        r = httpx.post(f"{base}/v1/tasks/{tid}/cancel", headers=bearer("api"))
        assert r.status_code == 404
        assert api_submit(base, "api", SCOPED[other], "continue?").status_code == 403
        r = httpx.get(
            f"{base}/v1/conversations/{SCOPED[other]}/messages",
            params={"deployment": "chat"},
            headers=bearer("api"),
        )
        assert r.status_code == 403, r.text
        r = httpx.get(
            f"{base}/v1/tasks", params={"conversationKey": SCOPED[other]}, headers=bearer("api")
        )
        assert r.status_code == 403, r.text
        # an id prefix of another scope's task matches nothing (ListTasks?idPrefix=)
        r = httpx.get(f"{base}/v1/tasks", params={"idPrefix": str(tid)[:8]}, headers=bearer("api"))
        assert r.status_code == 200 and r.json()["tasks"] == [], r.text
    listed = httpx.get(f"{base}/v1/tasks", headers=bearer("api")).json()["tasks"]
    assert [t["id"] for t in listed] == [str(api_task.id)]
    mine = httpx.get(
        f"{base}/v1/tasks", params={"idPrefix": str(api_task.id)[:8]}, headers=bearer("api")
    )
    assert [t["id"] for t in mine.json()["tasks"]] == [str(api_task.id)], mine.text
    own = httpx.get(f"{base}/v1/tasks/{api_task.id}/runs", headers=bearer("api")).json()["runs"]
    assert [r["id"] for r in own] == [str(runs["api"])]
    assert httpx.get(f"{base}/v1/runs/{runs['api']}", headers=bearer("api")).status_code == 200
    assert deliver(base, "api", KEY, "as a hook?").status_code == 403
    assert a2a_send_raw(base, "api", KEY).status_code == 403

    # -- the webhook caller --------------------------------------------------------------------
    for other in ("api", "alice"):
        assert deliver(base, "hook", SCOPED[other], "continue?").status_code == 403
        r = httpx.get(f"{base}/v1/tasks/{tasks[other].id}", headers=bearer("hook"))
        assert r.status_code == 403, r.text  # a webhook key is not an API key at all
        r = httpx.get(f"{base}/v1/tasks/{tasks[other].id}/runs", headers=bearer("hook"))
        assert r.status_code == 403, r.text
        assert httpx.get(f"{base}/v1/runs/{runs[other]}", headers=bearer("hook")).status_code == 403
    assert api_submit(base, "hook", KEY, "as api?").status_code == 403
    assert a2a_send_raw(base, "hook", KEY).status_code == 403

    # -- the A2A caller ------------------------------------------------------------------------
    assert api_submit(base, "alice", KEY, "as api?").status_code == 403
    assert httpx.get(f"{base}/v1/tasks/{api_task.id}", headers=bearer("alice")).status_code == 403
    r = httpx.get(f"{base}/v1/tasks/{api_task.id}/runs", headers=bearer("alice"))
    assert r.status_code == 403, r.text
    assert httpx.get(f"{base}/v1/runs/{runs['api']}", headers=bearer("alice")).status_code == 403
    assert deliver(base, "alice", KEY, "as a hook?").status_code == 403

    async def a2a_tries() -> str:
        async with A2A(base, "chat", key=KEYS["alice"], version="1.0") as alice:
            for other in ("api", "hook"):
                with pytest.raises(TaskNotFoundError):
                    await alice.client.get_task(GetTaskRequest(id=str(tasks[other].id)))
                with pytest.raises(TaskNotFoundError):
                    await alice.client.cancel_task(CancelTaskRequest(id=str(tasks[other].id)))
                with pytest.raises(InvalidParamsError, match="belongs to scope"):
                    await alice.send("continue?", context_id=SCOPED[other])
            # The same bare contextId is alice's own conversation: it continues hers only.
            again = await alice.send("again", context_id=KEY)
            assert reply_text(again) == "echo: again [history: 2]"
            return again.id

    finished(store, asyncio.run(a2a_tries()))

    # Nothing reached another source's conversation: each still holds only its own tasks.
    for who, task in tasks.items():
        mine = [t for t in store_tasks(store) if t.conversation_id == task.conversation_id]
        assert {t.scope for t in mine} == {SCOPED[who].rsplit(":", 1)[0]}
        assert len(mine) == (2 if who == "alice" else 1), (who, mine)


def store_tasks(store: Store) -> list[Task]:
    return store.list_tasks(TaskFilter(limit=1000))
