"""MCP servers as tools, against a real MCP server process (tests/support/mcp_server.py).

Each test starts the server over stdio (fleet starts the command) or streamable HTTP (the test
starts it), opens the agent's toolbox as a run does and calls tools through the executor.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.agents.tools import ToolContext, executor, toolbox
from fleet.agents.tools.base import ToolServerError
from fleet.agents.tools.mcp_session import CLOSE_TIMEOUT_S
from fleet.agents.tools.toolbox import Toolbox
from fleet.config import AgentConfig
from tests.support.fleet import Proc, wait_for

pytestmark = pytest.mark.timeout(120)

# By path: a stdio server starts in the agent's config folder, where ``tests`` is not importable.
SERVER = [sys.executable, str(Path(__file__).parents[1] / "support" / "mcp_server.py")]
TOKEN = "Bearer s3cr3t-token-for-the-mcp-test"
ALL_TOOLS = {"echo", "add", "put", "fail", "slow", "picture", "stats", "getenv"}


def ctx() -> ToolContext:
    return ToolContext(task_id="t1", run_id="r1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def box(tmp_path: Path, **server: Any) -> Toolbox:
    """The toolbox of an agent with one MCP server named 'test' (as toolbox.build makes it)."""
    agent = AgentConfig.model_validate(
        {"name": "a", "tool_timeout": 7, "mcp_servers": [{"name": "test", **server}]}
    )
    return toolbox.build(agent, tmp_path)


def stdio(record: Path, *extra: str, **options: Any) -> dict[str, Any]:
    return {
        "command": SERVER[0],
        "args": [*SERVER[1:], "--stdio", "--record", str(record), *extra],
        **options,
    }


class HttpServer:
    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.record = tmp_path / "http-record"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        argv = [*SERVER, "--http", "--port", str(self.port), "--record", str(self.record), *extra]
        self.proc = Proc("mcp-http", argv, dict(os.environ), tmp_path / "mcp-http.log")
        wait_for(self._listening, 30, what="the MCP HTTP server to listen")

    def _listening(self) -> bool:
        if self.proc.popen.poll() is not None:
            raise AssertionError(f"the MCP server exited:\n{self.proc.log()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def headers(self) -> list[dict[str, str]]:
        lines = (self.record / "headers.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path)
    yield server
    server.proc.stop()


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    """The server's config entry and its record folder, once per transport."""
    if request.param == "stdio":
        record = tmp_path / "stdio-record"
        yield stdio(record), record
        return
    http = HttpServer(tmp_path)
    yield {"url": http.url}, http.record
    http.proc.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_tools_are_listed_namespaced_and_called(tmp_path, server):
    config, _ = server
    with box(tmp_path, **config).opened(ctx()) as tools:
        assert set(tools) == {f"test.{name}" for name in ALL_TOOLS}
        add = tools["test.add"]
        assert add.description == "Add two integers."
        assert add.parameters["properties"] == {
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer"},
        }
        assert add.origin == "mcp:test"
        assert add.timeout is None  # the agent's tool_timeout applies
        # readOnlyHint or idempotentHint: safe to re-run; no hint: unsafe
        assert {
            n: t.retry for n, t in tools.items() if n in ("test.add", "test.put", "test.echo")
        } == {
            "test.add": "safe",
            "test.put": "safe",
            "test.echo": "unsafe",
        }
        results = {
            name: executor.call(tools[f"test.{name}"], args, ctx(), timeout_s=10)
            for name, args in [
                ("echo", {"text": "hello"}),
                ("add", {"a": 2, "b": 3}),
                ("fail", {"reason": "no stock"}),
                ("picture", {}),
                ("stats", {}),
            ]
        }
    assert (results["echo"].text, results["echo"].error) == ("hello", None)
    assert (results["add"].text, results["add"].error) == ("5", None)
    assert results["fail"].error == "Error executing tool fail: refused: no stock"
    assert results["fail"].text == "error: Error executing tool fail: refused: no stock"
    assert results["picture"].text == "[image: image/png, about 66 bytes, not shown]"
    assert json.loads(results["stats"].text) == {"orders": 3, "open": 1}


def test_arguments_the_server_refuses_are_an_error_result(tmp_path, server):
    config, _ = server
    with box(tmp_path, **config).opened(ctx()) as tools:
        result = executor.call(tools["test.add"], {"a": "x"}, ctx(), timeout_s=10)
        again = executor.call(tools["test.add"], {"a": 1, "b": 1}, ctx(), timeout_s=10)
    assert result.error is not None and "validation error" in result.error
    assert not result.stopped
    assert again.text == "2"  # the connection is still good


