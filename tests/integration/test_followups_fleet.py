"""``schedule_followup`` with real workers, a real sweeper, PostgreSQL and Redis: the follow-up
holds nothing while it waits (the conversation takes other tasks meanwhile), is admitted into
its conversation once when due, and a retried call schedules nothing twice; at most ten are
pending a conversation."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fleet.domain import followups as rules
from fleet.domain.values import Task, TaskStatus
from fleet.errors import Conflict
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120)]

AGENTS = {"planner": 'model = "echo"\ntools = ["schedule_followup"]\n'}
DEPLOYMENTS = {"plans": 'agent = "planner"\n'}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0)


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 60) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )


def conversation_tasks(rt: Runtime) -> list[Task]:
    found = rt.store.list_tasks(TaskFilter(deployment="plans", limit=100))
    return sorted(found, key=lambda t: t.seq)


def test_a_followup_is_admitted_once_when_due_and_blocks_nothing_meanwhile(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.beat()
    fleet.worker("a", concurrency=1)
    ask = '/tool schedule_followup {"after": "3s", "input": "check the parcel"}'
    first = rt.dispatcher.submit("plans", ask, key="k").task
    done = finished(rt, first.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    [pending] = rt.store.followups_of(first.conversation_id)
    assert pending.status == "pending" and pending.input == "check the parcel"

    # the conversation is not blocked by it: a new task runs at once
    second = rt.dispatcher.submit("plans", "meanwhile", key="k").task
    assert finished(rt, second.id).status == TaskStatus.SUCCEEDED
    assert rt.store.followups_of(first.conversation_id)[0].status == "pending"

    # due: admitted into the same conversation, as its next task, once
    def admitted() -> list[Task]:
        return [t for t in conversation_tasks(rt) if t.labels.get(rules.LABEL) == pending.id]

    [followup] = wait_for(admitted, 30, what="the follow-up to be admitted")
    assert followup.conversation_id == first.conversation_id and followup.seq == 3
    assert finished(rt, followup.id).status == TaskStatus.SUCCEEDED
    assert followup.input[0].text == "check the parcel"  # type: ignore[union-attr]
    assert rt.store.followups_of(first.conversation_id)[0].status == "admitted"
    rt.dispatcher.sweep()  # another sweep finds nothing more to admit
    assert len(admitted()) == 1 and len(conversation_tasks(rt)) == 3


def test_a_retried_call_schedules_nothing_twice_and_ten_is_the_most_pending(rt: Runtime) -> None:
    task = rt.dispatcher.submit("plans", "hello", key="k").task
    now = rt.dispatcher.clock()
    due = now + timedelta(hours=1)
    one = rt.store.schedule_followup(task, "call_1", "a", due, now)
    again = rt.store.schedule_followup(task, "call_1", "a", due, now)
    assert again.id == one.id
    for i in range(2, rules.MAX_PENDING + 1):
        rt.store.schedule_followup(task, f"call_{i}", "x", due, now)
    with pytest.raises(Conflict, match="10 follow-ups pending already"):
        rt.store.schedule_followup(task, "call_11", "x", due, now)
    assert len(rt.store.followups_of(task.conversation_id)) == rules.MAX_PENDING
