"""MCP servers kept across runs (``lifetime = "worker"``), against real server processes.

Each test opens an agent's toolbox as successive runs do and looks at the server processes
(their pids, recorded by tests/support/mcp_server.py) and the HTTP sessions they got.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.agents.tools import ToolContext, executor, mcp_warm, toolbox
from fleet.agents.tools.base import ToolServerError
from fleet.agents.tools.mcp_process import STDERR_KEEP_BYTES, StderrTail
from fleet.config import AgentConfig
from tests.integration.test_mcp_tools import HttpServer, box, pid_alive, stdio
from tests.support.fleet import wait_for

pytestmark = pytest.mark.timeout(120)


def ctx(tenant: str = "acme") -> ToolContext:
    return ToolContext(task_id="t1", run_id="r1", tenant=tenant)


@pytest.fixture(autouse=True)
def _fresh_pool() -> Iterator[None]:
    """Each test starts with no kept connection and leaves none behind."""
    mcp_warm.close_all()
    yield
    mcp_warm.close_all()


def pid_of(record: Path) -> int:
    return int((record / "pid").read_text())


def echo(tools: dict[str, Any], text: str, c: ToolContext | None = None) -> str:
    return executor.call(tools["test.echo"], {"text": text}, c or ctx(), timeout_s=10).text


def handshakes(http: HttpServer) -> int:
    """Connections the server saw open: its discovery requests (or initializations)."""
    opening = ("server/discover", "initialize")
    return sum(h.get("mcp-method") in opening for h in http.headers())


def test_a_stdio_server_outlives_the_run_and_serves_the_next(tmp_path):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record), lifetime="worker")
    with b.opened(ctx()) as tools:
        assert echo(tools, "first") == "first"
        pid = pid_of(record)
    assert pid_alive(pid)  # kept: the run is over, the server is not
    with b.opened(ctx()) as tools:
        assert echo(tools, "second") == "second"
    assert pid_of(record) == pid  # the same process served the second run
    mcp_warm.close_all()  # the worker's shutdown
    assert not pid_alive(pid)


def test_an_http_server_keeps_its_connection_across_runs(tmp_path):
    http = HttpServer(tmp_path)
    try:
        b = box(tmp_path, url=http.url, lifetime="worker")
        for text in ("first", "second", "third"):
            with b.opened(ctx()) as tools:
                assert echo(tools, text) == text
        assert handshakes(http) == 1
        # the default, lifetime = "run": a session per run
        plain = box(tmp_path, url=http.url)
        for text in ("first", "second"):
            with plain.opened(ctx()) as tools:
                assert echo(tools, text) == text
        assert handshakes(http) == 3
    finally:
        http.proc.stop()


def test_run_lifetime_starts_a_server_per_run(tmp_path):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record))
    with b.opened(ctx()):
        first = pid_of(record)
    assert not pid_alive(first)
    with b.opened(ctx()):
        assert pid_of(record) != first


def test_tenants_never_share_a_server(tmp_path):
    record = tmp_path / "rec"  # one entry: each server records its pid here as it starts
    b = box(tmp_path, **stdio(record), lifetime="worker")
    with b.opened(ctx("acme")) as tools:
        echo(tools, "hello", ctx("acme"))
        acme = pid_of(record)
    with b.opened(ctx("globex")) as tools:
        echo(tools, "hello", ctx("globex"))
        globex = pid_of(record)
    assert globex != acme
    assert pid_alive(acme) and pid_alive(globex)
    with b.opened(ctx("acme")):
        pass
    assert len(mcp_warm.POOL) == 2
    mcp_warm.close_all()
    assert not pid_alive(acme) and not pid_alive(globex)


def test_a_server_that_died_is_started_anew_on_the_next_run(tmp_path):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record), lifetime="worker")
    with b.opened(ctx()):
        first = pid_of(record)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first), 10, what="the server to die")
    with b.opened(ctx()) as tools:
        assert echo(tools, "back") == "back"
        assert pid_of(record) != first


def test_a_server_that_hung_is_ended_and_started_anew(tmp_path):
    record = tmp_path / "rec"
    # the listing that precedes a run's use is bounded by connect_timeout (at most 5 s)
    b = box(tmp_path, **stdio(record), lifetime="worker", connect_timeout="5s")
    with b.opened(ctx()):
        hung = pid_of(record)
    os.kill(hung, signal.SIGSTOP)
    try:
        with b.opened(ctx()) as tools:
            assert echo(tools, "fresh") == "fresh"
            assert pid_of(record) != hung
        assert not pid_alive(hung)  # the hung one was ended, not left behind
    finally:
        if pid_alive(hung):
            os.kill(hung, signal.SIGKILL)


def test_a_start_failure_is_the_same_clear_error(tmp_path):
    b = box(tmp_path, **stdio(tmp_path / "rec", "--crash"), lifetime="worker")
    for _ in range(2):  # nothing is kept of a failed start: the next run tries again
        with pytest.raises(ToolServerError) as err, b.opened(ctx()):
            pass
        assert str(err.value).endswith(
            "(its stderr: fleet-test server: cannot open the database (on purpose))"
        )
    assert len(mcp_warm.POOL) == 0


def test_an_idle_server_is_closed_after_idle_timeout(tmp_path):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record), lifetime="worker", idle_timeout="1s")
    with b.opened(ctx()):
        pid = pid_of(record)
    assert pid_alive(pid)
    wait_for(lambda: not pid_alive(pid), 20, what="the idle server to be closed")
    assert len(mcp_warm.POOL) == 0


@pytest.mark.parametrize(("slots", "waits"), [(1, True), (2, False)])
def test_max_concurrent_calls_makes_calls_beyond_wait_their_turn(tmp_path, slots, waits):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record), lifetime="worker", max_concurrent_calls=slots)
    with b.opened(ctx()) as tools:
        busy = ToolContext(task_id="t0", run_id="r0", tenant="acme")
        first = threading.Thread(
            target=executor.call,
            args=(tools["test.slow"], {"seconds": 5, "tag": "busy"}, busy),
            kwargs={"timeout_s": 30},
        )
        first.start()
        wait_for((record / "started-busy").exists, 10, what="the first call to start")
        second = executor.call(tools["test.echo"], {"text": "me too"}, ctx(), timeout_s=1)
        first.join()
    if waits:
        assert second.error == "timed out after 1s"  # it waited for the slot, within its bound
    else:
        assert second.text == "me too"


def test_a_stop_still_cancels_a_call_on_a_kept_server(tmp_path):
    record = tmp_path / "rec"
    b = box(tmp_path, **stdio(record), lifetime="worker")
    c = ctx()
    with b.opened(c) as tools:
        result = executor.call(
            tools["test.slow"],
            {"seconds": 60, "tag": "stop"},
            c,
            timeout_s=60,
            watch=(record / "started-stop").exists,
        )
        assert result.stopped
        wait_for((record / "cancelled-stop").exists, 10, what="the server to see the cancel")
    with b.opened(ctx()) as tools:  # the next run's call is not stuck behind the stopped one
        assert echo(tools, "next") == "next"


def test_the_python_placeholder_starts_fleets_own_interpreter(tmp_path):
    record = tmp_path / "rec"
    server = str(Path(__file__).parents[1] / "support" / "mcp_server.py")
    agent = AgentConfig.model_validate(
        {
            "name": "a",
            "mcp_servers": [
                {
                    "name": "test",
                    "command": "{python}",
                    "args": [server, "--stdio", "--record", str(record)],
                    # an empty PATH: no other python could be found
                    "env": {"PATH": str(tmp_path / "nothing-here")},
                }
            ],
        }
    )
    with toolbox.build(agent, tmp_path).opened(ctx()) as tools:
        assert echo(tools, "from fleet's python") == "from fleet's python"
        exe = os.readlink(f"/proc/{pid_of(record)}/exe")
    assert os.path.samefile(exe, sys.executable)


def test_a_servers_stderr_is_drained_and_only_its_end_kept():
    """A kept server may log for hours: its stderr is read as it comes (a full pipe would block
    the server) and only the last bytes are kept, for a failed start's message."""
    tail = StderrTail()
    try:
        for i in range(20_000):  # about 200 KB, three times a pipe's buffer
            tail.sink.write(f"line {i}\n")
        tail.sink.flush()
        text = tail.text()
    finally:
        tail.close()
    assert text.endswith("line 19999\n")
    assert len(text.encode()) <= STDERR_KEEP_BYTES


def test_a_kept_http_connection_to_a_server_that_went_away_fails_the_next_run_clearly(tmp_path):
    http = HttpServer(tmp_path)
    b = box(tmp_path, url=http.url, lifetime="worker", connect_timeout="3s")
    try:
        with b.opened(ctx()) as tools:
            assert echo(tools, "up") == "up"
    finally:
        http.proc.stop()
    with pytest.raises(ToolServerError) as err, b.opened(ctx()):
        pass
    assert str(err.value).startswith(
        f"MCP server 'test' (http: {http.url}): could not connect: ConnectError"
    )
    assert len(mcp_warm.POOL) == 0
