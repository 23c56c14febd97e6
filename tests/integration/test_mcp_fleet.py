"""MCP tools in real Celery workers (PostgreSQL, Redis): a cancel reaches the server's call."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "record"


@pytest.fixture
def config_dir(tmp_path: Path, record: Path) -> Path:
    agent = (
        'model = "echo"\n'
        "[[mcp_servers]]\n"
        'name = "shop"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = ["-m", "tests.support.mcp_server", "--stdio", "--record", '
        f"{json.dumps(str(record))}]\n"
        f"env = {{ PYTHONPATH = {json.dumps(str(REPO))} }}\n"
    )
    return write_config(tmp_path / "config", {"shop": agent}, {"shop": 'agent = "shop"\n'})


@pytest.fixture
def shared_settings(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config_dir)


def test_a_cancel_reaches_the_mcp_servers_call_in_a_worker(
    rt: Runtime, fleet: Fleet, record: Path
) -> None:
    fleet.worker("a")
    task = rt.dispatcher.submit("shop", '/tool shop.slow {"seconds": 120, "tag": "w"}').task
    wait_for((record / "started-w").exists, 60, what="the MCP call to start in the worker")
    pid = int((record / "pid").read_text())
    assert rt.dispatcher.cancel(task.id).effect == "requested"
    wait_for(
        lambda: rt.store.get_task(task.id).status == TaskStatus.CANCELLED,
        30,
        what="the task to be cancelled",
    )
    wait_for((record / "cancelled-w").exists, 10, what="the server to see the call cancelled")
    # the run is over: its server process was ended with it
    wait_for(lambda: not _alive(pid), 15, what="the MCP server process to end")


def test_an_mcp_call_in_a_worker_is_traced(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a")
    task = rt.dispatcher.submit("shop", '/tool shop.echo {"text": "from a worker"}').task
    done = wait_for(
        lambda: (t := rt.store.get_task(task.id)).status.terminal and t,
        60,
        what="the task to finish",
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    tools = [t for t in rt.store.traces_of(task.id) if t["kind"] == "tool"]
    assert [(t["name"], t["output"], t["error"]) for t in tools] == [
        ("shop.echo", "from a worker", None)
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
