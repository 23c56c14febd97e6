"""A2A streaming with the official a2a-sdk client (`streaming=True`), protocol 1.0 and 0.3:
`message/stream` / SendStreamingMessage and `tasks/resubscribe` / SubscribeToTask."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from tests.integration.test_a2a import ALICE, BOB, CALLERS, ENV
from tests.support.fleet import running_fleet
from tests.support.intake import A2A, write_intake_config

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

SLOW = '/tool current_time {}\n/tool wait {"seconds": 1}'
WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED


@pytest.fixture
def base(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[str]:
    config = write_intake_config(tmp_path / "config", callers=CALLERS)
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1", concurrency=2)
        yield fleet.serve(**ENV)
        fleet.kill()  # the test is over: no graceful stop to wait for


def _request(text: str) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=msg)


def _summary(events: list[StreamResponse]) -> list[str]:
    out = []
    for ev in events:
        if ev.HasField("task"):
            out.append(f"task {TaskState.Name(ev.task.status.state)}")
        elif ev.HasField("status_update"):
            meta = MessageToDict(ev.status_update.metadata)
            what = meta.get("fleet.event", "?")
            if what in ("step", "inbox"):
                what += " " + meta["fleet.data"]["name"]
            out.append(f"{TaskState.Name(ev.status_update.status.state)} {what}")
        elif ev.HasField("artifact_update"):
            out.append(f"artifact {ev.artifact_update.artifact.name}")
    return out


WANT = [
    "TASK_STATE_WORKING status",
    "TASK_STATE_WORKING step echo",
    "TASK_STATE_WORKING step current_time",
    "TASK_STATE_WORKING step wait",
    "TASK_STATE_WORKING step echo",
    "artifact reply",
    "TASK_STATE_COMPLETED status",
]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_message_stream_sends_status_updates_and_the_reply(base: str, version: str) -> None:
    async def go() -> list[StreamResponse]:
        async with A2A(base, "tooly", key=ALICE, version=version, streaming=True) as alice:
            return [ev async for ev in alice.client.send_message(_request(SLOW))]

    events = asyncio.run(go())
    summary = _summary(events)
    assert summary[0] in ("task TASK_STATE_SUBMITTED", "task TASK_STATE_WORKING"), summary
    # what follows the first snapshot; a snapshot taken once it ran leaves out what it shows
    assert WANT[-len(summary) + 1 :] == summary[1:], summary
    assert "TASK_STATE_WORKING step wait" in summary, "steps arrive while it runs"
    artifact = next(e.artifact_update for e in events if e.HasField("artifact_update"))
    assert artifact.artifact.parts[0].text.startswith("echo: /tool current_time")
    final = events[-1].status_update
    assert final.status.state == COMPLETED
    assert final.status.message.parts[0].text == artifact.artifact.parts[0].text
    assert final.task_id == events[0].task.id and final.context_id == events[0].task.context_id


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_resubscribe_follows_a_running_task_to_its_end(base: str, version: str) -> None:
    async def go() -> tuple[list[StreamResponse], list[StreamResponse], Exception | None]:
        async with (
            A2A(base, "tooly", key=ALICE, version=version, streaming=True) as alice,
            A2A(base, "tooly", key=BOB, version=version, streaming=True) as bob,
        ):
            first = alice.client.send_message(_request('/tool wait {"seconds": 2}'))
            opened = await anext(first)  # the task, then leave the stream
            await first.aclose()
            task_id = opened.task.id
            request = SubscribeToTaskRequest(id=task_id)
            again = [ev async for ev in alice.client.subscribe(request)]
            done = [ev async for ev in alice.client.subscribe(request)]
            refused: Exception | None = None
            try:
                [ev async for ev in bob.client.subscribe(request)]
            except Exception as exc:
                refused = exc
            return again, done, refused

    again, done, refused = asyncio.run(go())
    summary = _summary(again)
    assert summary[0].startswith("task "), summary
    assert summary[-2:] == ["artifact reply", "TASK_STATE_COMPLETED status"], summary
    # a finished task: only its snapshot, completed, with the reply
    assert _summary(done) == ["task TASK_STATE_COMPLETED"]
    assert done[0].task.artifacts[0].parts[0].text.startswith("echo: /tool wait")
    # another caller's task does not exist for them
    assert refused is not None and "no task" in str(refused).lower(), refused


def test_the_card_says_streaming(base: str) -> None:
    card = httpx.get(f"{base}/a2a/chat/.well-known/agent-card.json").json()
    assert card["capabilities"]["streaming"] is True
