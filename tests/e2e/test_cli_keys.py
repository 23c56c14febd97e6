"""``fleet keys hash`` through the real script: the hash a caller file takes, read from stdin;
a key on the command line is refused without being echoed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import Cli

pytestmark = pytest.mark.timeout(120)
KEY = "ops-key-0123456789"


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    config = write_config(
        tmp_path / "config",
        agents={"support": 'model = "echo"\n'},
        deployments={"support": 'agent = "support"\n'},
    )
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)})


def test_keys_hash_prints_what_key_sha256_takes(cli: Cli) -> None:
    printed = cli.ok("keys", "hash", stdin=KEY + "\n")  # as `echo "$KEY" | fleet keys hash`
    assert printed == hashlib.sha256(KEY.encode()).hexdigest() + "\n"
    callers = Path(cli.env["FLEET_CONFIG_DIR"]) / "callers"
    callers.mkdir()
    (callers / "ops.toml").write_text(f'source = "api"\nkey_sha256 = "{printed.strip()}"\n')
    checked = cli("check")
    assert checked.code == 0, checked


def test_the_command_a_bad_hash_points_at_exists(cli: Cli) -> None:
    callers = Path(cli.env["FLEET_CONFIG_DIR"]) / "callers"
    callers.mkdir()
    (callers / "ops.toml").write_text('source = "api"\nkey_sha256 = "abc"\n')
    checked = cli("check")
    assert checked.code == 2, checked
    assert "(see `fleet keys hash`)" in checked.out
    assert "Print the SHA-256 of a key read from stdin" in cli.ok("keys", "hash", "--help")


def test_a_key_on_the_command_line_is_refused_and_not_echoed(cli: Cli) -> None:
    r = cli("keys", "hash", KEY)
    assert r.code == 2, r
    assert r.one_error_line() == (
        "fleet: fleet keys hash takes no argument: pipe the key in (fleet keys hash < key.txt) "
        "or type it at the prompt, so that it stays out of shell history"
    )
    assert KEY not in r.out + r.err
    r = cli("keys", "hash", stdin="")
    assert r.code == 2, r
    assert r.one_error_line().startswith("fleet: no key given")
