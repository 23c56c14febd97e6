"""``fleet memory`` as users run it (embedded): set, ls, get, history with the authors of the
versions (people and agent runs), and bad input refused with one line and exit 2."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import Cli, _command

AGENTS = {"keeper": 'model = "echo"\nmemory = [{ block = "prefs", mode = "write" }]\n'}
DEPLOYMENTS = {"keep": 'agent = "keeper"\n'}


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)})


def set_block(cli: Cli, block: str, value: str, *args: str) -> dict:
    r = cli("memory", "set", block, *args, "--json", stdin=value)
    assert (r.code, r.err) == (0, ""), r
    return json.loads(r.out)  # type: ignore[no-any-return]


def test_set_ls_get_and_history_with_people_and_runs_as_authors(cli: Cli) -> None:
    assert set_block(cli, "prefs", "Metric units.", "--title", "Preferences") == {
        "namespace": "default",
        "block": "prefs",
        "version": 1,
    }
    said = cli("memory", "set", "prefs", stdin="Metric units.\nReplies in German.")
    assert (said.code, said.out) == (0, "default/prefs is at version 2\n"), said
    assert set_block(cli, "prefs", "elsewhere", "-n", "shop")["version"] == 1

    # an agent attached in write mode changes it: that version is authored by its run
    update = {"block": "prefs", "op": "append", "text": "Prefers tea."}
    task = cli.json("run", "keep", f"/tool memory_update {json.dumps(update)}")
    assert task["status"] == "succeeded", task
    (run,) = cli.json("tasks", "show", task["id"], "--trace")["runs"]

    # printed as a line: a newline is added unless the value ends in one
    assert cli.ok("memory", "get", "prefs") == "Metric units.\nReplies in German.\nPrefers tea.\n"
    assert cli.ok("memory", "get", "prefs", "--namespace", "shop") == "elsewhere\n"
    listed = cli.json("memory", "ls")
    assert [(b["namespace"], b["block"], b["title"], b["version"]) for b in listed] == [
        ("default", "prefs", "Preferences", 3),
        ("shop", "prefs", "", 1),
    ]
    assert listed[0]["bytes"] == len(b"Metric units.\nReplies in German.\nPrefers tea.")
    assert [b["namespace"] for b in cli.json("memory", "ls", "-n", "shop")] == ["shop"]
    table = cli.ok("memory", "ls")
    assert "Preferences" in table and "shop" in table

    history = cli.json("memory", "history", "prefs")
    assert [(v["version"], v["author"]) for v in history] == [
        (1, "user"),
        (2, "user"),
        (3, f"run:{run['id']}"),
    ]
    assert history[0]["value"] == "Metric units."
    human = cli.ok("memory", "history", "prefs")  # a pipe: one whole line per version
    assert f"run:{run['id']}" in human and "user" in human
    lines = human.splitlines()
    assert len(lines) == 1 + 3, human
    assert lines[0].split() == ["version", "author", "written", "value"]  # headers whole
    for line in lines[1:]:  # each version's time whole, on its first line (when it is folded)
        cells = line.split()  # (a run id's folded tail may be digits alone on a line: not a row)
        if len(cells) > 1 and cells[0].isdigit():
            assert re.search(r"\d\d-\d\d \d\d:\d\d:\d\d  ", line), human

    set_block(cli, "ends", "a line\n", "-n", "shop")  # one that ends in a newline gets no other
    assert cli.ok("memory", "get", "ends", "-n", "shop") == "a line\n"


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (("memory", "get", "nope"), None, "no memory block 'nope' in namespace 'default'"),
        (("memory", "history", "nope"), None, "no memory block 'nope'"),
        (("memory", "set", "Bad Name"), "x", "block name 'Bad Name'"),
        (("memory", "set", "prefs"), "x" * 65_537, "at most 65536 bytes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Cli, args: tuple[str, ...], stdin: str | None, says: str
) -> None:
    r = cli(*args, stdin=stdin)
    assert r.code == 2, r
    assert says in r.one_error_line()
    assert cli.json("memory", "ls") == []


def test_a_value_that_is_not_utf8_is_refused(cli: Cli) -> None:
    proc = subprocess.run(
        [*_command(), "memory", "set", "prefs"],
        cwd=cli.cwd,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}, **cli.env},
        input=b"\xff\xfe",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc
    (line,) = proc.stderr.decode().splitlines()
    assert "not UTF-8" in line