@pytest.mark.parametrize(
    ("include", "exclude", "kept"),
    [
        (["echo", "add"], [], {"echo", "add"}),
        ([], ["slow", "fail"], ALL_TOOLS - {"slow", "fail"}),
        (["*e*"], ["p*"], {"echo", "getenv"}),
        (["[ap]*"], [], {"add", "put", "picture"}),
        (["nothing-*"], [], set()),
    ],
)
def test_include_and_exclude_filter_by_name_or_glob(tmp_path, include, exclude, kept):
    config = stdio(tmp_path / "rec", include=include, exclude=exclude)
    with box(tmp_path, **config).opened(ctx()) as tools:
        assert set(tools) == {f"test.{name}" for name in kept}


def test_an_included_name_the_server_does_not_offer_fails_the_run(tmp_path):
    config = stdio(tmp_path / "rec", include=["echo", "serch"])
    with pytest.raises(ToolServerError) as err, box(tmp_path, **config).opened(ctx()):
        pass
    assert "MCP server 'test' (stdio: " in str(err.value)
    assert "include names 'serch', which the server does not offer (it offers: add, echo" in str(
        err.value
    )


def test_config_sets_retry_and_call_timeout_for_every_tool(tmp_path):
    config = stdio(tmp_path / "rec", retry="unsafe", call_timeout="2s")
    b = box(tmp_path, **config)
    with b.opened(ctx()) as tools:
        assert {t.retry for t in tools.values()} == {"unsafe"}
        assert {b.timeout_of(t) for t in tools.values()} == {2.0}
    plain = box(tmp_path, **stdio(tmp_path / "rec"))
    with plain.opened(ctx()) as tools:
        assert plain.timeout_of(tools["test.echo"]) == 7.0


def test_env_and_env_from_reach_a_stdio_server_and_nothing_else_of_fleet_does(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("FLEET_TEST_MCP_KEY", "from-the-fleet-env")
    monkeypatch.setenv("FLEET_TEST_OTHER", "not for the server")
    config = stdio(
        tmp_path / "rec", env={"PLAIN": "literal"}, env_from={"KEY": "FLEET_TEST_MCP_KEY"}
    )
    with box(tmp_path, **config).opened(ctx()) as tools:
        seen = {
            name: executor.call(tools["test.getenv"], {"name": name}, ctx(), timeout_s=10).text
            for name in ("PLAIN", "KEY", "FLEET_TEST_OTHER", "FLEET_TEST_MCP_KEY")
        }
    assert seen == {
        "PLAIN": "literal",
        "KEY": "from-the-fleet-env",
        "FLEET_TEST_OTHER": "<unset>",
        "FLEET_TEST_MCP_KEY": "<unset>",
    }


def test_headers_from_env_reach_the_http_server_and_never_an_error(
    tmp_path, http_server, monkeypatch
):
    monkeypatch.setenv("FLEET_TEST_MCP_TOKEN", TOKEN)
    config = {
        "url": http_server.url,
        "headers": {"X-Team": "ops"},
        "headers_env": {"Authorization": "FLEET_TEST_MCP_TOKEN"},
    }
    with box(tmp_path, **config).opened(ctx()) as tools:
        executor.call(tools["test.echo"], {"text": "hi"}, ctx(), timeout_s=10)
    seen = http_server.headers()
    assert len(seen) >= 3  # handshake, listing, the call
    assert {(h.get("authorization"), h.get("x-team")) for h in seen} == {(TOKEN, "ops")}

    # The same headers on a failing connection: the message names the server, not the token.
    down = {**config, "url": f"http://127.0.0.1:{free_port()}/mcp"}
    with pytest.raises(ToolServerError) as err, box(tmp_path, **down).opened(ctx()):
        pass
    assert "MCP server 'test' (http: http://127.0.0.1:" in str(err.value)
    assert "s3cr3t" not in str(err.value)


def test_a_header_variable_that_is_not_set_fails_naming_server_and_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("FLEET_TEST_MCP_UNSET", raising=False)
    config = {
        "url": "http://127.0.0.1:9/mcp",
        "headers_env": {"Authorization": "FLEET_TEST_MCP_UNSET"},
    }
    with pytest.raises(ToolServerError) as err, box(tmp_path, **config).opened(ctx()):
        pass
    assert str(err.value) == (
        "MCP server 'test' (http: http://127.0.0.1:9/mcp): header Authorization needs "
        "environment variable FLEET_TEST_MCP_UNSET, which is not set"
    )


def failure(tmp_path: Path, **config: Any) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ToolServerError) as err, box(tmp_path, **config).opened(ctx()):
        pass
    return str(err.value), time.monotonic() - started


def test_a_command_that_does_not_exist_fails_at_once_naming_the_server(tmp_path):
    message, took = failure(tmp_path, command="fleet-no-such-mcp-server", connect_timeout="60s")
    assert message == (
        "MCP server 'test' (stdio: fleet-no-such-mcp-server): could not start: "
        "FileNotFoundError: [Errno 2] No such file or directory: 'fleet-no-such-mcp-server'"
    )
    assert took < 30  # it did not wait for the connect timeout


