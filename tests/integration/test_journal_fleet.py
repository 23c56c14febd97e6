"""The step journal with real workers killed (SIGKILL) mid-run: finished work is not redone.

A test tool appends a line to a file for every call, so the test counts side effects across
processes. Workers, the sweeper, PostgreSQL and Redis are real; the test kills the worker
process that holds the task at the worst moment and waits for the retry on another worker.
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
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TTL, SWEEP = 2.0, 1.0
AGENTS = {
    # the final model step takes 2.5 s: the window in which the test kills the worker
    "counter": """
        tools = ["tests.support.shop_tools:count"]
        [model]
        provider = "echo"
        delay_ms = 2500
    """,
    "hanger": """
        tools = ["tests.support.shop_tools:count_then_hang"]
        model = "echo"
    """,
    "waiter": """
        tools = ["wait"]
        model = "echo"
    """,
    "safe_hanger": """
        tools = [{ tool = "tests.support.shop_tools:count_then_hang", retry = "safe" }]
        model = "echo"
    """,
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
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
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


def holder_pid(rt: Runtime, task_id: uuid.UUID) -> int:
    with rt.store.read() as conn:
        worker = conn.execute(select(s.tasks.c.worker).where(s.tasks.c.id == task_id)).scalar()
    assert worker, "the task has no holder"
    return int(worker.rpartition(":")[2])


def tool_rows(rt: Runtime, task_id: uuid.UUID) -> list[tuple[int, str, bool, object]]:
    with rt.store.read() as conn:
        found = conn.execute(
            select(s.traces.c.step, s.traces.c.status, s.traces.c.replayed, s.traces.c.output)
            .where(s.traces.c.task_id == task_id, s.traces.c.kind == "tool")
            .order_by(s.traces.c.id)
        ).all()
    return [tuple(r) for r in found]  # type: ignore[misc]


def kill_holder_and_wait_for_the_retry(rt: Runtime, task_id: uuid.UUID) -> None:
    os.kill(holder_pid(rt, task_id), signal.SIGKILL)
    done = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        TTL + SWEEP + 30,
        what="the retried task to finish",
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert done.attempts == 2


def runs_and_steps(rt: Runtime, task_id: uuid.UUID) -> list[tuple[int, str, list[tuple]]]:
    runs = rt.store.runs_of(task_id)
    with rt.store.read() as conn:
        found = conn.execute(
            select(
                s.traces.c.run_id,
                s.traces.c.step,
                s.traces.c.kind,
                s.traces.c.status,
                s.traces.c.replayed,
            ).order_by(s.traces.c.step)
        ).all()
    return [(r.attempt, r.status, [tuple(x)[1:] for x in found if x.run_id == r.id]) for r in runs]


def test_a_tool_that_finished_before_the_crash_is_not_called_again(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit("counter", "/tool count {}", key="k").task
    # the tool ran and its result is journaled; the worker is in the final model step
    wait_for(
        lambda: [r[1] for r in tool_rows(rt, task.id)] == ["finished"],
        30,
        what="the tool's result in the journal",
    )
    assert len(side_effects(counter)) == 1
    kill_holder_and_wait_for_the_retry(rt, task.id)

    assert len(side_effects(counter)) == 1, "the finished tool call ran again after the crash"
    assert rt.store.get_task(task.id).reply == "echo: /tool count {} [history: 0]"
    assert runs_and_steps(rt, task.id) == [
        (1, "interrupted", [(1, "model", "finished", False), (2, "tool", "finished", False)]),
        (
            2,
            "succeeded",
            [
                (1, "model", "finished", True),
                (2, "tool", "finished", True),
                (3, "model", "finished", False),
            ],
        ),
    ]
    second = rt.store.runs_of(task.id)[1]
    assert second.usage["replayed_steps"] == 2


def test_an_unsafe_tool_in_flight_when_its_worker_dies_is_reported_unknown(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit("hanger", '/tool count_then_hang {"seconds": 30}', key="k").task
    wait_for(lambda: len(side_effects(counter)) == 1, 30, what="the tool to start")
    assert [r[1] for r in tool_rows(rt, task.id)] == ["started"]
    kill_holder_and_wait_for_the_retry(rt, task.id)

    assert len(side_effects(counter)) == 1, "an unsafe call in flight was run again"
    steps = runs_and_steps(rt, task.id)
    assert steps[0] == (
        1,
        "interrupted",
        [(1, "model", "finished", False), (2, "tool", "started", False)],
    )
    assert steps[1][2] == [
        (1, "model", "finished", True),
        (2, "tool", "finished", False),
        (3, "model", "finished", False),
    ]
    assert tool_rows(rt, task.id)[-1][3] == UNKNOWN_RESULT


def test_a_safe_tool_in_flight_when_its_worker_dies_runs_again(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    fleet.beat()
    fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit("safe_hanger", '/tool count_then_hang {"seconds": 4}', key="k").task
    wait_for(lambda: len(side_effects(counter)) == 1, 30, what="the tool to start")
    assert tool_rows(rt, task.id) == [], "a safe call needs no journal entry before it runs"
    kill_holder_and_wait_for_the_retry(rt, task.id)
    assert len(side_effects(counter)) == 2
    assert tool_rows(rt, task.id)[-1][1:] == ("finished", False, "hung up")


def test_a_cancel_reaches_a_tool_running_on_a_worker(rt: Runtime, fleet: Fleet) -> None:
    import time

    fleet.worker("a")
    task = rt.dispatcher.submit("waiter", '/tool wait {"seconds": 20}', key="k").task
    wait_for(lambda: rt.store.journal(task.id), 30, what="the tool to start")
    time.sleep(1.0)  # the scenario: the tool has been waiting a while when the user cancels
    asked = time.monotonic()
    assert rt.dispatcher.cancel(task.id).effect == "requested"
    wait_for(
        lambda: rt.store.get_task(task.id).status == TaskStatus.CANCELLED,
        10,
        what="the cancel to reach the tool",
    )
    took = time.monotonic() - asked
    assert took < 3.0, f"the cancel took {took:.1f}s to reach the tool"
