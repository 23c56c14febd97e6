"""Embedded mode (no Redis): the same admission, lease and settle code in one process on SQLite."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.dispatch.embedded import (
    EmbeddedLoop,
    give_up,
    holder_alive,
    run_until_done,
    run_within,
)
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime, build
from tests.conftest import write_config
from tests.support.fleet import wait_for


def runtime(tmp_path: Path) -> Runtime:
    settings = Settings(home=tmp_path / "home", config_dir=write_config(tmp_path / "config"))
    return build(settings)


def test_embedded_serve_runs_what_it_admits(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    with TestClient(create_app(rt)) as client:
        first = client.post(
            "/v1/tasks", json={"deployment": "chat", "input": "one", "conversationKey": "e"}
        ).json()
        second = client.post(
            "/v1/tasks",
            json={"deployment": "chat", "input": "two", "conversationKey": first["conversation"]},
        ).json()
        done = client.get(f"/v1/tasks/{second['id']}", params={"wait": 20}).json()
    rt.close()
    assert done["status"] == "succeeded"
    assert done["reply"] == "echo: two [history: 2]"


def test_run_until_done_runs_earlier_tasks_of_the_conversation_first(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    a = rt.dispatcher.submit("chat", "a", key="k").task
    b = rt.dispatcher.submit("chat", "b", key="k").task
    done = run_until_done(rt.dispatcher, rt.local_waker, b.id, timeout_s=20)
    assert done.status == TaskStatus.SUCCEEDED and done.reply == "echo: b [history: 2]"
    assert rt.store.get_task(a.id).status == TaskStatus.SUCCEEDED
    rt.close()


def test_a_task_left_running_by_a_dead_process_is_recovered(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    task = rt.dispatcher.submit("chat", "left behind", key="k").task
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    ghost = f"{socket.gethostname()}:{dead.stdout.strip()}"
    assert not holder_alive(ghost)
    # a process that died mid-run: the task is running, its holder's pid is gone
    started = rt.store.start_next(
        task.conversation_id,
        ghost,
        rt.dispatcher.clock(),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    assert started is not None
    done = run_until_done(rt.dispatcher, rt.local_waker, task.id, timeout_s=20)
    assert done.status == TaskStatus.SUCCEEDED and done.attempts == 2
    assert [r.status for r in rt.store.runs_of(task.id)] == ["interrupted", "succeeded"]
    rt.close()


def test_a_live_holder_is_left_alone(tmp_path: Path) -> None:
    assert holder_alive(f"{socket.gethostname()}:{os.getpid()}")
    assert holder_alive("some-other-host:1")  # cannot tell: assume alive
    assert not holder_alive(None)


def test_a_cancel_reaches_a_running_tool_within_about_a_second(tmp_path: Path) -> None:
    """Issue 13: `/tool wait 20s` cancelled mid-wait ends soon after, not when the wait ends."""
    import threading
    import time

    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    task = rt.dispatcher.submit("tooly", '/tool wait {"seconds": 20}', key="w").task
    done: dict[str, object] = {}
    runner = threading.Thread(
        target=lambda: done.setdefault(
            "task", run_until_done(rt.dispatcher, rt.local_waker, task.id, timeout_s=30)
        )
    )
    runner.start()
    other = build(rt.settings)  # the canceller: another connection, as the API would be
    try:
        # the model step is journaled before the tool begins: then the tool is running
        deadline = time.monotonic() + 10
        while not other.store.journal(task.id) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert other.store.journal(task.id), "the tool never started"
        time.sleep(1.5)  # the scenario: the tool has been waiting a while when the user cancels
        cancelled_at = time.monotonic()
        assert other.dispatcher.cancel(task.id).effect == "requested"
        runner.join(25)
        took = time.monotonic() - cancelled_at
    finally:
        other.close()
    final = done["task"]
    assert final.status == TaskStatus.CANCELLED  # type: ignore[attr-defined]
    # the store is polled every 0.5 s while a tool runs; `wait` checks its context at once
    assert took < 3.0, f"the cancel took {took:.1f}s to reach the tool"
    (run,) = rt.store.runs_of(task.id)
    assert run.status == "cancelled"
    rt.close()


def test_run_within_keeps_its_deadline_while_a_run_executes_and_give_up_cancels_it(
    tmp_path: Path,
) -> None:
    """Issue 33: embedded `fleet run --timeout 1` waited for a 60 s tool; now it returns at
    the deadline, and the run it leaves is cancelled (nothing else would finish it)."""
    rt = runtime(tmp_path)
    assert rt.local_waker is not None
    task = rt.dispatcher.submit("tooly", '/tool wait {"seconds": 60}', key="w").task
    # long enough for its run to start on a loaded machine (the point: it returns while
    # the run executes)
    waited = run_within(rt.dispatcher, rt.local_waker, task.id, timeout_s=3.0)
    assert not waited.status.terminal, waited
    ended = give_up(rt.dispatcher, task.id)
    assert (ended.status, ended.error) == (TaskStatus.CANCELLED, "cancelled by request")
    (run,) = rt.store.runs_of(task.id)
    assert run.status == "cancelled"
    rt.close()


def test_give_up_cancels_a_task_still_queued(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    task = rt.dispatcher.submit("chat", "never started", key="q").task
    ended = give_up(rt.dispatcher, task.id)
    assert (ended.status, ended.error) == (TaskStatus.CANCELLED, "cancelled by request")
    assert rt.store.runs_of(task.id) == []
    rt.close()


# -- the embedded pool: conversations in parallel, each in order (issue 12) ---------------------

SLOW = {"slow": '[model]\nprovider = "echo"\ndelay_ms = 300\n'}
JITTER = {"jitter": '[model]\nprovider = "echo"\ndelay_ms = [0, 20]\n'}


def pool_runtime(tmp_path: Path, agents: dict[str, str], **settings: object) -> Runtime:
    deployments = {name: f'agent = "{name}"\n' for name in agents}
    config = write_config(tmp_path / "config", agents, deployments)
    return build(Settings(home=tmp_path / "home", config_dir=config, **settings))  # type: ignore[arg-type]


def finished_in_order(rt: Runtime, tasks: list[Task]) -> list[tuple[datetime, datetime]]:
    """Each task succeeded on its first run, saw all earlier ones, and ran after the one before.

    Returns the runs' (started, finished), in seq order.
    """
    spans: list[tuple[datetime, datetime]] = []
    for i, task in enumerate(sorted(tasks, key=lambda t: t.seq)):
        done = rt.store.get_task(task.id)
        assert done.status == TaskStatus.SUCCEEDED, (done.status, done.error)
        assert done.reply is not None and done.reply.endswith(f"[history: {2 * i}]"), done.reply
        (run,) = rt.store.runs_of(task.id)
        assert run.finished_at is not None
        spans.append((run.started_at, run.finished_at))
    for (_, finished), (started, _) in itertools.pairwise(spans):
        assert finished <= started, "a conversation ran two tasks at once"
    return spans


def all_terminal(rt: Runtime, tasks: list[Task]) -> bool:
    return all(rt.store.get_task(t.id).status.terminal for t in tasks)


def test_two_conversations_overlap_and_each_runs_in_order(tmp_path: Path) -> None:
    rt = pool_runtime(tmp_path, SLOW)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=2)
    loop.start()
    try:
        tasks = {
            key: [rt.dispatcher.submit("slow", f"{key}{i}", key=key).task for i in range(3)]
            for key in ("a", "b")
        }
        everything = tasks["a"] + tasks["b"]
        wait_for(lambda: all_terminal(rt, everything), 30, what="both conversations to finish")
    finally:
        loop.stop()
    a, b = (finished_in_order(rt, tasks[key]) for key in ("a", "b"))
    # some run of one conversation was running while a run of the other was
    assert any(sa < fb and sb < fa for sa, fa in a for sb, fb in b), (a, b)
    rt.close()


def test_one_thread_runs_conversations_one_after_another(tmp_path: Path) -> None:
    """The control: with concurrency 1 the same work never overlaps (what the test above sees)."""
    rt = pool_runtime(tmp_path, SLOW)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=1)
    loop.start()
    try:
        tasks = {key: [rt.dispatcher.submit("slow", key, key=key).task] for key in ("a", "b")}
        everything = tasks["a"] + tasks["b"]
        wait_for(lambda: all_terminal(rt, everything), 30, what="both conversations to finish")
    finally:
        loop.stop()
    ((sa, fa),), ((sb, fb),) = (finished_in_order(rt, tasks[key]) for key in ("a", "b"))
    assert fa <= sb or fb <= sa
    rt.close()


def test_many_conversations_on_sqlite_all_succeed_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Concurrent writers on one SQLite file (submitters and drains): no 'database is locked'."""
    caplog.set_level(logging.WARNING)
    rt = pool_runtime(tmp_path, JITTER)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=8)
    loop.start()
    keys = [f"k{n}" for n in range(24)]
    submitted: dict[str, list[Task]] = {key: [] for key in keys}

    def submit(part: list[str]) -> None:
        for i in range(8):
            for key in part:
                submitted[key].append(rt.dispatcher.submit("jitter", f"{key}-{i}", key=key).task)

    try:
        submitters = [threading.Thread(target=submit, args=(keys[n::4],)) for n in range(4)]
        for t in submitters:
            t.start()
        for t in submitters:
            t.join(60)
        everything = [t for tasks in submitted.values() for t in tasks]
        assert len(everything) == 24 * 8
        wait_for(lambda: all_terminal(rt, everything), 120, interval=0.2, what="every task")
    finally:
        loop.stop()
    for key in keys:
        finished_in_order(rt, submitted[key])
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    rt.close()