def test_a_server_that_exits_at_start_is_named_with_its_stderr(tmp_path):
    message, took = failure(tmp_path, **stdio(tmp_path / "rec", "--crash", connect_timeout="60s"))
    assert message.startswith("MCP server 'test' (stdio: ")
    assert ": could not start: " in message
    assert message.endswith(
        "(its stderr: fleet-test server: cannot open the database (on purpose))"
    )
    assert took < 30


def test_an_http_url_nobody_listens_on_fails_at_once_naming_the_server(tmp_path):
    port = free_port()
    message, took = failure(tmp_path, url=f"http://127.0.0.1:{port}/mcp", connect_timeout="60s")
    assert message.startswith(
        f"MCP server 'test' (http: http://127.0.0.1:{port}/mcp): could not connect: ConnectError"
    )
    assert took < 30


def test_a_stdio_server_that_never_answers_hits_connect_timeout_and_is_ended(tmp_path):
    record = tmp_path / "rec"
    # 5s: long enough for the server to start (and record its pid) on a loaded machine
    message, took = failure(tmp_path, **stdio(record, "--hang", connect_timeout="5s"))
    assert message.startswith("MCP server 'test' (stdio: ")
    assert message.endswith(
        ": no answer within 5s (start, handshake and tool listing: connect_timeout)"
    )
    assert took < 5 + CLOSE_TIMEOUT_S + 5  # the bound: connect timeout plus the close
    assert not pid_alive(int((record / "pid").read_text()))


def test_an_http_server_that_never_answers_hits_connect_timeout(tmp_path):
    hung = HttpServer(tmp_path, "--hang")
    try:
        message, took = failure(tmp_path, url=hung.url, connect_timeout="1s")
    finally:
        hung.proc.stop()
    assert message == (
        f"MCP server 'test' (http: {hung.url}): no answer within 1s "
        "(start, handshake and tool listing: connect_timeout)"
    )
    assert took < 1 + CLOSE_TIMEOUT_S + 5


def test_a_call_that_hangs_hits_its_timeout_and_the_server_gets_the_cancellation(tmp_path, server):
    config, record = server
    with box(tmp_path, **config).opened(ctx()) as tools:
        result = executor.call(
            tools["test.slow"], {"seconds": 60, "tag": "timeout"}, ctx(), timeout_s=0.5
        )
        assert (result.error, result.stopped) == ("timed out after 0.5s", False)
        # while the connection is still open: the cancellation, not the close, stopped it
        wait_for(
            (record / "cancelled-timeout").exists,
            10,
            what="the server to see the call cancelled",
        )
        after = executor.call(tools["test.echo"], {"text": "still here"}, ctx(), timeout_s=10)
    assert (record / "started-timeout").exists()
    assert after.text == "still here"


def test_a_stop_cancels_the_call_on_the_server(tmp_path, server):
    config, record = server
    c = ctx()
    with box(tmp_path, **config).opened(c) as tools:
        result = executor.call(
            tools["test.slow"],
            {"seconds": 60, "tag": "stop"},
            c,
            timeout_s=60,
            watch=(record / "started-stop").exists,
        )
        assert result.stopped
        wait_for(
            (record / "cancelled-stop").exists,
            10,
            what="the server to see the call cancelled",
        )


def test_closing_ends_the_stdio_server_process(tmp_path):
    record = tmp_path / "rec"
    with box(tmp_path, **stdio(record)).opened(ctx()):
        pid = int((record / "pid").read_text())
        assert pid_alive(pid)
    assert not pid_alive(pid)


def test_a_server_that_dies_mid_run_gives_error_results_not_a_hang(tmp_path):
    record = tmp_path / "rec"
    with box(tmp_path, **stdio(record)).opened(ctx()) as tools:
        os.kill(int((record / "pid").read_text()), signal.SIGKILL)
        results = [
            executor.call(tools["test.echo"], {"text": "anyone?"}, ctx(), timeout_s=10)
            for _ in range(2)
        ]
    for result in results:
        assert not result.stopped
        assert result.error == "MCP server 'test' is no longer connected"


def test_two_servers_in_one_agent(tmp_path, http_server):
    agent = AgentConfig.model_validate(
        {
            "name": "a",
            "tools": ["current_time"],
            "mcp_servers": [
                {"name": "local", **stdio(tmp_path / "rec"), "include": ["echo"]},
                {"name": "remote", "url": http_server.url, "include": ["add"]},
            ],
        }
    )
    with toolbox.build(agent, tmp_path).opened(ctx()) as tools:
        assert set(tools) == {"current_time", "local.echo", "remote.add"}
        assert executor.call(tools["remote.add"], {"a": 1, "b": 2}, ctx(), timeout_s=10).text == "3"
