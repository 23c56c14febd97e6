"""Embedded `fleet serve` (no Redis, SQLite) stopped by SIGTERM mid-run: the run finishes its step
and hands its task back; the next start resumes it from its journal, the step not redone."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest

from fleet.config import Settings
from fleet.domain import shutdown
from fleet.domain.values import TaskStatus
from fleet.runtime import build
from tests.conftest import write_config
from tests.support.fleet import running_fleet, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.timeout(120), pytest.mark.serial]

GRACE, SLACK = 4.0, 2.0
AGENTS = {
    "hanger": """
        tools = ["tests.support.shop_tools:count_then_hang"]
        model = "echo"
    """,
}


def test_sigterm_hands_the_running_task_back_and_the_next_start_resumes_it(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path / "config", AGENTS, {"hanger": 'agent = "hanger"\n'})
    counter = tmp_path / "side-effects.txt"
    database_url = f"sqlite:///{tmp_path / 'fleet.db'}"
    settings = {
        "database_url": database_url,
        "redis_url": "",
        "config_dir": config,
        "shutdown_grace": GRACE,
        "test_counter": counter,
    }
    with running_fleet(tmp_path, **settings) as fleet:  # type: ignore[arg-type]
        url = fleet.serve()
        api = next(p for p in fleet.procs if p.name == "api")
        body = {"deployment": "hanger", "input": '/tool count_then_hang {"seconds": 1.5}'}
        task_id = httpx.post(f"{url}/v1/tasks", json=body, timeout=10).json()["id"]
        wait_for(counter.exists, 30, what="the tool to start")
        sent = time.monotonic()
        api.popen.send_signal(signal.SIGTERM)
        api.popen.wait(GRACE + SLACK)
        assert time.monotonic() - sent <= GRACE + SLACK

    rt = build(Settings(home=tmp_path / "home", database_url=database_url, config_dir=config))
    try:
        task = rt.store.get_task(uuid.UUID(task_id))
        assert task.status == TaskStatus.INTERRUPTED, task.error
        (run,) = rt.store.runs_of(task.id)
        assert (run.status, run.error) == ("interrupted", shutdown.HANDED_BACK)
        assert len(counter.read_text().splitlines()) == 1
    finally:
        rt.close()

    (tmp_path / "again").mkdir()
    with running_fleet(tmp_path / "again", **settings) as fleet:  # type: ignore[arg-type]
        url = fleet.serve()
        done = wait_for(
            lambda: (
                (t := httpx.get(f"{url}/v1/tasks/{task_id}", timeout=5).json())["status"]
                == "succeeded"
                and t
            ),
            30,
            what="the task to resume and finish",
        )
    assert done["reply"]
    assert len(counter.read_text().splitlines()) == 1  # the finished tool call was replayed
