"""Many runs in flight in one worker process (``fleet worker --runs N``: Celery's thread pool) on
real PostgreSQL and Redis: while its runs wait on their model they hold no connection (the
process stays within ``FLEET_DATABASE_POOL_SIZE``), each conversation still runs one task at a
time in order, the registry shows the runs in flight, and SIGTERM hands every run back."""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from fleet.dispatch.registry import Registry
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, redis_client
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.pg, pytest.mark.redis, pytest.mark.timeout(240)]

CONVERSATIONS, RUNS, POOL = 40, 60, 4
AGENTS = {
    "slow": '[model]\nprovider = "echo"\ndelay_ms = 2500\n',
    # a tool with a counted side effect between two slow model steps
    "counter": 'tools = ["tests.support.shop_tools:count"]\n'
    '[model]\nprovider = "echo"\ndelay_ms = 2000\n',
    "blocker": 'tools = ["tests.support.shop_tools:block", "tests.support.shop_tools:spin"]\n'
    'model = "echo"\n',
    "quick": '[model]\nprovider = "echo"\ndelay_ms = 400\n',
    # a reply written a word every 200 ms: 30 words, six seconds a model step
    "writer": '[model]\nprovider = "echo"\nstream_ms = 200\n',
}
DEPLOYMENTS = {
    name: f'agent = "{name}"\n' for name in ("counter", "blocker", "quick", "writer")
} | {"desk": 'agent = "slow"\n'}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=3.0,
        sweep_interval=1.0,
        registry_ttl=3.0,
        test_counter=tmp_path / "side-effects.txt",
    )


def _worker(fleet: Fleet, tmp_path: Path, name: str, **env: str) -> Proc:
    argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", "1", "--runs", str(RUNS)]
    proc = Proc(
        name,
        [*argv, "--name", f"{name}@%h"],
        {**fleet.env, "FLEET_DATABASE_POOL_SIZE": str(POOL), **env},
        tmp_path / f"{name}.log",
    )
    fleet.procs.append(proc)
    proc.wait_log(r"ready\.")
    return proc


def _connections(rt: Runtime) -> int:
    """Connections to the test's database now, this test's own excepted."""
    with rt.store.read() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        )


def _running(rt: Runtime) -> int:
    return len(rt.store.list_tasks(TaskFilter(status=TaskStatus.RUNNING, limit=1000)))