def test_stop_ends_the_drain_threads(tmp_path: Path) -> None:
    rt = pool_runtime(tmp_path, SLOW)
    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency=3)
    loop.start()
    task = rt.dispatcher.submit("slow", "x", key="x").task
    wait_for(lambda: rt.store.get_task(task.id).status.terminal, 30, what="the task")
    loop.stop(grace_s=10)
    names = {t.name for t in threading.enumerate()}
    assert not {n for n in names if n.startswith("fleet-drain-") or n == "fleet-embedded"}
    rt.close()


@pytest.mark.parametrize("flag", ["--runs", "--concurrency"])
def test_serve_runs_is_refused_in_a_fleet_and_out_of_range(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """``--runs`` (``--concurrency``, its older spelling) is embedded mode's runs in flight."""
    from fleet.cli import main

    monkeypatch.setenv("FLEET_REDIS_URL", "redis://127.0.0.1:1/0")
    assert main(["serve", flag, "2"]) == 2
    assert capsys.readouterr().err == (
        f"fleet: {flag} is for embedded mode; in a fleet, `fleet worker --runs` sets a worker "
        "process's runs in flight\n"
    )
    monkeypatch.delenv("FLEET_REDIS_URL")
    for bad in ("0", "-1", "1001"):
        assert main(["serve", flag, bad]) == 2
        assert capsys.readouterr().err == (
            f"fleet: {flag} {bad}: an embedded fleet serve holds 1 to 1,000 runs in flight; "
            "e.g. 100\n"
        )
    assert main(["serve", "--runs", "5", "--concurrency", "5"]) == 2
    assert "older spelling of --runs" in capsys.readouterr().err


def test_the_pool_size_comes_from_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_EMBEDDED_CONCURRENCY", "3")
    rt = build(Settings(home=tmp_path / "home", config_dir=write_config(tmp_path / "config")))
    assert rt.local_waker is not None
    assert EmbeddedLoop(rt.dispatcher, rt.local_waker).concurrency == 3
    assert Settings().embedded_concurrency == 3
    monkeypatch.setenv("FLEET_EMBEDDED_CONCURRENCY", "0")
    from fleet.config import load_settings
    from fleet.errors import ConfigError

    with pytest.raises(ConfigError, match="FLEET_EMBEDDED_CONCURRENCY"):
        load_settings()
    rt.close()
