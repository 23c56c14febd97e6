"""A2A for waiting tasks with the official a2a-sdk client against `fleet serve` and a real
worker: a task waiting for a tool approval is `input-required` (its status message names the
call and the approval), the caller's answer with a decision data part resumes it (approve: the
tool runs once; reject: never), a message without one is refused and changes nothing, and
another caller cannot decide it (the task does not exist for them); a task waiting for a
delegate is `working`.

A test tool appends a line to a file for every call, so the test counts side effects across
processes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    InvalidParamsError,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from fleet.domain.redaction import Redactor
from fleet.domain.values import TaskStatus
from fleet.store import Store, TaskFilter
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.integration.test_a2a import ALICE, BOB, CALLERS, ENV
from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import A2A, a2a_send_raw, reply_text, row_counts

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

ASKING = TaskState.TASK_STATE_INPUT_REQUIRED
WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED
REFUNDER = """
    model = "echo"
    tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
"""


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "side-effects.txt"


@pytest.fixture
def tenants() -> dict[str, str]:
    """``config/tenants``: file name → body (none: no quotas)."""
    return {}


@pytest.fixture
def base(
    tmp_path: Path, pg_url: str, redis_url: str, counter: Path, tenants: dict[str, str]
) -> Iterator[str]:
    config = write_config(
        tmp_path / "config",
        {**AGENTS, "refunder": REFUNDER, "boss": 'model = "echo"\ndelegates = ["tooly"]\n'},
        {**DEPLOYMENTS, "refunds": 'agent = "refunder"\n', "lead": 'agent = "boss"\n'},
    )
    callers = config / "callers"
    callers.mkdir()
    for name, body in CALLERS.items():
        (callers / f"{name}.toml").write_text(body)
    if tenants:
        (config / "tenants").mkdir()
        for name, body in tenants.items():
            (config / "tenants" / f"{name}.toml").write_text(body)
    with running_fleet(
        tmp_path,
        database_url=pg_url,
        redis_url=redis_url,
        config_dir=config,
        sweep_interval=1.0,
        test_counter=counter,
    ) as fleet:
        fleet.worker("w1", concurrency=1)
        yield fleet.serve(**ENV)
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()))
    yield s
    s.dispose()


def side_effects(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def message(
    *parts: str | dict[str, Any], task: Task | None = None, message_id: str | None = None
) -> SendMessageRequest:
    """A user message of text and data parts, answering ``task`` when given."""
    msg = Message(message_id=message_id or uuid.uuid4().hex, role=Role.ROLE_USER)
    for p in parts:
        if isinstance(p, str):
            msg.parts.append(Part(text=p))
        else:
            value = struct_pb2.Value()
            value.struct_value.update(p)
            msg.parts.append(Part(data=value))
    if task is not None:
        msg.task_id, msg.context_id = task.id, task.context_id
    return SendMessageRequest(message=msg)


async def send(a2a: A2A, request: SendMessageRequest) -> Task:
    found = [r async for r in a2a.client.send_message(request)]
    assert len(found) == 1 and found[0].HasField("task"), found
    return found[0].task


def asked(task: Task) -> list[dict[str, Any]]:
    """The approvals an input-required task's status message asks for (its data part)."""
    assert task.status.state == ASKING, TaskState.Name(task.status.state)
    text, data = MessageToDict(task.status.message)["parts"]
    approvals: list[dict[str, Any]] = data["data"]["pendingApprovals"]
    for a in approvals:
        assert f"{a['tool']}(" in text["text"] and a["id"] in text["text"], text
    return approvals


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_input_required_then_approved_by_a_data_part_and_completed(
    base: str, version: str, store: Store, counter: Path, pg_url: str
) -> None:
    async def go() -> str:
        async with (
            A2A(base, "refunds", key=ALICE, version=version) as alice,
            A2A(base, "refunds", key=BOB, version=version) as bob,
        ):
            # the blocking send answers once the task asks (input-required ends the wait)
            task = await send(alice, message("/tool count {}"))
            [approval] = asked(task)
            assert (approval["tool"], approval["arguments"], approval["status"]) == (
                "count",
                {},
                "pending",
            )
            got = await alice.client.get_task(GetTaskRequest(id=task.id))
            assert asked(got) == [approval]
            if version == "1.0":
                listed = await alice.client.list_tasks(ListTasksRequest(status=ASKING))
                assert [t.id for t in listed.tasks] == [task.id] and listed.total_size == 1
                working = await alice.client.list_tasks(ListTasksRequest(status=WORKING))
                assert not working.tasks and working.total_size == 0

            # another caller (another tenant): the task does not exist for them
            with pytest.raises(TaskNotFoundError):
                await bob.client.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await send(bob, message({"decision": "approve"}, task=task))

            # an answer without a decision: a clear error naming what is expected
            with pytest.raises(InvalidParamsError) as refused:
                await send(alice, message("yes, go ahead", task=task))
            said = str(refused.value)
            assert "input-required" in said and approval["id"] in said, said
            assert '"decision": "approve" | "reject"' in said, said
            with pytest.raises(InvalidParamsError, match="'approve' or 'reject'"):
                await send(alice, message({"decision": "yes"}, task=task))
            assert asked(await alice.client.get_task(GetTaskRequest(id=task.id))) == [approval]
            assert row_counts(pg_url)["tasks"] == 1  # nothing was admitted
            assert side_effects(counter) == []

            # the decision: the task resumes, the tool runs once, the blocking send ends with it
            decision = message(
                "approving",
                {"approval": approval["id"], "decision": "approve", "reason": "fine"},
                task=task,
            )
            done = await send(alice, decision)
            assert done.id == task.id and done.status.state == COMPLETED, MessageToDict(done)
            assert reply_text(done)
            # sent again (a retry): recorded already, nothing changes
            again = await send(alice, decision)
            assert again.id == task.id and again.status.state == COMPLETED
            return task.id

    task_id = asyncio.run(go())
    assert len(side_effects(counter)) == 1
    [wait] = store.waits_of(uuid.UUID(task_id))
    assert (wait.status, wait.decided_by, wait.reason) == ("approved", "a2a:alice", "fine")
    assert row_counts(pg_url)["tasks"] == 1


