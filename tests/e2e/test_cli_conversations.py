"""``fleet conversations`` as users run it (embedded, and through ``fleet serve`` with tenants'
keys): show, reset, delete, prune, exit codes."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import SHIPPED_CONFIG, Cli
from tests.support.serve import serving


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


#: Tenant acme's app and operator, and tenant bravo's operator (each reaching its own tenant).
TENANT_KEYS = {
    "acme-app": 'source = "api"\ntenant = "acme"\n',
    "acme-ops": 'source = "api"\ntenant = "acme"\noperator = true\n',
    "bravo-ops": 'source = "api"\ntenant = "bravo"\noperator = true\n',
}


def test_through_a_server_a_bare_key_is_the_operators_own_tenants(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config")
    (config / "callers").mkdir()
    for name, body in TENANT_KEYS.items():
        digest = hashlib.sha256(f"{name}-key-0123456789".encode()).hexdigest()
        (config / "callers" / f"{name}.toml").write_text(f'{body}key_sha256 = "{digest}"\n')
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    env = {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)}
    served = {**{k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}, **env}
    with serving(served, tmp_path / "api.log") as url:

        def as_(who: str) -> Cli:
            return Cli(
                cwd, home, {**env, "FLEET_SERVER": url, "FLEET_API_KEY": f"{who}-key-0123456789"}
            )

        app, acme, bravo = as_("acme-app"), as_("acme-ops"), as_("bravo-ops")
        app.ok("run", "chat", "the secret of acme", "-c", "secret-a")
        shown = acme.json("conversations", "show", "secret-a", "-d", "chat")
        assert (shown["tenant"], shown["conversation"]) == ("acme", "api:acme:secret-a")
        (task,) = acme.json("tasks", "ls", "-c", "secret-a")
        assert task["conversation"] == "api:acme:secret-a"
        done = acme.json("conversations", "reset", "secret-a", "-d", "chat")
        assert done["generation"] == 1
        # bravo's operator: the same bare key is bravo's (none), and acme's stays out of reach
        for args in (
            ("conversations", "show", "secret-a", "-d", "chat"),
            ("conversations", "reset", "secret-a", "-d", "chat"),
            ("conversations", "delete", "secret-a", "-d", "chat"),
        ):
            r = bravo(*args)
            assert r.code == 2, r
            assert r.one_error_line() == (
                "fleet: no conversation 'api:bravo:secret-a' in deployment 'chat'"
            )
        r = bravo("conversations", "show", "api:acme:secret-a", "-d", "chat")
        assert r.code == 2 and "no conversation 'api:acme:secret-a'" in r.one_error_line(), r
        assert bravo.json("tasks", "ls", "-c", "secret-a") == []
        assert acme.json("conversations", "show", "secret-a", "-d", "chat")["generation"] == 1
