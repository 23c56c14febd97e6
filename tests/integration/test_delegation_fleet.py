"""Delegation on real workers (PostgreSQL, Redis, Celery processes): call_agent's result in the
caller's step, start_agent's result as a task of the caller's conversation, failures reported,
labels copied, the depth limit, and one delegated task per tool call when the caller's worker
is killed while it waits."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleet.domain import delegation as rules
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

TTL, SWEEP, DEPTH = 2.0, 1.0, 2
AGENTS = {
    "boss": 'model = "echo"\ndelegates = ["helper", "relay", "flaky", "slow"]\n',
    "worker": 'model = "echo"\n',
    # delegates to itself: each level's input holds the next level's tool call
    "relayer": 'model = "echo"\ndelegates = ["relay"]\n',
    # its input loops on a tool: the step limit fails the task
    "looper": 'model = "echo"\ntools = ["wait"]\nmax_steps = 2\n',
    "sleeper": 'model = "echo"\ntools = ["wait"]\n',
}
DEPLOYMENTS = {
    "lead": 'agent = "boss"\n',
    "helper": 'agent = "worker"\nlabels = { team = "helpers" }\n',
    "relay": 'agent = "relayer"\n',
    "flaky": 'agent = "looper"\n',
    "slow": 'agent = "sleeper"\n',
}


def tool(name: str, deployment: str, text: str) -> str:
    """The echo model's way to ask for a tool call: ``/tool NAME {json}``."""
    return f"/tool {name} " + json.dumps({"deployment": deployment, "input": text})


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=TTL,
        sweep_interval=SWEEP,
        max_delegation_depth=DEPTH,
    )


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 60) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )


def tool_outputs(rt: Runtime, task_id: uuid.UUID) -> list[object]:
    return [r.output for r in rt.store.journal(task_id) if r.kind == "tool"]


def tasks_of(rt: Runtime, deployment: str) -> list[Task]:
    return rt.store.list_tasks(TaskFilter(deployment=deployment, limit=100))


