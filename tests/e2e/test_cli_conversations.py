"""``fleet conversations`` as users run it (embedded): show, reset, delete, prune, exit codes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_cli import SHIPPED_CONFIG, Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(SHIPPED_CONFIG), "FLEET_HOME": str(home)})


def two_turns(cli: Cli) -> None:
    cli.ok("run", "support", "My order hasn't arrived", "-c", "ticket-4711")
    cli.ok("run", "support", "It was order 1234", "-c", "ticket-4711")


def test_show_reset_and_the_next_run_starts_clean(cli: Cli) -> None:
    two_turns(cli)
    shown = cli.json("conversations", "show", "api:ticket-4711", "-d", "support")
    assert (shown["generation"], shown["messages"], shown["tasks"]) == (0, 4, 2)
    human = cli.ok("conversations", "show", "ticket-4711", "-d", "support")
    assert human.startswith("api:ticket-4711 (support) generation 0")
    listed = cli.json("conversations", "ls")
    assert [c["conversation"] for c in listed] == ["api:ticket-4711"]
    said = cli.ok("conversations", "reset", "ticket-4711", "-d", "support")
    assert said.startswith("api:ticket-4711 (support): generation 1 starts now")
    assert cli.ok("run", "support", "Hello again", "-c", "ticket-4711") == (
        "echo: Hello again [history: 0]\n"
    )


def test_delete_then_the_key_starts_fresh_and_says_so(cli: Cli) -> None:
    two_turns(cli)
    gone = cli.json("conversations", "delete", "ticket-4711", "-d", "support")
    assert (gone["tasks"], gone["messages"], gone["deletedBy"]) == (2, 4, "cli")
    r = cli("run", "support", "Anyone there?", "-c", "ticket-4711")
    assert r.code == 0, r
    assert r.out == "echo: Anyone there? [history: 0]\n"
    assert "was deleted at" in r.one_error_line() and "starts it fresh" in r.err
    assert cli.json("conversations", "show", "ticket-4711", "-d", "support")["tasks"] == 1


def test_prune_dry_run_counts_and_deletes_nothing(cli: Cli) -> None:
    two_turns(cli)
    said = time.monotonic()  # every message was said by now
    none = cli.json("conversations", "prune", "--older-than", "1d", "--dry-run")
    assert none["dryRun"] is True and none["retention"]["support"] == 0
    time.sleep(max(0.0, said + 1.2 - time.monotonic()))  # the clock is the condition here
    dry = cli.json("conversations", "prune", "--older-than", "1s", "--dry-run")
    assert dry["dryRun"] is True
    assert dry["retention"]["support"] == 4
    assert cli.json("conversations", "show", "ticket-4711", "-d", "support")["messages"] == 4


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("conversations", "show", "nope", "-d", "support"), "no conversation 'api:nope'"),
        (("conversations", "show", "ticket-4711", "-d", "nope"), "no deployment named 'nope'"),
        (("conversations", "show", "ticket-4711"), "--deployment"),
        (("conversations", "reset", "nope", "-d", "support"), "no conversation 'api:nope'"),
        (("conversations", "delete", "a2a:x y:k", "-d", "support"), "scope"),
        (("conversations", "prune", "--older-than", "soon"), "soon"),
        (("conversations", "prune", "--older-than", "0"), "more than 0"),
        (("conversations", "ls", "--state", "sleepy"), "sleepy"),
    ],
)
def test_bad_input_exits_2_with_one_line(cli: Cli, args: tuple[str, ...], says: str) -> None:
    cli.ok("run", "support", "My order hasn't arrived", "-c", "ticket-4711")
    r = cli(*args)
    assert r.code == 2, r
    assert says in r.one_error_line()
    listed = cli.json("conversations", "ls")
    assert [c["conversation"] for c in listed] == ["api:ticket-4711"]  # nothing created
