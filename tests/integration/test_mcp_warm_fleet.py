"""A kept MCP server (``lifetime = "worker"``) in real Celery workers: it serves task after task
and ends with its worker, whether the worker shuts down (SIGTERM) or is killed (SIGKILL).

The server lingers when its stdin closes (``--linger``), so only fleet's own ending of it (a
close at shutdown, the parent-death signal on a kill) can make it go.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "record"


@pytest.fixture
def config_dir(tmp_path: Path, record: Path) -> Path:
    argv = [str(SERVER), "--stdio", "--linger", "--record", str(record)]
    agent = (
        'model = "echo"\n'
        "[[mcp_servers]]\n"
        'name = "shop"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps(argv)}\n"
        'lifetime = "worker"\n'
    )
    return write_config(tmp_path / "config", {"shop": agent}, {"shop": 'agent = "shop"\n'})


@pytest.fixture
def shared_settings(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> dict[str, Any]:
    return fleet_settings(tmp_path, pg_url, redis_url, config_dir)


def echo_task(rt: Runtime, text: str, *, tenant: str = "default") -> None:
    line = f'/tool shop.echo {{"text": "{text}"}}'
    task = rt.dispatcher.submit("shop", line, tenant=tenant).task
    done = wait_for(
        lambda: (t := rt.store.get_task(task.id)).status.terminal and t,
        60,
        what=f"task {text!r} to finish",
    )
    assert done.status == TaskStatus.SUCCEEDED, done.error
    outputs = [t["output"] for t in rt.store.traces_of(task.id) if t["kind"] == "tool"]
    assert outputs == [text]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its reaper) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_kept_server_serves_task_after_task_and_ends_with_its_worker(
    rt: Runtime, fleet: Fleet, record: Path, sig: signal.Signals
) -> None:
    worker = fleet.worker("a")
    echo_task(rt, "first")
    pid = int((record / "pid").read_text())
    assert alive(pid)  # the task is over; its server is kept
    echo_task(rt, "second")
    assert int((record / "pid").read_text()) == pid  # the same server served the next task
    try:
        os.kill(worker.pid, sig)  # the worker's main process only, as a process manager would
        worker.popen.wait(60)
        wait_for(lambda: not alive(pid), 30, what=f"the server to end ({sig.name})")
    finally:
        if alive(pid):  # never leave the orphan this test looks for
            os.kill(pid, signal.SIGKILL)


def test_tenants_get_kept_servers_of_their_own_in_a_worker(
    rt: Runtime, fleet: Fleet, record: Path
) -> None:
    fleet.worker("a")
    pids = {}
    for tenant in ("acme", "globex"):
        echo_task(rt, f"for {tenant}", tenant=tenant)
        pids[tenant] = int((record / "pid").read_text())  # each start records its pid
    echo_task(rt, "acme again", tenant="acme")
    assert pids["acme"] != pids["globex"]
    assert int((record / "pid").read_text()) == pids["globex"]  # no third start
    assert alive(pids["acme"]) and alive(pids["globex"])
