"""Embedded mode (no Redis): the same admission, lease and settle code in one process on SQLite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.dispatch.embedded import holder_alive, run_until_done
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.conftest import write_config


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
