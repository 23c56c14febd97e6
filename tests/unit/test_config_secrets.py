"""The secrets config/ names: every kind is found, an unset or too short one is refused naming
file, key and variable (never the value)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fleet.config import load_config, secrets
from fleet.config import secrets as config_secrets
from fleet.domain.redaction import MIN_SECRET_CHARS
from tests.conftest import write_config

MCP = (
    'model = "echo"\n[[mcp_servers]]\nname = "docs"\nurl = "https://mcp.example.com/mcp"\n'
    'headers_env = { Authorization = "FLEET_T_MCP" }\n'
)
REPLY = '[reply]\nurl = "https://example.com/x"\nheaders = { Authorization = "FLEET_T_REPLY" }\n'
TRIGGER = 'deployment = "support"\n[signature]\nsecret_env = "FLEET_T_SIGN"\n'
CALLER = 'source = "api"\nkey_env = "FLEET_T_KEY"\n'

#: (file, key, variable) of each secret the config below names.
NAMED = [
    ("agents/support.toml", "mcp_servers.0.headers_env.Authorization", "FLEET_T_MCP"),
    ("triggers/github.toml", "signature.secret_env", "FLEET_T_SIGN"),
    ("callers/ops.toml", "key_env", "FLEET_T_KEY"),
    ("deployments/support.toml", "reply.headers.Authorization", "FLEET_T_REPLY"),
]
ALL_SET = {var: f"value-of-{var.lower()}" for _, _, var in NAMED}


def config(tmp_path: Path):
    root = write_config(
        tmp_path / "config",
        agents={"support": MCP},
        deployments={"support": 'agent = "support"\n' + REPLY},
    )
    for section, name, body in (("triggers", "github", TRIGGER), ("callers", "ops", CALLER)):
        (root / section).mkdir()
        (root / section / f"{name}.toml").write_text(textwrap.dedent(body))
    return root


@pytest.fixture
def loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = config(tmp_path)
    for var, value in ALL_SET.items():
        monkeypatch.setenv(var, value)  # load_config wants the reply header's variable set
    return load_config(root)


def test_every_kind_of_secret_is_named(loaded) -> None:
    found = [(s.file, s.key, s.env) for s in secrets.named(loaded)]
    assert found == [(str(loaded.root / f), k, v) for f, k, v in NAMED]
    assert sorted(config_secrets.values(loaded, ALL_SET)) == sorted(ALL_SET.values())


@pytest.mark.parametrize(("file", "key", "var"), NAMED)
def test_a_short_secret_is_refused_naming_file_key_and_variable(loaded, file, key, var) -> None:
    short = "s" * (MIN_SECRET_CHARS - 1)
    [problem] = secrets.too_short(loaded, {**ALL_SET, var: short})
    assert (problem.file, problem.key) == (str(loaded.root / file), key)
    assert problem.message == (
        f"{loaded.root / file}: {key}: environment variable {var} holds fewer than "
        f"{MIN_SECRET_CHARS} characters; give a longer secret (a shorter one could not be "
        "redacted from what fleet stores)"
    )
    assert short not in problem.message


def test_secrets_of_the_minimum_length_pass(loaded) -> None:
    exactly = {var: "s" * MIN_SECRET_CHARS for var in ALL_SET}
    assert secrets.too_short(loaded, exactly) == []
    assert secrets.unset(loaded, exactly) == []
    assert secrets.awaited(loaded, exactly) == []


@pytest.mark.parametrize(("file", "key", "var"), NAMED[2:])  # MCP: see missing_secrets
def test_an_unset_secret_is_refused_naming_file_key_and_variable(loaded, file, key, var) -> None:
    [problem] = secrets.unset(loaded, {**ALL_SET, var: ""})
    assert (problem.file, problem.key) == (str(loaded.root / file), key)
    assert problem.message.startswith(
        f"{loaded.root / file}: {key}: environment variable {var} is not set (it holds "
    )
    assert secrets.awaited(loaded, {**ALL_SET, var: ""}) == []


def test_an_unset_signing_secret_is_awaited_not_refused(loaded) -> None:
    """A trigger without its secret accepts nothing yet: a warning naming what to set."""
    environ = {**ALL_SET, "FLEET_T_SIGN": ""}
    assert secrets.unset(loaded, environ) == []
    [waiting] = secrets.awaited(loaded, environ)
    assert waiting.message == (
        f"{loaded.root / 'triggers/github.toml'}: signature.secret_env: environment variable "
        "FLEET_T_SIGN is not set: set it to the secret its sender signs with; until then the "
        "trigger answers 503 and accepts nothing"
    )


def test_an_unset_mcp_secret_is_left_to_the_servers_own_line(loaded) -> None:
    assert secrets.unset(loaded, {**ALL_SET, "FLEET_T_MCP": ""}) == []
