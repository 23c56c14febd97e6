"""Tool approvals with real workers, PostgreSQL and Redis: a task waiting for a person holds no
worker (a worker of concurrency 1 runs other conversations meanwhile), its approval survives
the worker being killed (SIGKILL), and the approved call runs exactly once; a rejected or
expired one never runs; a kill during the approved call follows the journal's rule for unsafe
tools (the outcome is unknown).

A test tool appends a line to a file for every call, so the test counts side effects across
processes.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleet.domain.journal import UNKNOWN_RESULT
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TTL, SWEEP = 2.0, 1.0
AGENTS = {
    "refunder": """
        tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
        model = "echo"
    """,
    "hasty": """
        tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
        approval_timeout = "1s"
        model = "echo"
    """,
    "hanger": """
        tools = [{ tool = "tests.support.shop_tools:count_then_hang", approval = "required" }]
        model = "echo"
    """,
    "plain": 'model = "echo"\n',
}
DEPLOYMENTS = {name: f'agent = "{name}"\n' for name in AGENTS}


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
        test_counter=counter,
    )


def side_effects(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def waiting(rt: Runtime, task_id: uuid.UUID) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status == TaskStatus.WAITING and t,
        30,
        what="the task to wait for its approval",
    )


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 30) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what="the task to finish",
    )


def tool_outputs(rt: Runtime, task_id: uuid.UUID) -> list[Any]:
    with rt.store.read() as conn:
        return list(
            conn.execute(
                select(s.traces.c.output)
                .where(s.traces.c.task_id == task_id, s.traces.c.kind == "tool")
                .order_by(s.traces.c.id)
            ).scalars()
        )


def test_a_pending_approval_survives_a_kill_holds_no_worker_and_runs_once_when_approved(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    first = fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("hanger", '/tool count_then_hang {"seconds": 0}', key="k").task
    parked = waiting(rt, task.id)
    assert parked.status == TaskStatus.WAITING and parked.attempts == 1
    [approval] = rt.store.waits_of(task.id, pending=True)
    assert (approval.tool, approval.arguments, approval.status) == (
        "count_then_hang",
        {"seconds": 0},
        "pending",
    )
    assert side_effects(counter) == []

    # while it waits, the one worker process runs other conversations' tasks
    others = [rt.dispatcher.submit("plain", f"hello {i}", key=f"other-{i}").task for i in range(3)]
    for other in others:
        assert finished(rt, other.id).status == TaskStatus.SUCCEEDED
    assert rt.store.get_task(task.id).status == TaskStatus.WAITING

    # the approval is recorded while the only worker cannot start the call (frozen), then that
    # worker is killed: the approval is neither lost nor run twice by the worker that resumes
    first.signal(signal.SIGSTOP)
    decided = rt.dispatcher.waiting.decide(
        rt.store.get_task(task.id), uuid.UUID(approval.id), "approve", by="alice"
    )
    assert decided.status == "approved" and decided.decided_by == "alice"
    first.signal(signal.SIGKILL)  # the whole worker: main and pool processes
    first.popen.wait(10)
    assert side_effects(counter) == []
    fleet.worker("b", concurrency=1)

    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert len(side_effects(counter)) == 1
    assert rt.store.waits_of(task.id, pending=True) == []
    # each run is recorded: the one that parked, the one that resumed from its journal
    assert [r.status for r in rt.store.runs_of(task.id)] == ["waiting", "succeeded"]


def test_rejected_the_call_never_runs_and_the_model_is_told_who_and_why(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("refunder", "/tool count {}", key="k").task
    waiting(rt, task.id)
    [approval] = rt.store.waits_of(task.id, pending=True)
    rt.dispatcher.waiting.decide(
        rt.store.get_task(task.id),
        uuid.UUID(approval.id),
        "reject",
        by="bob",
        reason="no refunds on Sundays",
    )
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert side_effects(counter) == []
    [result] = tool_outputs(rt, task.id)
    assert "rejected by bob" in result and "<reason>no refunds on Sundays</reason>" in result


def test_an_approval_not_decided_in_time_expires_and_the_call_never_runs(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("hasty", "/tool count {}", key="k").task
    done = finished(rt, task.id)  # the sweeper finds it due at its deadline
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert side_effects(counter) == []
    [wait] = rt.store.waits_of(task.id)
    assert wait.status == "expired"
    [result] = tool_outputs(rt, task.id)
    assert "expired" in result


def test_a_kill_during_the_approved_call_reports_its_outcome_unknown(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    fleet.worker("a", concurrency=1)
    fleet.worker("b", concurrency=1)
    task = rt.dispatcher.submit("hanger", '/tool count_then_hang {"seconds": 30}', key="k").task
    waiting(rt, task.id)
    [approval] = rt.store.waits_of(task.id, pending=True)
    rt.dispatcher.waiting.decide(
        rt.store.get_task(task.id), uuid.UUID(approval.id), "approve", by="ops"
    )
    wait_for(lambda: len(side_effects(counter)) == 1, 30, what="the approved call to start")
    with rt.store.read() as conn:
        worker = conn.execute(select(s.tasks.c.worker).where(s.tasks.c.id == task.id)).scalar()
    os.kill(int(str(worker).rpartition(":")[2]), signal.SIGKILL)
    done = finished(rt, task.id, TTL + SWEEP + 30)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert len(side_effects(counter)) == 1, "an approved unsafe call in flight ran again"
    assert tool_outputs(rt, task.id)[-1] == UNKNOWN_RESULT