def test_rejected_by_a_data_part_the_call_never_runs(
    base: str, store: Store, counter: Path
) -> None:
    async def go() -> Task:
        async with A2A(base, "refunds", key=ALICE, version="1.0") as alice:
            task = await send(alice, message("/tool count {}"))
            asked(task)
            # no approval id: the task has exactly one pending
            answer = message({"decision": "reject", "reason": "not today"}, task=task)
            answer.configuration.return_immediately = True
            now = await send(alice, answer)
            assert now.status.state in (WORKING, COMPLETED), TaskState.Name(now.status.state)
            return now

    task = asyncio.run(go())
    done = wait_for(
        lambda: (t := store.get_task(uuid.UUID(task.id))).status.terminal and t,
        30,
        what="the rejected task to finish",
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert side_effects(counter) == []
    [wait] = store.waits_of(done.id)
    assert (wait.status, wait.decided_by, wait.reason) == ("rejected", "a2a:alice", "not today")


def test_an_input_required_task_is_cancelled_with_its_approval(
    base: str, store: Store, counter: Path
) -> None:
    async def go() -> Task:
        async with A2A(base, "refunds", key=ALICE, version="1.0") as alice:
            task = await send(alice, message("/tool count {}"))
            asked(task)
            card = alice.card
            assert card is not None and "input-required" in card.skills[0].description
            return await alice.client.cancel_task(CancelTaskRequest(id=task.id))

    cancelled = asyncio.run(go())
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    [wait] = store.waits_of(uuid.UUID(cancelled.id))
    assert wait.status == "cancelled"
    assert side_effects(counter) == []


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_streams_stop_at_input_required_and_a_streamed_answer_follows_to_the_end(
    base: str, version: str, counter: Path
) -> None:
    async def go() -> tuple[list[StreamResponse], list[StreamResponse], list[StreamResponse]]:
        async with A2A(base, "refunds", key=ALICE, version=version, streaming=True) as alice:
            asking = [ev async for ev in alice.client.send_message(message("/tool count {}"))]
            task_id = asking[0].task.id
            # a resubscription to the asking task follows it while someone else decides
            follower = asyncio.create_task(_collect(alice, task_id))
            await asyncio.sleep(1.0)
            answer = message({"decision": "approve"})
            answer.message.task_id = task_id
            answer.message.context_id = asking[0].task.context_id
            answered = [ev async for ev in alice.client.send_message(answer)]
            followed = await asyncio.wait_for(follower, 60)
            return asking, answered, followed

    asking, answered, followed = asyncio.run(go())
    last = asking[-1]
    if last.HasField("task"):  # the snapshot already asked
        state, status_message = last.task.status.state, last.task.status.message
    else:
        state, status_message = last.status_update.status.state, last.status_update.status.message
    assert state == ASKING, [MessageToDict(e) for e in asking]
    assert "pendingApprovals" in MessageToDict(status_message)["parts"][1]["data"]
    assert answered[0].task.status.state in (WORKING, COMPLETED)
    assert answered[-1].status_update.status.state == COMPLETED, answered[-1]
    assert any(e.HasField("artifact_update") for e in answered)
    assert followed[0].task.status.state == ASKING
    assert followed[-1].status_update.status.state == COMPLETED, followed[-1]
    assert len(side_effects(counter)) == 1


async def _collect(a2a: A2A, task_id: str) -> list[StreamResponse]:
    return [ev async for ev in a2a.client.subscribe(SubscribeToTaskRequest(id=task_id))]


def test_a_task_waiting_for_a_delegate_is_working_and_takes_no_decision(
    base: str, store: Store
) -> None:
    delegated = json.dumps({"deployment": "tooly", "input": '/tool wait {"seconds": 4}'})

    async def go() -> str:
        async with A2A(base, "lead", key=ALICE, version="1.0") as alice:
            request = message(f"/tool call_agent {delegated}")
            request.configuration.return_immediately = True
            task = await send(alice, request)
            await asyncio.to_thread(
                wait_for,
                lambda: store.get_task(uuid.UUID(task.id)).status == TaskStatus.WAITING,
                30,
                what="the caller's task to wait for its delegate",
            )
            got = await alice.client.get_task(GetTaskRequest(id=task.id))
            # working, its message saying what it waits for (no approval asked of the caller)
            assert got.status.state == WORKING
            said = got.status.message.parts[0].text
            assert said.startswith("waiting for task ") and "approval" not in said
            assert MessageToDict(got.metadata)["fleet.status"] == "waiting"
            with pytest.raises(InvalidParamsError, match="has no approval to decide"):
                await send(alice, message({"decision": "approve"}, task=task))
            return task.id

    task_id = asyncio.run(go())
    done = wait_for(
        lambda: (t := store.get_task(uuid.UUID(task_id))).status.terminal and t,
        60,
        what="the caller's task to finish",
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert len(store.list_tasks(TaskFilter(deployment="lead"))) == 1  # the decision made none


@pytest.mark.parametrize("tenants", [{"alice": "max_queued_tasks = 1\n"}])
def test_a_full_queue_of_waiting_tasks_can_still_be_approved(
    base: str, counter: Path, tenants: dict[str, str]
) -> None:
    async def go() -> None:
        async with A2A(base, "refunds", key=ALICE, version="1.0") as alice:
            task = await send(alice, message("/tool count {}"))
            [approval] = asked(task)  # waiting: the tenant's one queued place is taken
            r = await asyncio.to_thread(a2a_send_raw, base, "refunds", ALICE, "another task")
            assert r.status_code == 429 and r.json()["quota"] == "max_queued_tasks", r.text
            answer = {"approval": approval["id"], "decision": "approve"}
            done = await send(alice, message(answer, task=task))
            assert done.id == task.id and done.status.state == COMPLETED, done

    asyncio.run(go())
    assert len(side_effects(counter)) == 1  # approved: the tool ran once
