"""Fair turns with real Celery worker processes on PostgreSQL and Redis: one tenant's flood
delays another's first task by about one run, loses nothing, keeps each conversation in order,
and survives a worker killed in the middle of it — with no sweeper running, so a lost wake-up
would show as a task that never finishes."""

from __future__ import annotations

import itertools
import signal
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, running_fleet, runtime_for, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240), pytest.mark.serial]

AGENTS = {"tick": '[model]\nprovider = "echo"\ndelay_ms = 100\n'}
DEPLOYMENTS = {"work": 'agent = "tick"\n'}
CALLERS = {"alpha": 'source = "api"\n', "bravo": 'source = "api"\n'}


def _config(root: Path) -> Path:
    write_config(root, agents=AGENTS, deployments=DEPLOYMENTS)
    (root / "callers").mkdir()
    for name, body in CALLERS.items():
        (root / "callers" / f"{name}.toml").write_text(f'{body}key_sha256 = "{"a" * 64}"\n')
    (root / "callers" / "bravo.toml").write_text(f'source = "api"\nkey_sha256 = "{"b" * 64}"\n')
    return root


@pytest.fixture
def fleet_rt(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[tuple[Fleet, Runtime]]:
    # No sweeper runs (no beat) and none would for an hour: only the wake-ups start work.
    settings = fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        _config(tmp_path / "config"),
        sweep_interval=3600.0,
        lease_ttl=2.0,
        turn_hold=2.0,
    )
    with runtime_for(settings) as rt, running_fleet(tmp_path, **settings) as fleet:
        yield fleet, rt


def flood(rt: Runtime, tasks: int, conversations: int) -> list[Task]:
    return [
        rt.dispatcher.submit(
            "work", f"a{i}", scope="api:alpha", key=f"c{i % conversations}", tenant="alpha"
        ).task
        for i in range(tasks)
    ]


def in_order(rt: Runtime, submitted: list[Task]) -> None:
    """Every task succeeded, each conversation's in seq order (one ran after another)."""
    by_conv: dict[uuid.UUID, list[Task]] = defaultdict(list)
    for t in submitted:
        task = rt.store.get_task(t.id)
        assert task.status == TaskStatus.SUCCEEDED, (task.id, task.status, task.error)
        by_conv[task.conversation_id].append(task)
    for tasks in by_conv.values():
        tasks.sort(key=lambda t: t.seq)
        for earlier, later in itertools.pairwise(tasks):
            assert earlier.finished_at is not None and later.started_at is not None
            assert earlier.finished_at <= later.started_at


def all_finished(rt: Runtime, count: int) -> bool:
    done = rt.store.list_tasks(TaskFilter(status=TaskStatus.SUCCEEDED, limit=10_000))
    return len(done) >= count


def test_another_tenants_task_starts_within_a_run_of_a_flood(fleet_rt) -> None:
    fleet, rt = fleet_rt
    fleet.worker("w1", concurrency=2)
    submitted = flood(rt, 300, 150)
    wait_for(lambda: all_finished(rt, 2), 30, what="the flood to start")
    other = rt.dispatcher.submit("work", "b", scope="api:bravo", key="b", tenant="bravo").task

    def started() -> Task | None:
        task = rt.store.get_task(other.id)
        return task if task.started_at is not None else None

    began = wait_for(started, 60, what="the other tenant's task to start")
    assert began.started_at is not None
    waited = (began.started_at - other.created_at).total_seconds()
    assert waited < 2.0, f"the other tenant's task waited {waited:.2f}s behind the flood"
    left = rt.store.count_tasks(TaskFilter(status=TaskStatus.QUEUED))
    assert left > 100  # it did not wait for the flood to drain: most of it was still queued
    wait_for(lambda: all_finished(rt, 301), 120, what="the flood to finish")
    in_order(rt, [*submitted, other])


def test_a_worker_killed_mid_flood_loses_no_wake_up(fleet_rt) -> None:
    fleet, rt = fleet_rt
    doomed = fleet.worker("w1", concurrency=2)
    fleet.worker("w2", concurrency=2)
    submitted = flood(rt, 200, 100)
    wait_for(lambda: all_finished(rt, 30), 60, what="the flood to get going")
    doomed.signal(signal.SIGKILL)  # the main process and its pool children, mid-run
    doomed.popen.wait(10)
    wait_for(lambda: all_finished(rt, 200), 120, what="every task of the flood to finish")
    in_order(rt, submitted)
    retried = [t for t in submitted if rt.store.get_task(t.id).attempts > 1]
    assert retried, "the kill hit no run (it should have stopped some mid-run)"
