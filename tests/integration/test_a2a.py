"""A2A with the official a2a-sdk client against `fleet serve` and real workers."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

from fleet.domain.redaction import Redactor
from fleet.domain.values import TaskStatus
from fleet.store import Store, TaskFilter
from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import A2A, caller_toml, reply_text, row_counts, write_intake_config

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

ALICE, BOB, API_KEY = "alice-key-" + "a" * 24, "bob-key-" + "b" * 24, "api-key-" + "c" * 24
ENV = {"FLEET_TEST_ALICE": ALICE, "FLEET_TEST_BOB": BOB, "FLEET_TEST_API": API_KEY}
CALLERS = {
    "alice": caller_toml("a2a", "FLEET_TEST_ALICE"),
    "bob": caller_toml("a2a", "FLEET_TEST_BOB"),
    "app": caller_toml("api", "FLEET_TEST_API"),
}
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture
def base(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[str]:
    config = write_intake_config(tmp_path / "config", callers=CALLERS)
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1", concurrency=2)
        yield fleet.serve(**ENV)
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()))
    yield s
    s.dispose()


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_context_id_continues_a_conversation_per_caller(base: str, version: str) -> None:
    async def go() -> None:
        async with (
            A2A(base, "chat", key=ALICE, version=version) as alice,
            A2A(base, "chat", key=BOB, version=version) as bob,
        ):
            first = await alice.send("hello")
            assert first.status.state == COMPLETED
            assert first.context_id, "a message without contextId gets one back"
            assert reply_text(first) == "echo: hello [history: 0]"
            assert first.status.message.parts[0].text == "echo: hello [history: 0]"

            second = await alice.send("again", context_id=first.context_id)
            assert second.context_id == first.context_id
            assert second.id != first.id
            assert reply_text(second) == "echo: again [history: 2]"  # joined the conversation

            # Bob uses Alice's contextId: his own, new conversation.
            other = await bob.send("intruder", context_id=first.context_id)
            assert other.context_id == first.context_id
            assert reply_text(other) == "echo: intruder [history: 0]"
            assert other.metadata["fleet.conversation"] == f"a2a:bob:{first.context_id}"
            assert second.metadata["fleet.conversation"] == f"a2a:alice:{first.context_id}"

            got = await alice.client.get_task(GetTaskRequest(id=second.id))
            assert got.status.state == COMPLETED
            assert reply_text(got) == "echo: again [history: 2]"
            # Bob cannot read Alice's task.
            with pytest.raises(TaskNotFoundError):
                await bob.client.get_task(GetTaskRequest(id=second.id))

        # A singleton deployment has one conversation per tenant, whatever contextId: alice
        # and bob are two tenants (each caller its own), so each has its own.
        async with (
            A2A(base, "solo", key=ALICE, version=version) as alice,
            A2A(base, "solo", key=BOB, version=version) as bob,
        ):
            one = await alice.send("one")
            two = await bob.send("two", context_id="mine")
            assert one.context_id == two.context_id == "singleton"
            assert reply_text(two) == "echo: two [history: 0]"
            three = await alice.send("three", context_id="other")
            assert reply_text(three) == "echo: three [history: 2]"
            with pytest.raises(TaskNotFoundError):
                await bob.client.get_task(GetTaskRequest(id=one.id))

    asyncio.run(go())


def test_message_id_is_the_idempotency_key_and_labels_arrive(
    base: str, pg_url: str, store: Store
) -> None:
    async def go() -> tuple[str, str]:
        async with A2A(base, "chat", key=ALICE, version="1.0") as alice:
            meta = {"fleet.labels": {"project": "apollo"}}
            a = await alice.send("once", message_id="m-1", metadata=meta)
            b = await alice.send("once", message_id="m-1", metadata=meta)
            return a.id, b.id

    first, again = asyncio.run(go())
    assert first == again
    assert row_counts(pg_url)["tasks"] == 1
    assert store.get_task(uuid.UUID(first)).labels == {"project": "apollo"}


def test_fleet_delivery_steers_one_message_into_the_running_task(base: str, store: Store) -> None:
    """``fleet.delivery = steer`` on a followup deployment: the message joins the running task
    (the answer is that task, whose reply answers it); the next message without it queues."""

    async def go() -> None:
        async with A2A(base, "tooly", key=ALICE, version="1.0") as alice:
            first = await alice.send('/tool wait {"seconds": 6}', return_immediately=True)
            wait_for(
                lambda: store.get_task(uuid.UUID(first.id)).status == TaskStatus.RUNNING,
                30,
                what="the first task to run",
            )
            steered = await alice.send(
                "btw",
                context_id=first.context_id,
                metadata={"fleet.delivery": "steer"},
                return_immediately=True,
            )
            assert steered.id == first.id  # into the running task, not a task of its own
            later = await alice.send("later", context_id=first.context_id, return_immediately=True)
            assert later.id != first.id  # the deployment's followup again

    asyncio.run(go())
    tasks = store.list_tasks(TaskFilter(deployment="tooly"))
    assert [t.seq for t in tasks] == [1, 2]  # "btw" made no task
    done = wait_for(
        lambda: (t := store.get_task(tasks[0].id)).status.terminal and t, 60, what="it to end"
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert done.reply is not None and done.reply.startswith("echo: btw"), done.reply


def test_cancel_and_list(base: str, store: Store) -> None:
    async def go() -> None:
        async with A2A(base, "sleepy", key=ALICE, version="1.0") as alice:
            running = await alice.send("slow one", return_immediately=True)
            queued = await alice.send(
                "behind it", context_id=running.context_id, return_immediately=True
            )
            assert queued.status.state == TaskState.TASK_STATE_SUBMITTED

            def started() -> bool:
                return store.get_task(uuid.UUID(running.id)).status == TaskStatus.RUNNING

            await asyncio.to_thread(wait_for, started, 30, what="the first task to run")
            working = await alice.client.get_task(GetTaskRequest(id=running.id))
            assert working.status.state == TaskState.TASK_STATE_WORKING

            # Queued: cancelled at once. Running: stops at its next step boundary.
            cancelled = await alice.client.cancel_task(CancelTaskRequest(id=queued.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            stopped = await alice.client.cancel_task(CancelTaskRequest(id=running.id))
            assert stopped.status.state == TaskState.TASK_STATE_CANCELED
            got = await alice.client.get_task(GetTaskRequest(id=running.id))
            assert got.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError, match="already finished"):
                await alice.client.cancel_task(CancelTaskRequest(id=running.id))

            listed = await alice.client.list_tasks(ListTasksRequest(context_id=running.context_id))
            assert [t.id for t in listed.tasks] == [queued.id, running.id]  # newest first
            # filtered and counted in the store: a page of one, the total beside it
            page = await alice.client.list_tasks(
                ListTasksRequest(status=TaskState.TASK_STATE_CANCELED, page_size=1)
            )
            assert [t.id for t in page.tasks] == [queued.id] and page.total_size == 2
            done = await alice.client.list_tasks(
                ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED)
            )
            assert not done.tasks and done.total_size == 0

        async with A2A(base, "sleepy", key=BOB, version="1.0") as bob:
            assert not (await bob.client.list_tasks(ListTasksRequest())).tasks
            with pytest.raises(TaskNotFoundError):
                await bob.client.cancel_task(CancelTaskRequest(id=running.id))

    asyncio.run(go())


def test_http_level_refusals_and_json_rpc_errors(base: str) -> None:
    url = f"{base}/a2a/chat"
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": {"role": "user", "messageId": "x", "parts": [{"text": "hi"}]}},
    }
    assert httpx.post(url, json=send).status_code == 401
    assert httpx.post(url, json=send, headers={"Authorization": "Bearer nope"}).status_code == 401
    r = httpx.post(url, json=send, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json"
    auth = {"Authorization": f"Bearer {ALICE}"}
    assert httpx.post(f"{base}/a2a/nope", json=send, headers=auth).status_code == 404
    assert httpx.get(f"{base}/a2a/nope/.well-known/agent-card.json").status_code == 404

    def rpc(body: object, **headers: str) -> dict[str, object]:
        # json.dumps, not httpx's encoder: it writes Infinity, which some clients send
        content = json.dumps(body)
        kind = {"Content-Type": "application/json"}
        r = httpx.post(url, content=content, headers={**auth, **kind, **headers})
        assert r.status_code == 200, r.text
        out: dict[str, object] = r.json()
        return out

    unknown = rpc({"jsonrpc": "2.0", "id": 2, "method": "tasks/nope", "params": {}})
    assert unknown["error"]["code"] == -32601  # type: ignore[index]
    missing = rpc({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": "zz"}})
    assert missing["error"]["code"] == -32001  # type: ignore[index]  # TaskNotFoundError
    assert "no task with id zz" in missing["error"]["message"]  # type: ignore[index]
    file_part = {
        **send,
        "params": {
            "message": {
                "role": "user",
                "messageId": "f",
                "parts": [{"kind": "file", "file": {"uri": "https://example.invalid/x.pdf"}}],
            }
        },
    }
    err = rpc(file_part)["error"]
    assert "file" in err["message"], err  # type: ignore[index]
    labels = {**send, "params": {**send["params"], "metadata": {"fleet.labels": {"k": 1}}}}  # type: ignore[dict-item]
    err = rpc(labels)["error"]
    assert "must be strings" in err["message"], err  # type: ignore[index]
    # JSON that Python reads but protobuf cannot carry: invalid params, not an internal error
    endless = {**send, "params": {**send["params"], "metadata": {"fleet.wait": float("inf")}}}  # type: ignore[dict-item]
    err = rpc(endless)["error"]
    assert err["code"] == -32602, err  # type: ignore[index]
    message = {**send["params"]["message"], "contextId": "   "}  # type: ignore[index]
    blank = rpc({**send, "params": {"message": message}})["error"]
    assert blank["code"] == -32602 and "only white space" in blank["message"], blank  # type: ignore[index]
    v1 = {"A2A-Version": "1.0"}
    for params, says in (
        ({"status": 99}, "not a task state"),
        ({"contextId": "a\u0000b"}, "control characters"),
        ({"contextId": "a2a:bob:x"}, "belongs to scope"),
        ({"contextId": "   "}, "only white space"),
    ):
        err = rpc({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": params}, **v1)
        assert err["error"]["code"] == -32602 and says in err["error"]["message"], err  # type: ignore[index]
    mine = rpc(
        {"jsonrpc": "2.0", "id": 10, "method": "ListTasks", "params": {"contextId": "a2a:alice:x"}},
        **v1,
    )
    assert "error" not in mine, mine  # a contextId with the caller's own scope is fine


def test_agent_card_describes_both_versions(base: str) -> None:
    card = httpx.get(f"{base}/a2a/chat/.well-known/agent-card.json").json()
    assert card["name"] == "chat"
    versions = {(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]}
    assert versions == {("JSONRPC", "1.0"), ("JSONRPC", "0.3")}
    assert all(i["url"] == f"{base}/a2a/chat" for i in card["supportedInterfaces"])
    assert card["url"] == f"{base}/a2a/chat"  # the v0.3 field, for older clients
    assert card["capabilities"]["streaming"] is True
    assert "bearer" in card["securitySchemes"]
    legacy = httpx.get(f"{base}/a2a/chat/.well-known/agent.json").json()
    assert legacy == card
