"""start_agent results reported back, through the store on SQLite and PostgreSQL (in-process):
a result reaches the caller's conversation only as it was when the task was started (never a
reset or recreated one), and as a follow-up whatever the caller's queue mode (it never
interrupts the caller's run nor drops a queued task)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from fleet.config import Settings
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime, build
from fleet.store import Started, TaskFilter
from fleet.store import schema as s
from tests.conftest import write_config

AGENTS = {"boss": 'model = "echo"\ndelegates = ["helper"]\n', "worker": 'model = "echo"\n'}
DEPLOYMENTS = {
    "lead": 'agent = "boss"\n',
    "intr": 'agent = "boss"\n[conversations]\nqueue_mode = "interrupt"\n',
    "dropper": 'agent = "boss"\n[conversations]\nmax_queued = 1\non_full = "drop_oldest"\n',
    "helper": 'agent = "worker"\n',
}


@pytest.fixture
def rt(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    yield runtime
    runtime.close()


def start_child(rt: Runtime, dep: str = "lead") -> tuple[Task, Task]:
    """A ``dep`` task that starts a helper task (left queued); both."""
    ask = json.dumps({"deployment": "helper", "input": "do y"})
    adm = rt.dispatcher.submit(dep, f"/tool start_agent {ask}", key="k")
    rt.dispatcher.drain(adm.task.conversation_id)
    assert rt.store.get_task(adm.task.id).status == TaskStatus.SUCCEEDED
    (child,) = rt.store.list_tasks(TaskFilter(deployment="helper"))
    return rt.store.get_task(adm.task.id), child


def tasks_of(rt: Runtime, dep: str) -> list[Task]:
    return sorted(rt.store.list_tasks(TaskFilter(deployment=dep)), key=lambda t: t.seq)


def reported(rt: Runtime, child: Task) -> bool:
    record = rt.store.delegation(child.id)
    return record is not None and record.reported


def test_a_result_reaches_the_callers_conversation(rt: Runtime) -> None:
    _lead, child = start_child(rt)
    rt.dispatcher.drain(child.conversation_id)
    back = [t.input[0].text for t in tasks_of(rt, "lead")[1:]]  # type: ignore[union-attr]
    assert len(back) == 1 and back[0].endswith("Its reply:\necho: do y [history: 0]")
    assert reported(rt, child)


def test_a_result_for_a_reset_conversation_is_dropped(rt: Runtime) -> None:
    lead, child = start_child(rt)
    rt.dispatcher.lifecycle.reset("lead", "k")
    rt.dispatcher.drain(child.conversation_id)
    assert [t.id for t in tasks_of(rt, "lead")] == [lead.id]  # nothing in the new generation
    assert reported(rt, child)  # and the sweeper does not try again


def test_a_result_for_a_deleted_conversation_creates_nothing(rt: Runtime) -> None:
    _lead, child = start_child(rt)
    rt.dispatcher.lifecycle.delete("lead", "k", by="ops")
    rt.dispatcher.drain(child.conversation_id)
    assert tasks_of(rt, "lead") == []
    assert rt.store.lookup("lead", "api", "k", tenant="default") is None
    assert reported(rt, child)


def claim(rt: Runtime, task: Task) -> None:
    started = rt.store.start_next(
        task.conversation_id,
        "w",
        rt.dispatcher.clock(),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    assert isinstance(started, Started) and started.task.id == task.id


def test_a_result_does_not_interrupt_the_callers_run(rt: Runtime) -> None:
    """``intr`` asks a running run to stop for new input; a result reported back queues."""
    _lead, child = start_child(rt, "intr")
    running = rt.dispatcher.submit("intr", "a long one", key="k").task
    claim(rt, running)
    rt.dispatcher.drain(child.conversation_id)  # the child ends and reports
    assert reported(rt, child)
    assert not rt.store.cancel_requested(running.id)  # no interrupt asked of the run
    *_, back = tasks_of(rt, "intr")
    assert back.status == TaskStatus.QUEUED and "start_agent, task" in back.input[0].text  # type: ignore[union-attr]


def test_a_result_never_drops_a_queued_task(rt: Runtime) -> None:
    """``dropper`` cancels its oldest queued task to make room; a result waits for room."""
    lead, child = start_child(rt, "dropper")
    running = rt.dispatcher.submit("dropper", "a long one", key="k").task
    claim(rt, running)
    user = rt.dispatcher.submit("dropper", "the user's next", key="k").task  # the queue is full
    rt.dispatcher.drain(child.conversation_id)  # the child ends; its report finds no room
    assert rt.store.get_task(user.id).status == TaskStatus.QUEUED
    assert not reported(rt, child)
    assert [t.id for t in tasks_of(rt, "dropper")] == [lead.id, running.id, user.id]
    rt.store.cancel(user.id, rt.dispatcher.clock())  # room: the sweeper reports it now
    rt.dispatcher.sweep()
    assert reported(rt, child)
    *_, back = tasks_of(rt, "dropper")
    assert back.status == TaskStatus.QUEUED and "start_agent, task" in back.input[0].text  # type: ignore[union-attr]


def test_old_records_without_a_conversation_id_still_report(rt: Runtime) -> None:
    """A record written before the conversation id was kept reports as long as the
    conversation is there."""
    lead, child = start_child(rt)
    with rt.store.tx() as conn:
        conn.execute(
            update(s.delegations)
            .where(s.delegations.c.task_id == child.id)
            .values(report_to={"deployment": "lead", "scope": "api", "key": "k", "labels": {}})
        )
    rt.dispatcher.drain(child.conversation_id)
    assert [t.id for t in tasks_of(rt, "lead")][:1] == [lead.id]
    assert len(tasks_of(rt, "lead")) == 2 and reported(rt, child)
