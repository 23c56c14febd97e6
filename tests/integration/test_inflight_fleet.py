"""Hundreds of runs in flight in one worker process (``fleet worker --runs N``: Celery's thread
pool) on real PostgreSQL and Redis, against a fake OpenAI-compatible model (``bench.slow_model``)
that holds every call until the test releases it: 300 runs wait on their model at once while
the process stays within ``FLEET_DATABASE_POOL_SIZE``; each conversation still runs one task at
a time in order; the registry shows the runs in flight; ``kill -9`` loses no run and repeats no
tool; a cancel among 300 aborts its one call; SIGTERM hands every run back."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from bench import slow_model
from fleet.dispatch.registry import Registry
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, redis_client
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.pg, pytest.mark.redis, pytest.mark.timeout(300)]

HELD, RUNS, POOL = 300, 320, 4
#: an OpenAI-compatible agent on the held model (its base URL filled in by ``config``)
HELD_AGENT = (
    'tools = ["tests.support.shop_tools:count"]\n'
    '[model]\nprovider = "openai"\nname = "slow"\nbase_url = "{url}/v1"\n'
    "timeout = 300\nmax_retries = 0\n"
)
AGENTS = {
    "blocker": 'tools = ["tests.support.shop_tools:block", "tests.support.shop_tools:spin"]\n'
    'model = "echo"\n',
    "quick": '[model]\nprovider = "echo"\ndelay_ms = 400\n',
}
DEPLOYMENTS = {name: f'agent = "{name}"\n' for name in ("blocker", "quick", "held")} | {
    # a new task stops the running one at once, without a last report turn
    "abrupt": 'agent = "held"\n[conversations]\nqueue_mode = "interrupt"\n'
    "report_on_interrupt = false\n"
}


class HeldModel(slow_model.Process):
    """``bench.slow_model`` in a process of its own, holding every call (but a tool call,
    answered at once) until ``release``."""

    def __init__(self, log: Path) -> None:
        super().__init__(log)
        self.pace(delay=0, hold=True)

    def in_flight(self) -> int:
        return int(self.stats()["in_flight"])

    def answered(self) -> int:
        return int(self.stats()["answered"])


@pytest.fixture
def model(tmp_path: Path) -> Iterator[HeldModel]:
    held = HeldModel(tmp_path / "model.log")
    yield held
    held.close()


@pytest.fixture
def config(tmp_path: Path, model: HeldModel) -> Path:
    agents = {**AGENTS, "held": HELD_AGENT.format(url=model.url)}
    return write_config(tmp_path / "config", agents, DEPLOYMENTS)


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


def _held_in_flight(rt: Runtime, model: HeldModel, n: int, peak: dict[str, int]) -> None:
    """Wait until ``n`` runs wait on the model at once, noting the most connections meanwhile."""

    def all_waiting() -> bool:
        peak["connections"] = max(peak.get("connections", 0), _connections(rt))
        return model.in_flight() >= n

    wait_for(all_waiting, 120, interval=0.2, what=f"{n} runs waiting on the model at once")


def test_300_runs_wait_at_once_in_one_process_in_order_within_its_connections(
    rt: Runtime, fleet: Fleet, tmp_path: Path, model: HeldModel
) -> None:
    _worker(fleet, tmp_path, "many")
    ids: list[tuple[uuid.UUID, uuid.UUID]] = []
    for i in range(HELD):
        first = rt.dispatcher.submit("held", f"first {i}", key=f"c{i}").task
        second = rt.dispatcher.submit("held", f"second {i}", key=f"c{i}").task
        ids.append((first.id, second.id))
    peak: dict[str, int] = {}
    _held_in_flight(rt, model, HELD, peak)
    registry = Registry(redis_client(rt.settings))
    (entry,) = wait_for(
        lambda: [e for e in registry.read() if e.role == "worker" and e.runs_in_flight == HELD],
        10,
        what="the registry to show the runs in flight",
    )
    assert entry.runs_in_flight + entry.free_slots == RUNS
    assert model.in_flight() == HELD, "a second task of a conversation ran beside its first"
    # the test's own store holds at most a few more connections beside the worker's pool
    assert peak["connections"] <= POOL + rt.settings.database_pool_size
    model.release()

    def done() -> bool:
        peak["connections"] = max(peak["connections"], _connections(rt))
        return all(rt.store.get_task(b).status.terminal for _, b in ids)

    wait_for(done, 180, interval=0.5, what="every task to finish")
    assert peak["connections"] <= POOL + rt.settings.database_pool_size
    for a, b in ids:
        (ra,), (rb,) = rt.store.runs_of(a), rt.store.runs_of(b)
        assert rt.store.get_task(a).status == rt.store.get_task(b).status == TaskStatus.SUCCEEDED
        assert ra.finished_at is not None and ra.finished_at <= rb.started_at, "overlap"


def test_sigterm_hands_back_each_of_300_runs_in_flight(
    rt: Runtime, fleet: Fleet, tmp_path: Path, model: HeldModel
) -> None:
    """SIGTERM while 300 runs wait on calls that do not end: when the grace period is over
    each is handed back from outside (its lease released, its conversation woken) and the
    process ends; the next worker finishes every one."""
    worker = _worker(fleet, tmp_path, "stopper", FLEET_SHUTDOWN_GRACE="3")
    tasks = [rt.dispatcher.submit("held", f"t{i}", key=f"s{i}").task for i in range(HELD)]
    _held_in_flight(rt, model, HELD, {})
    worker.signal(signal.SIGTERM)
    worker.wait_log(rf"grace period over: {HELD} run\(s\) abandoned mid-step", timeout=60)
    assert worker.popen.wait(60) == 1
    handed = [rt.store.get_task(t.id) for t in tasks]
    assert {t.status for t in handed} == {TaskStatus.INTERRUPTED}
    model.release()
    _worker(fleet, tmp_path, "after")
    wait_for(
        lambda: all(rt.store.get_task(t.id).status == TaskStatus.SUCCEEDED for t in tasks),
        180,
        interval=0.5,
        what="every task to succeed on the next worker",
    )
    assert {len(rt.store.runs_of(t.id)) for t in tasks} == {2}


def test_kill_9_of_a_process_with_300_runs_recovers_each_and_counts_each_tool_once(
    rt: Runtime, fleet: Fleet, tmp_path: Path, model: HeldModel
) -> None:
    counter = tmp_path / "side-effects.txt"
    worker = _worker(fleet, tmp_path, "doomed")
    fleet.beat()
    tasks = [rt.dispatcher.submit("held", "/tool count {}", key=f"k{i}").task for i in range(HELD)]

    def counted() -> list[str]:
        return counter.read_text().splitlines() if counter.exists() else []

    # every tool has run; each run now waits on its next model step: kill the process
    _held_in_flight(rt, model, HELD, {})
    assert len(counted()) == HELD
    worker.signal(signal.SIGKILL)
    worker.popen.wait(10)
    model.release()
    _worker(fleet, tmp_path, "heir")
    wait_for(
        lambda: all(rt.store.get_task(t.id).status.terminal for t in tasks),
        180,
        interval=0.5,
        what="every task recovered and finished",
    )
    for t in tasks:
        done = rt.store.get_task(t.id)
        assert done.status == TaskStatus.SUCCEEDED and done.attempts == 2, done
    assert sorted(line.split()[0] for line in counted()) == sorted(str(t.id) for t in tasks), (
        "a tool that finished before the kill ran again"
    )


@pytest.mark.serial  # bound by wall-clock time (50 ms): run alone, not beside the parallel suite
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


def test_a_cancel_and_an_interrupt_among_300_runs_abort_their_model_calls_in_flight(
    rt: Runtime, fleet: Fleet, tmp_path: Path, model: HeldModel
) -> None:
    """300 runs wait on their model (not a byte of its answer yet); one is cancelled and
    another interrupted by a new task on its conversation: each call is hung up, the one task
    ends cancelled and the other superseded (its successor then runs), while the 298 others
    still wait."""
    _worker(fleet, tmp_path, "waiters")
    tasks = [rt.dispatcher.submit("held", f"w{i}", key=f"w{i}").task for i in range(HELD - 1)]
    tasks.append(rt.dispatcher.submit("abrupt", "first", key="i0").task)
    _held_in_flight(rt, model, HELD, {})
    victim, interrupted = tasks[170], tasks[-1]
    others = [t for t in tasks if t not in (victim, interrupted)]
    assert rt.dispatcher.cancel(victim.id).effect == "requested"
    successor = rt.dispatcher.submit("abrupt", "second", key="i0").task
    for task, status in ((victim, TaskStatus.CANCELLED), (interrupted, TaskStatus.SUPERSEDED)):
        wait_for(
            lambda task=task: rt.store.get_task(task.id).status.terminal,
            30,
            interval=0.05,
            what=f"the {status.value} task to end",
        )
        assert rt.store.get_task(task.id).status == status
        (run,) = rt.store.runs_of(task.id)
        (step,) = [s for s in rt.store.get_run(run.id).steps if s.kind == "model"]
        assert step.error is not None and "must stop" in step.error, step
    wait_for(
        lambda: rt.store.get_task(successor.id).status == TaskStatus.RUNNING,
        30,
        what="the interrupting task to run",
    )
    still = rt.store.list_tasks(TaskFilter(status=TaskStatus.RUNNING, limit=1000))
    assert {t.id for t in still} == {t.id for t in [*others, successor]}, "only those two ended"
    model.release()
    wait_for(
        lambda: all(rt.store.get_task(t.id).status.terminal for t in [*others, successor]),
        120,
        interval=0.5,
        what="the others to finish",
    )
    assert {rt.store.get_task(t.id).status for t in [*others, successor]} == {TaskStatus.SUCCEEDED}
