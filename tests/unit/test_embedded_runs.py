"""Embedded mode holds many runs in flight in one process (``fleet serve --runs``, the SDK): a
thread a run, started as needed, each draining one conversation in order on one SQLite file."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.constants import DEFAULT_EMBEDDED_RUNS
from fleet.dispatch.embedded import EmbeddedLoop
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime, build
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import wait_for

WAIT_MS = 6000
AGENTS = {"slow": f'[model]\nprovider = "echo"\ndelay_ms = {WAIT_MS}\n'}


def runtime(tmp_path: Path) -> Runtime:
    config = write_config(tmp_path / "config", AGENTS, {"slow": 'agent = "slow"\n'})
    return build(Settings(home=tmp_path / "home", config_dir=config))


def drainers() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("fleet-drain-"))


def running(rt: Runtime) -> int:
    return len(rt.store.list_tasks(TaskFilter(status=TaskStatus.RUNNING, limit=1000)))


def test_runs_in_flight_default_to_a_hundred() -> None:
    assert Settings().embedded_concurrency == DEFAULT_EMBEDDED_RUNS == 100


def test_one_process_holds_hundreds_of_runs_waiting_on_their_model_each_conversation_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """250 conversations, two tasks each, on one SQLite file: most of their runs wait on their
    6-second model at once, and each conversation's second task starts after its first ends."""
    caplog.set_level(logging.WARNING)
    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=300)
    before = drainers()
    loop.start()
    pairs: list[tuple[Task, Task]] = []
    try:
        started = time.monotonic()
        for i in range(250):
            first = rt.dispatcher.submit("slow", f"a{i}", key=f"c{i}").task
            pairs.append((first, rt.dispatcher.submit("slow", f"b{i}", key=f"c{i}").task))
        peak = {"running": 0}

        def many() -> bool:
            peak["running"] = max(peak["running"], running(rt))
            return peak["running"] >= 200

        # (bounds for a loaded machine: the suite's parallel stage runs beside it)
        wait_for(many, 150, interval=0.1, what="200 runs in flight at once")
        assert before + 200 <= drainers() <= before + 300
        wait_for(
            lambda: all(rt.store.get_task(b.id).status.terminal for _, b in pairs),
            120,
            interval=0.2,
            what="every task",
        )
        took = time.monotonic() - started
    finally:
        loop.stop()
    for a, b in pairs:
        (ra,), (rb,) = rt.store.runs_of(a.id), rt.store.runs_of(b.id)
        assert rt.store.get_task(a.id).status == rt.store.get_task(b.id).status
        assert rt.store.get_task(b.id).status == TaskStatus.SUCCEEDED
        assert ra.finished_at is not None and ra.finished_at <= rb.started_at, "overlap"
    # 500 runs of 3 s, two after one another per conversation: one at a time takes 1,500 s
    assert took < 300, took
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    rt.close()


def test_threads_start_as_runs_need_them_and_are_used_again(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=500)
    before = drainers()
    loop.start()
    try:
        assert drainers() == before, "no thread before a run needs one"
        for round_ in range(2):
            tasks = [rt.dispatcher.submit("slow", "x", key=f"r{round_}-{i}").task for i in range(3)]
            wait_for(
                lambda tasks=tasks: all(rt.store.get_task(t.id).status.terminal for t in tasks),
                30,
                what="the three tasks",
            )
            assert drainers() == before + 3, "three runs at once: three threads, then reused"
    finally:
        loop.stop()
    assert drainers() == before
    rt.close()