def test_one_process_holds_many_runs_in_order_within_its_connections(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    _worker(fleet, tmp_path, "many")
    ids: list[tuple[uuid.UUID, uuid.UUID]] = []
    for i in range(CONVERSATIONS):
        first = rt.dispatcher.submit("desk", f"first {i}", key=f"c{i}").task
        second = rt.dispatcher.submit("desk", f"second {i}", key=f"c{i}").task
        ids.append((first.id, second.id))
    peak = {"running": 0, "connections": 0}

    def many_at_once() -> bool:
        peak["running"] = max(peak["running"], _running(rt))
        peak["connections"] = max(peak["connections"], _connections(rt))
        return peak["running"] >= CONVERSATIONS * 3 // 4

    wait_for(many_at_once, 60, interval=0.1, what="most conversations to run at once")
    registry = Registry(redis_client(rt.settings))
    (entry,) = wait_for(
        lambda: [e for e in registry.read() if e.role == "worker" and e.runs_in_flight >= 20],
        10,
        what="the registry to show the runs in flight",
    )
    assert entry.runs_in_flight + entry.free_slots == RUNS
    # the test's own store holds at most a few more connections beside the worker's pool
    assert peak["connections"] <= POOL + rt.settings.database_pool_size

    def done() -> bool:
        peak["connections"] = max(peak["connections"], _connections(rt))
        return all(rt.store.get_task(b).status.terminal for _, b in ids)

    wait_for(done, 120, interval=0.2, what="every task to finish")
    for a, b in ids:
        (ra,), (rb,) = rt.store.runs_of(a), rt.store.runs_of(b)
        assert rt.store.get_task(a).status == rt.store.get_task(b).status == TaskStatus.SUCCEEDED
        assert ra.finished_at is not None and ra.finished_at <= rb.started_at, "overlap"


def test_sigterm_hands_every_run_in_flight_back(rt: Runtime, fleet: Fleet, tmp_path: Path) -> None:
    worker = _worker(fleet, tmp_path, "stopper", FLEET_SHUTDOWN_GRACE="10")
    tasks = [rt.dispatcher.submit("desk", f"t{i}", key=f"s{i}").task for i in range(30)]
    wait_for(lambda: _running(rt) >= 25, 60, interval=0.1, what="25 runs in flight")
    worker.signal(signal.SIGTERM)
    assert worker.popen.wait(60) == 0
    handed = [rt.store.get_task(t.id) for t in tasks]
    assert not [t for t in handed if t.status == TaskStatus.RUNNING], "a run was left running"
    # every run that was in flight was handed back (or finished); another worker completes all
    _worker(fleet, tmp_path, "after")
    wait_for(
        lambda: all(rt.store.get_task(t.id).status == TaskStatus.SUCCEEDED for t in tasks),
        90,
        interval=0.2,
        what="every task to succeed on the next worker",
    )
    assert all(len(rt.store.runs_of(t.id)) <= 2 for t in tasks)


def test_kill_9_of_a_process_with_many_runs_recovers_each_and_counts_each_tool_once(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    counter = tmp_path / "side-effects.txt"
    worker = _worker(fleet, tmp_path, "doomed")
    fleet.beat()
    tasks = [rt.dispatcher.submit("counter", "/tool count {}", key=f"k{i}").task for i in range(30)]

    def counted() -> list[str]:
        return counter.read_text().splitlines() if counter.exists() else []

    # every tool has run; each run now waits on its final model step: kill the process
    wait_for(lambda: len(counted()) == len(tasks), 60, interval=0.05, what="every tool call")
    assert _running(rt) == len(tasks)
    worker.signal(signal.SIGKILL)
    worker.popen.wait(10)
    _worker(fleet, tmp_path, "heir")
    wait_for(
        lambda: all(rt.store.get_task(t.id).status.terminal for t in tasks),
        90,
        interval=0.2,
        what="every task recovered and finished",
    )
    for t in tasks:
        done = rt.store.get_task(t.id)
        assert done.status == TaskStatus.SUCCEEDED and done.attempts == 2, done
    lines = counted()
    assert sorted(line.split()[0] for line in lines) == sorted(str(t.id) for t in tasks), (
        "a tool that finished before the kill ran again"
    )


def test_a_blocking_tool_does_not_hold_up_the_other_runs_model_calls(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    """Tools run on their run's thread: one blocked in a sleep and one spinning on the CPU
    leave the other runs' 400 ms model steps within 50 ms of their time."""
    _worker(fleet, tmp_path, "mixed")
    blockers = [
        rt.dispatcher.submit("blocker", '/tool block {"seconds": 4}', key="b1").task,
        rt.dispatcher.submit("blocker", '/tool spin {"seconds": 3}', key="b2").task,
    ]
    wait_for(lambda: _running(rt) == 2, 30, interval=0.05, what="the blocking tools to run")
    quick = [rt.dispatcher.submit("quick", f"q{i}", key=f"q{i}").task for i in range(10)]
    wait_for(
        lambda: all(rt.store.get_task(t.id).status.terminal for t in quick),
        30,
        interval=0.05,
        what="the quick tasks",
    )
    assert any(not rt.store.get_task(t.id).status.terminal for t in blockers), (
        "the quick tasks must have run while a tool blocked"
    )
    for t in quick:
        (run,) = rt.store.runs_of(t.id)
        steps = rt.store.get_run(run.id).steps
        model = [s.duration_ms for s in steps if s.kind == "model"]
        assert model and max(model) <= 400 + 50, model


def test_a_cancel_among_many_runs_aborts_its_model_call_in_flight(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    """Forty runs write their replies (six seconds of streaming each); one is cancelled: its
    model call stops mid-stream and the task ends while every other run is still writing."""
    _worker(fleet, tmp_path, "writers")
    words = " ".join(f"w{i}" for i in range(28))
    tasks = [rt.dispatcher.submit("writer", words, key=f"w{i}").task for i in range(40)]
    wait_for(lambda: _running(rt) == len(tasks), 60, interval=0.05, what="every run writing")
    victim, others = tasks[17], [t for t in tasks if t is not tasks[17]]
    assert rt.dispatcher.cancel(victim.id).effect == "requested"
    wait_for(
        lambda: rt.store.get_task(victim.id).status.terminal,
        30,
        interval=0.05,
        what="the cancelled task to end",
    )
    assert rt.store.get_task(victim.id).status == TaskStatus.CANCELLED
    still = [t for t in others if rt.store.get_task(t.id).status == TaskStatus.RUNNING]
    assert len(still) == len(others), "it ended mid-stream, while the others still wrote"
    (run,) = rt.store.runs_of(victim.id)
    (step,) = [s for s in rt.store.get_run(run.id).steps if s.kind == "model"]
    assert step.error is not None and "must stop" in step.error, step
    wait_for(
        lambda: all(rt.store.get_task(t.id).status.terminal for t in others),
        60,
        interval=0.2,
        what="the others to finish",
    )
    assert {rt.store.get_task(t.id).status for t in others} == {TaskStatus.SUCCEEDED}
