"""Recovery does not wait behind a backlog: a killed worker's task is taken back on time.

Issue 8: with the sweep scheduled on the wake-up queue, a worker killed while conversations
queued up stayed `running` for ~40 s; the bound is lease TTL + sweep interval, whatever the queue.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from fleet.store import schema as s
from tests.conftest import write_config
from tests.integration.test_fleet import all_done, runs_by_conversation
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(300), pytest.mark.serial]

TTL, SWEEP = 2.0, 1.0
CONVERSATIONS, PER = 20, 4
#: What the issue asks: free again within lease TTL + sweep interval, plus a second.
BOUND_S = TTL + SWEEP + 1.0
#: Tasks still queued when the worker is killed: at 0.6 s a run on the two workers left, the
#: backlog outlasts the recovery bound several times over (a sweep queued behind it would be late).
BACKLOG = 60


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "config",
        agents={"paced": '[model]\nprovider = "echo"\ndelay_ms = [300, 900]\n'},
        deployments={"paced": 'agent = "paced"\n'},
    )


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=TTL, sweep_interval=SWEEP)


def counts(rt: Runtime) -> dict[str, int]:
    with rt.store.read() as conn:
        rows = conn.execute(select(s.tasks.c.status, func.count()).group_by(s.tasks.c.status)).all()
    return {str(status): int(n) for status, n in rows}


def running_holders(rt: Runtime) -> dict[uuid.UUID, tuple[int, int]]:
    """Running task → (holder pid, attempts)."""
    with rt.store.read() as conn:
        rows = conn.execute(
            select(s.tasks.c.id, s.tasks.c.worker, s.tasks.c.attempts).where(
                s.tasks.c.status == TaskStatus.RUNNING.value
            )
        ).all()
    return {r.id: (int(r.worker.rpartition(":")[2]), r.attempts) for r in rows if r.worker}


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def freeze_a_busy_worker(rt: Runtime, workers: list[Proc]) -> tuple[Proc, uuid.UUID, int] | None:
    """Stop (SIGSTOP) a worker that holds a running task; None if it was between tasks.

    Frozen, the worker cannot move on to its next task, so the one the store shows it
    holding is the one it holds when it is killed.
    """
    groups = {proc.pid: proc for proc in workers}
    for pid, _ in running_holders(rt).values():
        proc = groups.get(group_of(pid) or -1)
        if proc is None:
            continue
        proc.signal(signal.SIGSTOP)
        held = [(t, a) for t, (p, a) in running_holders(rt).items() if group_of(p) == proc.pid]
        if held:
            (task_id, attempts), *_ = held
            return proc, task_id, attempts
        proc.signal(signal.SIGCONT)
    return None


def test_a_killed_worker_is_recovered_on_time_behind_a_backlog(rt: Runtime, fleet: Fleet) -> None:
    fleet.beat()
    workers = [fleet.worker(f"w{i}") for i in range(3)]
    for n, c in itertools.product(range(PER), range(CONVERSATIONS)):
        rt.dispatcher.submit("paced", f"c{c} m{n}", key=f"conv-{c}")

    def backlogged() -> bool:
        now = counts(rt)
        return now.get("running", 0) == len(workers) and now.get("queued", 0) >= BACKLOG

    wait_for(backlogged, 60, interval=0.1, what=f"every worker busy, {BACKLOG}+ tasks queued")
    victim, task_id, attempts = wait_for(
        lambda: freeze_a_busy_worker(rt, workers), 30, what="a worker holding a running task"
    )
    stopped = time.monotonic()
    victim.signal(signal.SIGKILL)
    victim.popen.wait(10)
    queued = counts(rt).get("queued", 0)
    assert queued >= BACKLOG, f"only {queued} tasks queued at the kill"

    def left_running() -> bool:
        task = rt.store.get_task(task_id)
        return task.status != TaskStatus.RUNNING or task.attempts > attempts

    # Waits past the bound so a failure says how long it really took.
    wait_for(left_running, 120, interval=0.05, what="the killed worker's task to recover")
    took = time.monotonic() - stopped
    print(f"\nrecovered {took:.2f}s after the kill, {queued} tasks queued (bound {BOUND_S:g}s)")
    assert took <= BOUND_S, f"the task stayed running {took:.1f}s after its worker died"

    done = wait_for(
        lambda: all_done(rt, CONVERSATIONS * PER), 240, interval=0.5, what="all tasks to finish"
    )
    assert {t.status for t in done} == {TaskStatus.SUCCEEDED}
    for t in done:
        assert t.reply == f"echo: {t.input[0].text} [history: {min(2 * (t.seq - 1), 20)}]"  # type: ignore[union-attr]
    for runs in runs_by_conversation(rt).values():
        seqs = [seq for seq, _, _, st in runs if st == "succeeded"]
        assert seqs == list(range(1, PER + 1)), "a conversation ran out of seq order"
        for (_, _, end, _), (_, start, _, _) in itertools.pairwise(runs):
            assert end <= start, "two runs of one conversation overlapped"
    killed = [r.status for r in rt.store.runs_of(task_id)]
    assert killed[0] == "interrupted" and killed[-1] == "succeeded", killed
    assert len(rt.store.list_tasks(TaskFilter(limit=1000))) == CONVERSATIONS * PER