def test_call_agent_gives_the_result_in_the_callers_step_with_its_labels(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a", concurrency=2)
    lead = rt.dispatcher.submit(
        "lead", tool("call_agent", "helper", "count the boxes"), key="k", labels={"ticket": "7"}
    ).task
    done = finished(rt, lead.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert tool_outputs(rt, lead.id) == ["echo: count the boxes [history: 0]"]
    (child,) = tasks_of(rt, "helper")
    assert child.status == TaskStatus.SUCCEEDED
    assert child.scope == "agent:lead" and child.conversation_id != lead.conversation_id
    assert child.labels == {"team": "helpers", "ticket": "7"}  # the caller's labels copied
    assert child.idempotency_key == rules.call_key(str(lead.id), "call_1")
    record = rt.store.delegation(child.id)
    assert record is not None and record.mode == "call"
    assert record.chain == (rules.conversation_ref("lead", "api", "k"),)


def test_start_agent_returns_at_once_and_its_result_arrives_in_the_callers_conversation(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a", concurrency=2)
    lead = rt.dispatcher.submit(
        "lead", tool("start_agent", "helper", "file the report"), key="k", labels={"ticket": "8"}
    ).task
    done = finished(rt, lead.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    (said,) = tool_outputs(rt, lead.id)
    (child,) = tasks_of(rt, "helper")
    assert isinstance(said, str) and said.startswith(f"started task {child.id} on 'helper'")

    def reported() -> Task | None:
        back = [t for t in tasks_of(rt, "lead") if t.id != lead.id]
        return back[0] if back and back[0].status.terminal else None

    back = wait_for(reported, 60, what="the result to come back as a task")
    assert back.conversation_id == lead.conversation_id  # the caller's conversation
    assert back.idempotency_key == rules.result_key(str(child.id))
    assert back.labels == {"ticket": "8"}
    assert back.status == TaskStatus.SUCCEEDED, back.error
    text = back.input[0].text  # type: ignore[union-attr]
    assert text.startswith("[fleet] The task you started on 'helper'")
    assert text.endswith("Its reply:\necho: file the report [history: 0]")
    assert back.reply is not None and "[history: 2]" in back.reply  # it joined the history
    record = rt.store.delegation(child.id)
    assert record is not None and record.mode == "start" and record.reported
    assert len(tasks_of(rt, "lead")) == 2, "the result was reported more than once"


def test_signal_agent_reaches_a_started_task_at_its_next_boundary(
    rt: Runtime, fleet: Fleet
) -> None:
    """lead starts a slow task, then (its next task) signals it: the slow run reads the message
    after its wait, before its next model call, and answers it; it is delivered once."""
    fleet.worker("a", concurrency=2)
    lead = rt.dispatcher.submit(
        "lead", tool("start_agent", "slow", '/tool wait {"seconds": 8}'), key="k"
    ).task
    assert finished(rt, lead.id).status == TaskStatus.SUCCEEDED
    (child,) = tasks_of(rt, "slow")
    wait_for(lambda: rt.store.get_task(child.id).status == TaskStatus.RUNNING, 30, what="it to run")
    ask = "/tool signal_agent " + json.dumps({"task_id": str(child.id), "message": "also x"})
    signaller = rt.dispatcher.submit("lead", ask, key="k").task
    assert finished(rt, signaller.id).status == TaskStatus.SUCCEEDED
    (said,) = tool_outputs(rt, signaller.id)
    assert isinstance(said, str) and said.startswith(f"delivered to the inbox of task {child.id}")
    done = finished(rt, child.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert done.reply is not None and done.reply.startswith("echo: also x")
    taken = [r.output for r in rt.store.journal(child.id) if r.kind == "inbox"]
    assert len(taken) == 1 and len(taken[0]) == 1  # type: ignore[arg-type]
    assert len(tasks_of(rt, "slow")) == 1  # delivered into the run, not requeued


def test_a_delegated_tasks_failure_is_reported_to_the_caller(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a", concurrency=2)
    failing = '/loop wait {"seconds": 0}'
    called = rt.dispatcher.submit("lead", tool("call_agent", "flaky", failing), key="c").task
    started = rt.dispatcher.submit("lead", tool("start_agent", "flaky", failing), key="s").task
    assert finished(rt, called.id).status == TaskStatus.SUCCEEDED
    (out,) = tool_outputs(rt, called.id)
    assert isinstance(out, str) and out.startswith("error: the task ")
    assert "on 'flaky' failed: step limit reached" in out
    assert finished(rt, started.id).status == TaskStatus.SUCCEEDED

    def reported() -> Task | None:
        back = [t for t in tasks_of(rt, "lead") if t.key == "s" and t.id != started.id]
        return back[0] if back and back[0].status.terminal else None

    back = wait_for(reported, 60, what="the failure to come back as a task")
    text = back.input[0].text  # type: ignore[union-attr]
    assert "(start_agent, task" in text and "failed: step limit reached" in text


def test_the_depth_limit_refuses_a_delegation_too_deep(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a", concurrency=4)  # three runs wait on each other at once
    innermost = tool("call_agent", "relay", "too deep")
    middle = tool("call_agent", "relay", innermost)
    lead = rt.dispatcher.submit("lead", tool("call_agent", "relay", middle), key="k").task
    assert finished(rt, lead.id, 90).status == TaskStatus.SUCCEEDED
    relays = sorted(tasks_of(rt, "relay"), key=lambda t: t.created_at)
    assert len(relays) == DEPTH, "a task past the depth limit was admitted"
    first, second = relays
    depth_of = {t.id: len(r.chain) for t in relays if (r := rt.store.delegation(t.id))}
    assert depth_of == {first.id: 1, second.id: 2}
    (refused,) = tool_outputs(rt, second.id)
    assert isinstance(refused, str)
    assert refused.startswith("error: delegation depth limit reached")
    assert tool_outputs(rt, first.id) == [second.reply]
    assert tool_outputs(rt, lead.id) == [first.reply]


def waiting_caller(rt: Runtime, fleet: Fleet, seconds: float) -> tuple[Task, Task]:
    """A sweeper and a worker; a caller whose call_agent waits for a task that runs for
    ``seconds``: (caller, delegated task), once the caller waits and the delegated task runs."""
    fleet.beat()
    fleet.worker("a", concurrency=1)
    wait = f'/tool wait {{"seconds": {seconds:g}}}'
    lead = rt.dispatcher.submit("lead", tool("call_agent", "slow", wait), key="k").task
    child = wait_for(lambda: tasks_of(rt, "slow"), 30, what="the delegated task")[0]
    wait_for(lambda: rt.store.get_task(child.id).status == TaskStatus.RUNNING, 30, what="it to run")
    return lead, child


def test_a_caller_waits_for_its_delegate_holding_no_worker(rt: Runtime, fleet: Fleet) -> None:
    """One worker process of concurrency 1 runs the delegated task while its caller waits: the
    caller holds neither the process nor a lease, and resumes from its journal."""
    lead, child = waiting_caller(rt, fleet, 2)
    caller = rt.store.get_task(lead.id)
    assert caller.status == TaskStatus.WAITING
    with rt.store.read() as conn:
        holder = conn.execute(select(s.tasks.c.worker).where(s.tasks.c.id == lead.id)).scalar()
    assert holder is None
    [wait] = rt.store.waits_of(lead.id, pending=True)
    assert (wait.kind, wait.target_task_id) == ("delegate", str(child.id))
    done = finished(rt, lead.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert tool_outputs(rt, lead.id) == [rt.store.get_task(child.id).reply]
    assert [(r.attempt, r.status) for r in rt.store.runs_of(lead.id)] == [
        (1, "waiting"),
        (2, "succeeded"),
    ]
    assert [w.status for w in rt.store.waits_of(lead.id)] == ["done"]


def test_workers_killed_while_a_caller_waits_leave_it_one_delegated_task(
    rt: Runtime, fleet: Fleet
) -> None:
    """Every worker is killed (SIGKILL) while the caller waits and its delegate runs: the
    delegate is recovered and retried, the caller resumes when it ends and gets the same task
    (one per tool call), never a second."""
    lead, child = waiting_caller(rt, fleet, 4)
    for proc in fleet.procs:
        if proc.name == "a":
            proc.signal(signal.SIGKILL)
            proc.popen.wait(10)
    fleet.worker("b", concurrency=1)
    done = finished(rt, lead.id, TTL + SWEEP + 60)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert [t.id for t in tasks_of(rt, "slow")] == [child.id], "a second task was delegated"
    kid = rt.store.get_task(child.id)
    assert kid.status == TaskStatus.SUCCEEDED and kid.attempts == 2, kid.error
    assert tool_outputs(rt, lead.id) == [kid.reply]
