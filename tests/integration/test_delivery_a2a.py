"""A2A push notifications with the a2a-sdk client against `fleet serve` and a real worker: the
config set with SendMessage or afterwards (set, get, list, delete), the task's final state
POSTed to the caller's URL with its token sent back, journaled like any delivery."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import A2A, caller_toml, row_counts, write_intake_config
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

ALICE = "alice-key-" + "a" * 24
BOB = "bob-key-" + "b" * 24
CALLER_TOKEN = "caller-chosen-token-1"


@pytest.fixture
def base(
    tmp_path: Path, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    monkeypatch.setenv("FLEET_TEST_ALICE", ALICE)
    monkeypatch.setenv("FLEET_TEST_BOB", BOB)
    config = write_intake_config(
        tmp_path / "config",
        # two A2A keys of one customer (tenant): a singleton's task is theirs to share
        callers={
            "alice": caller_toml("a2a", "FLEET_TEST_ALICE") + 'tenant = "acme"\n',
            "bob": caller_toml("a2a", "FLEET_TEST_BOB") + 'tenant = "acme"\n',
        },
    )
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1")
        yield fleet.serve()
        fleet.kill()  # the test is over: no graceful stop to wait for


def test_push_config_with_the_message_and_afterwards(base: str, receiver: Receiver) -> None:
    card = httpx.get(f"{base}/a2a/chat/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is True

    async def go() -> None:
        async with A2A(base, "chat", key=ALICE, version="1.0") as alice:
            msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hi")])
            request = SendMessageRequest(message=msg)
            request.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(url=f"{receiver.url}/ok/push", token=CALLER_TOKEN)
            )
            found = [r async for r in alice.client.send_message(request)]
            task = found[0].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED

            (got,) = wait_for(lambda: receiver.got("/ok/push"), 30, what="the push notification")
            assert got.headers["X-A2A-Notification-Token"] == CALLER_TOKEN
            assert got.body["task"]["id"] == task.id
            assert got.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

            # The protocol's get and list show the config, its id defaulting to the task's.
            listed = await alice.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [(c.id, c.url, c.token) for c in listed.configs] == [
                (task.id, f"{receiver.url}/ok/push", CALLER_TOKEN)
            ]

            # A config set after the task finished is delivered at once.
            later = TaskPushNotificationConfig(
                task_id=task.id, id="second", url=f"{receiver.url}/flaky/later", token="t2"
            )
            await alice.client.create_task_push_notification_config(later)
            got_later = wait_for(
                lambda: len(receiver.got("/flaky/later")) == 2 and receiver.got("/flaky/later"),
                30,
                what="the late config's notification, retried after a 500",
            )
            assert {r.headers["Idempotency-Key"] for r in got_later} == {
                got_later[0].headers["Idempotency-Key"]
            }
            one = await alice.client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="second")
            )
            assert one.url == f"{receiver.url}/flaky/later"
            await alice.client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="second")
            )
            listed = await alice.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == [task.id]

    asyncio.run(go())


def test_a_push_url_that_is_not_http_is_refused_without_echoing_it(base: str) -> None:
    async def go() -> None:
        async with A2A(base, "chat", key=ALICE, version="1.0") as alice:
            task = await alice.send("hi")
            bad = TaskPushNotificationConfig(
                task_id=task.id, url="ftp://user:hunter2hunter2@example.com/x"
            )
            with pytest.raises(Exception) as exc:
                await alice.client.create_task_push_notification_config(bad)
            assert "scheme must be http or https" in str(exc.value)
            assert "hunter2" not in str(exc.value)

    asyncio.run(go())


def test_on_a_singleton_a_push_config_is_its_callers_own_and_delivered(
    base: str, receiver: Receiver
) -> None:
    async def go() -> None:
        async with (
            A2A(base, "solo", key=ALICE, version="1.0") as alice,
            A2A(base, "solo", key=BOB, version="1.0") as bob,
        ):
            msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hi")])
            request = SendMessageRequest(message=msg)
            request.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(url=f"{receiver.url}/ok/solo", token=CALLER_TOKEN)
            )
            (sent,) = [r async for r in alice.client.send_message(request)]
            task = sent.task
            # The singleton's task is delivered to Alice's URL like any other.
            (got,) = wait_for(lambda: receiver.got("/ok/solo"), 30, what="the singleton's push")
            assert got.headers["X-A2A-Notification-Token"] == CALLER_TOKEN

            # Bob reads the shared task, but not Alice's config, token or credentials.
            listed = await bob.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert list(listed.configs) == []
            with pytest.raises(Exception, match="no push-notification config"):
                await bob.client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
                )
            with pytest.raises(Exception, match="no push-notification config"):
                await bob.client.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
                )
            # Nor overwrite it (same id): refused, Alice's stays as she set it.
            hijack = TaskPushNotificationConfig(task_id=task.id, url=f"{receiver.url}/ok/bob")
            with pytest.raises(Exception, match="set by another caller"):
                await bob.client.create_task_push_notification_config(hijack)
            mine = await alice.client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
            )
            assert (mine.url, mine.token) == (f"{receiver.url}/ok/solo", CALLER_TOKEN)

            # A config of his own (another id) is his alone, and delivered.
            own = TaskPushNotificationConfig(task_id=task.id, id="bobs", url=f"{receiver.url}/ok/b")
            await bob.client.create_task_push_notification_config(own)
            wait_for(lambda: receiver.got("/ok/b"), 30, what="Bob's own push")
            listed = await alice.client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [c.id for c in listed.configs] == [task.id]

    asyncio.run(go())


def test_a_refused_push_config_with_the_message_admits_no_task(base: str, pg_url: str) -> None:
    async def go() -> None:
        async with A2A(base, "chat", key=ALICE, version="1.0") as alice:
            msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hi")])
            request = SendMessageRequest(message=msg)
            request.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(url="ftp://example.com/push")
            )
            with pytest.raises(Exception, match="scheme must be http or https"):
                [r async for r in alice.client.send_message(request)]

    asyncio.run(go())
    assert row_counts(pg_url)["tasks"] == 0
