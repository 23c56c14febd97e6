"""Every ``fleet`` command with ``--server`` (or ``FLEET_SERVER``): it goes through the server or
refuses with one line; none falls back to a local store (no ``.fleet/fleet.db`` appears)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import typer

from fleet.cli.app import HERE_ONLY, THROUGH_SERVER, app
from tests.e2e.test_cli import SHIPPED_CONFIG, SHIPPED_ENV, Cli

TASK, APPROVAL = "0123456789ab", "abcdef012345"
#: One call of every command (``fleet keys hash`` talks to nothing: it needs neither).
CALLS: dict[str, tuple[str, ...]] = {
    "run": ("run", "support", "hello"),
    "tasks show": ("tasks", "show", TASK),
    "tasks ls": ("tasks", "ls"),
    "tasks cancel": ("tasks", "cancel", TASK),
    "tasks retry": ("tasks", "retry", "--error-class", "rate_limit"),
    "events send": ("events", "send", "payment.cleared", "--key", "o-1"),
    "approvals ls": ("approvals", "ls"),
    "approvals show": ("approvals", "show", TASK, APPROVAL),
    "approvals approve": ("approvals", "approve", TASK, APPROVAL),
    "approvals reject": ("approvals", "reject", TASK, APPROVAL),
    "memory set": ("memory", "set", "prefs"),
    "memory ls": ("memory", "ls"),
    "memory get": ("memory", "get", "prefs"),
    "memory history": ("memory", "history", "prefs"),
    "conversations ls": ("conversations", "ls"),
    "conversations show": ("conversations", "show", "k", "-d", "support"),
    "conversations reset": ("conversations", "reset", "k", "-d", "support"),
    "conversations delete": ("conversations", "delete", "k", "-d", "support"),
    "conversations prune": ("conversations", "prune"),
    "tenants ls": ("tenants", "ls"),
    "tenants show": ("tenants", "show", "acme"),
    "schedules ls": ("schedules", "ls"),
    "workers ls": ("workers", "ls"),
    "schedules add": ("schedules", "add", "s", "-d", "support", "-i", "hi", "--every", "1h"),
    "schedules rm": ("schedules", "rm", "s"),
    "export": ("export", "--resource", "ada@example.com"),
    "erase": ("erase", "--resource", "ada@example.com", "--yes"),
    "audit ls": ("audit", "ls"),
    "migrate": ("migrate",),
    "check": ("check",),
    "worker": ("worker",),
    "serve": ("serve",),
    "beat": ("beat",),
}


def _commands() -> list[str]:
    """Every command of ``fleet``, as ``group command`` or ``command``."""
    root = typer.main.get_command(app)
    found = []
    for name, command in getattr(root, "commands", {}).items():
        if hasattr(command, "commands"):  # a group (typer's own click, or click's)
            found += [f"{name} {sub}" for sub in command.commands]
        else:
            found.append(name)
    return sorted(found)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """No database URL; the server named is not listening."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {
        "FLEET_CONFIG_DIR": str(SHIPPED_CONFIG),
        "FLEET_HOME": str(tmp_path / "home"),
        "FLEET_SERVER": f"http://127.0.0.1:{_closed_port()}",
        "FLEET_API_KEY": "some-key-0123456789",
        **SHIPPED_ENV,
    }
    return Cli(cwd, tmp_path / "home", env)


def test_every_command_is_listed_here_and_in_the_server_help() -> None:
    commands = _commands()
    assert sorted(CALLS) == [c for c in commands if not c.startswith("keys ")]
    groups = {c.split()[0] for c in commands} - {"keys"}
    assert set(THROUGH_SERVER) | set(HERE_ONLY) == groups
    assert not set(THROUGH_SERVER) & set(HERE_ONLY)


def test_the_server_option_names_every_group_it_serves(cli: Cli) -> None:
    text = " ".join(cli.ok("--help").split())
    said = text[text.index("--server") : text.index("--help")]
    for name in (*THROUGH_SERVER, *HERE_ONLY):
        assert f" {name}," in said or f" {name} " in said, (name, said)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_with_a_server_no_command_uses_a_local_store(cli: Cli, tmp_path: Path, name: str) -> None:
    r = cli(*CALLS[name], stdin="a value")
    line = r.one_error_line()
    if name.split(maxsplit=1)[0] in HERE_ONLY:
        assert r.code == 2 and "not through a server: leave out --server" in line, r
    else:  # it asked the server (which is not there)
        assert r.code == 1 and "cannot reach http://127.0.0.1:" in line, r
    assert not (cli.cwd / ".fleet").exists() and not cli.home.exists(), r
