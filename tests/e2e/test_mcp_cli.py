"""MCP servers through the real ``fleet`` script: ``fleet run`` uses one, ``fleet check`` too."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import SHIPPED_ENV, Cli

REPO = Path(__file__).resolve().parents[2]
SERVER_ARGS = '["-m", "tests.support.mcp_server", "--stdio"]'

pytestmark = pytest.mark.timeout(180)


def mcp_agent(extra: str = "") -> str:
    return (
        'model = "echo"\ntools = ["current_time"]\n'
        "[[mcp_servers]]\n"
        'name = "shop"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {SERVER_ARGS}\n"
        f"env = {{ PYTHONPATH = {json.dumps(str(REPO))} }}\n"
        'include = ["add", "echo"]\n' + extra
    )


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    config = write_config(
        tmp_path / "config",
        {
            "helper": mcp_agent(),
            "broken": 'model = "echo"\n[[mcp_servers]]\nname = "gone"\n'
            'command = "fleet-no-such-mcp-server"\n',
        },
        {"helper": 'agent = "helper"\n', "broken": 'agent = "broken"\nmax_attempts = 1\n'},
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)})


def test_fleet_run_calls_an_mcp_tool(cli: Cli) -> None:
    task = cli.json("run", "helper", '/tool shop.add {"a": 2, "b": 40}')
    assert task["status"] == "succeeded", task
    assert task["reply"].startswith("echo: /tool shop.add")
    with sqlite3.connect(cli.home / "fleet.db") as db:
        rows = db.execute(
            "SELECT name, output, error FROM traces WHERE kind = 'tool' AND task_id = ?",
            (uuid.UUID(task["id"]).hex,),
        ).fetchall()
    assert [(name, json.loads(output), error) for name, output, error in rows] == [
        ("shop.add", "42", None)
    ]


def test_a_run_whose_server_cannot_start_fails_naming_it(cli: Cli) -> None:
    r = cli("run", "broken", "hello", "--json")
    task = json.loads(r.out)
    assert task["status"] == "failed"
    assert task["error"] == (
        "MCP server 'gone' (stdio: fleet-no-such-mcp-server): could not start: "
        "FileNotFoundError: [Errno 2] No such file or directory: 'fleet-no-such-mcp-server'"
    )


def test_fleet_check_connect_lists_each_servers_tools(cli: Cli) -> None:
    plain = cli("check")
    assert "mcp: 2 servers (broken: gone (stdio), helper: shop (stdio)); not contacted" in plain.out
    r = cli("check", "--connect")
    assert r.code == 1, r
    lines = r.out.splitlines()
    assert (
        "FAIL  mcp: agent 'broken': MCP server 'gone' (stdio: fleet-no-such-mcp-server): "
        "could not start: FileNotFoundError: [Errno 2] No such file or directory: "
        "'fleet-no-such-mcp-server'" in lines
    )
    [ok] = [line for line in lines if line.startswith("ok    mcp: agent 'helper'")]
    assert ok.endswith(": 2 tools (shop.echo, shop.add)")


def test_check_connect_starts_the_shipped_server_as_a_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone: config/ in the cwd, no PYTHONPATH, and a virtual environment that is not
    activated (no ``python`` of it on PATH, as under systemd or a Procfile naming its full
    path): the shipped server starts with ``{python}``, fleet's own interpreter, in the config
    folder, where ``-m shop.parcels`` finds it."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    clone = tmp_path / "clone"
    shutil.copytree(REPO / "config", clone / "config")
    venv_bin = Path(sys.executable).parent
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != venv_bin
    )
    cli = Cli(clone, clone / ".fleet", {"PATH": path, **SHIPPED_ENV})
    r = cli("check", "--connect")
    assert r.code == 0, r
    assert (
        "ok    mcp: agent 'orders': MCP server 'parcels' (stdio: {python} -m shop.parcels): "
        "1 tool (parcels.track)" in r.out.splitlines()
    ), r
    task = cli.json("run", "orders", '/tool parcels.track {"carrier": "ups", "code": "1Z999"}')
    assert task["status"] == "succeeded", task
