"""Waiting without a worker, on real workers (PostgreSQL, Redis, Celery processes): a chain of
``call_agent`` three deep completes on one worker process of concurrency 1 (each caller waits
holding nothing); a steered message waits in a waiting task's inbox and is read when it
resumes; an interrupt rejects its pending approval and the run ends as an interrupted one
does; cancelling a waiting caller cancels the delegate it waited for; a ``pause`` holds no
worker and ends at its time (or early, at an interrupt)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TTL, SWEEP = 2.0, 1.0
AGENTS = {
    "boss": 'model = "echo"\ndelegates = ["relay", "helper", "slow"]\n',
    "relayer": 'model = "echo"\ndelegates = ["relay", "helper"]\n',
    "worker": 'model = "echo"\n',
    "sleeper": 'model = "echo"\ntools = ["wait"]\n',
    "napper": 'model = "echo"\ntools = ["pause"]\n',
    "refunder": """
        tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
        model = "echo"
    """,
}
DEPLOYMENTS = {
    "lead": 'agent = "boss"\n',
    "urgent": 'agent = "boss"\n[conversations]\nqueue_mode = "interrupt"\n',
    "relay": 'agent = "relayer"\n',
    "helper": 'agent = "worker"\n',
    "slow": 'agent = "sleeper"\n',
    "shop": 'agent = "refunder"\n[conversations]\nqueue_mode = "interrupt"\n',
    "steered": 'agent = "refunder"\n[conversations]\nqueue_mode = "steer"\n',
    "nap": 'agent = "napper"\n[conversations]\nqueue_mode = "interrupt"\n',
}


def tool(name: str, deployment: str, text: str) -> str:
    return f"/tool {name} " + json.dumps({"deployment": deployment, "input": text})


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "side-effects.txt"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(
    tmp_path: Path, pg_url: str, redis_url: str, config: Path, counter: Path
) -> dict[str, Any]:
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=TTL,
        sweep_interval=SWEEP,
        max_delegation_depth=4,
        test_counter=counter,
    )


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 60) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )


def status_is(rt: Runtime, task_id: uuid.UUID, status: TaskStatus) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status == status and t,
        30,
        what=f"task {task_id} to be {status.value}",
    )


def tasks_of(rt: Runtime, deployment: str) -> list[Task]:
    return rt.store.list_tasks(TaskFilter(deployment=deployment, limit=100))


def test_a_call_agent_chain_three_deep_completes_on_one_worker_of_concurrency_one(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.beat()
    fleet.worker("a", concurrency=1)
    innermost = tool("call_agent", "helper", "the answer")
    middle = tool("call_agent", "relay", innermost)
    lead = rt.dispatcher.submit("lead", tool("call_agent", "relay", middle), key="k").task
    done = finished(rt, lead.id, 90)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    relays = tasks_of(rt, "relay")
    (helper,) = tasks_of(rt, "helper")
    assert len(relays) == 2 and all(t.status == TaskStatus.SUCCEEDED for t in relays)
    assert helper.reply == "echo: the answer [history: 0]"
    # every caller waited without its worker: a run that parked, then one that resumed
    for caller in (lead, *relays):
        assert [r.status for r in rt.store.runs_of(caller.id)] == ["waiting", "succeeded"]


def test_a_steered_message_waits_in_the_inbox_of_a_waiting_task(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("steered", "/tool count {}", key="k").task
    status_is(rt, task.id, TaskStatus.WAITING)
    steered = rt.dispatcher.submit("steered", "also say thanks", key="k")
    assert steered.delivered_to == "run" and steered.task.id == task.id
    assert rt.store.get_task(task.id).status == TaskStatus.WAITING  # it does not wake it
    [approval] = rt.store.waits_of(task.id, pending=True)
    rt.dispatcher.waiting.decide(
        rt.store.get_task(task.id), uuid.UUID(approval.id), "approve", by="ops"
    )
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert done.reply is not None and done.reply.startswith("echo: also say thanks")
    assert len(counter.read_text().splitlines()) == 1


def test_an_interrupt_rejects_the_pending_approval_and_ends_the_run_as_interrupted(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("shop", "/tool count {}", key="k").task
    status_is(rt, task.id, TaskStatus.WAITING)
    newer = rt.dispatcher.submit("shop", "never mind", key="k")
    assert newer.interrupted == task.id
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUPERSEDED, done.error
    assert [w.status for w in rt.store.waits_of(task.id)] == ["interrupted"]
    assert not counter.exists()
    assert finished(rt, newer.task.id).status == TaskStatus.SUCCEEDED


def test_cancelling_a_waiting_caller_cancels_its_delegate(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a", concurrency=1)
    lead = rt.dispatcher.submit(
        "lead", tool("call_agent", "slow", '/tool wait {"seconds": 30}'), key="k"
    ).task
    status_is(rt, lead.id, TaskStatus.WAITING)
    child = wait_for(lambda: tasks_of(rt, "slow"), 30, what="the delegated task")[0]
    assert rt.dispatcher.cancel(lead.id).effect == "cancelled"
    assert rt.store.get_task(lead.id).status == TaskStatus.CANCELLED
    assert finished(rt, child.id).status == TaskStatus.CANCELLED
    assert [w.status for w in rt.store.waits_of(lead.id)] == ["cancelled"]


def test_an_interrupted_waiting_caller_cancels_its_delegate(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a", concurrency=2)  # the caller resumes while its delegate runs
    ask = tool("call_agent", "slow", '/tool wait {"seconds": 30}')
    lead = rt.dispatcher.submit("urgent", ask, key="k").task
    status_is(rt, lead.id, TaskStatus.WAITING)
    child = wait_for(lambda: tasks_of(rt, "slow"), 30, what="the delegated task")[0]
    newer = rt.dispatcher.submit("urgent", "never mind", key="k")
    assert newer.interrupted == lead.id
    assert finished(rt, lead.id).status == TaskStatus.SUPERSEDED
    assert finished(rt, child.id).status == TaskStatus.CANCELLED
    assert [w.status for w in rt.store.waits_of(lead.id)] == ["interrupted"]


def tool_results(rt: Runtime, task_id: uuid.UUID, name: str) -> list[Any]:
    return [
        r["output"]
        for r in rt.store.traces_of(task_id)
        if r["kind"] == "tool" and r["name"] == name and r["status"] != "started"
    ]


def test_a_pause_holds_no_worker_and_the_run_goes_on_at_its_time(rt: Runtime, fleet: Fleet) -> None:
    # no beat: a short pause's own wake-up resumes it (the sweeper is for long ones)
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("nap", '/tool pause {"duration": "3s"}', key="k").task
    status_is(rt, task.id, TaskStatus.WAITING)
    [wait] = rt.store.waits_of(task.id)
    assert (wait.kind, wait.tool, wait.status) == ("time", "pause", "pending")
    other = rt.dispatcher.submit("helper", "meanwhile", key="other").task
    helped = finished(rt, other.id)
    assert helped.status == TaskStatus.SUCCEEDED, helped.error
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    waited, resumed = rt.store.runs_of(task.id)
    assert (waited.status, resumed.status) == ("waiting", "succeeded")
    # the only worker process ran the other conversation's task while this one paused
    assert helped.finished_at is not None and helped.finished_at < resumed.started_at
    assert resumed.started_at >= wait.expires_at
    assert tool_results(rt, task.id, "pause") == ["paused 3s; the run goes on"]
    assert [w.status for w in rt.store.waits_of(task.id)] == ["expired"]


def test_an_interrupt_ends_a_pause_early(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("nap", '/tool pause {"duration": "1h"}', key="k").task
    status_is(rt, task.id, TaskStatus.WAITING)
    newer = rt.dispatcher.submit("nap", "never mind", key="k")
    assert newer.interrupted == task.id
    assert finished(rt, task.id).status == TaskStatus.SUPERSEDED
    assert [w.status for w in rt.store.waits_of(task.id)] == ["interrupted"]
    assert finished(rt, newer.task.id).status == TaskStatus.SUCCEEDED


@pytest.mark.parametrize("how", ["reset", "delete"])
def test_a_reset_or_delete_of_a_waiting_callers_conversation_cancels_its_delegate(
    rt: Runtime, fleet: Fleet, how: str
) -> None:
    fleet.worker("a", concurrency=1)
    ask = tool("call_agent", "slow", '/tool wait {"seconds": 30}')
    lead = rt.dispatcher.submit("lead", ask, key="k").task
    status_is(rt, lead.id, TaskStatus.WAITING)
    child = wait_for(lambda: tasks_of(rt, "slow"), 30, what="the delegated task")[0]
    if how == "reset":
        _, done = rt.dispatcher.lifecycle.reset("lead", "k")
        assert done.cancelled == (lead.id,)
        assert rt.store.get_task(lead.id).status == TaskStatus.CANCELLED
        assert [w.status for w in rt.store.waits_of(lead.id)] == ["cancelled"]
    else:
        rt.dispatcher.lifecycle.delete("lead", "k", by="ops")
    assert finished(rt, child.id).status == TaskStatus.CANCELLED
