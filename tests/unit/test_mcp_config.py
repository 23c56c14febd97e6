"""``[[mcp_servers]]`` in agent files: what is accepted, what is refused (file and key named)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleet.checks import run_checks
from fleet.config import McpServerConfig, load_config
from fleet.errors import ConfigError
from tests.conftest import write_config

STDIO = '[[mcp_servers]]\nname = "gh"\ncommand = "npx"\n'
HTTP = '[[mcp_servers]]\nname = "docs"\nurl = "https://mcp.example.com/mcp"\n'


def agent(tmp_path: Path, text: str) -> Path:
    return write_config(
        tmp_path / "config", {"a": 'model = "echo"\n' + text}, {"d": 'agent = "a"\n'}
    )


def test_defaults_and_both_transports(tmp_path):
    text = (
        STDIO
        + 'args = ["-y", "@modelcontextprotocol/server-github"]\n'
        + 'env = { LOG_LEVEL = "warn" }\n'
        + 'env_from = { GITHUB_TOKEN = "FLEET_GITHUB_TOKEN" }\n'
        + HTTP
        + 'headers = { "X-Team" = "ops" }\n'
        + 'headers_env = { Authorization = "FLEET_DOCS_TOKEN" }\n'
        + 'include = ["search_*"]\nexclude = ["search_all"]\n'
        + 'connect_timeout = "3s"\ncall_timeout = "2m"\nretry = "safe"\n'
    )
    gh, docs = load_config(agent(tmp_path, text)).agents["a"].mcp_servers
    assert (gh.transport, gh.command, gh.args) == (
        "stdio",
        "npx",
        ("-y", "@modelcontextprotocol/server-github"),
    )
    assert (gh.connect_timeout, gh.call_timeout, gh.retry) == (10.0, None, None)
    assert gh.secret_sources() == {"variable GITHUB_TOKEN": "FLEET_GITHUB_TOKEN"}
    assert gh.label == "MCP server 'gh' (stdio: npx -y @modelcontextprotocol/server-github)"
    assert docs.transport == "http"
    assert (docs.include, docs.exclude) == (("search_*",), ("search_all",))
    assert (docs.connect_timeout, docs.call_timeout, docs.retry) == (3.0, 120.0, "safe")
    assert docs.secret_sources() == {"header Authorization": "FLEET_DOCS_TOKEN"}
    assert docs.label == "MCP server 'docs' (http: https://mcp.example.com/mcp)"


def test_lifetime_defaults_to_run_and_worker_takes_its_options(tmp_path):
    text = STDIO + HTTP + 'lifetime = "worker"\nidle_timeout = "90s"\nmax_concurrent_calls = 4\n'
    gh, docs = load_config(agent(tmp_path, text)).agents["a"].mcp_servers
    assert (gh.lifetime, gh.idle_timeout, gh.max_concurrent_calls) == ("run", 600.0, 1)
    assert (docs.lifetime, docs.idle_timeout, docs.max_concurrent_calls) == ("worker", 90.0, 4)


def test_the_python_placeholder_is_fleets_own_interpreter(tmp_path):
    text = '[[mcp_servers]]\nname = "shop"\ncommand = "{python}"\nargs = ["-m", "shop.x"]\n'
    (shop,) = load_config(agent(tmp_path, text)).agents["a"].mcp_servers
    assert shop.program == sys.executable
    assert shop.label == "MCP server 'shop' (stdio: {python} -m shop.x)"
    assert McpServerConfig(name="gh", command="npx").program == "npx"


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ('[[mcp_servers]]\nname = "gh"\n', "mcp_servers.0", "give exactly one of command"),
        (STDIO + 'url = "http://h/mcp"\n', "mcp_servers.0", "give exactly one of command"),
        (STDIO + 'token = "abc"\n', "mcp_servers.0.token", "Extra inputs are not permitted"),
        ('[[mcp_servers]]\nname = "GitHub"\ncommand = "x"\n', "mcp_servers.0.name", "lowercase"),
        ('[[mcp_servers]]\nname = "a.b"\ncommand = "x"\n', "mcp_servers.0.name", "lowercase"),
        ('[[mcp_servers]]\nname = "gh"\ncommand = " "\n', "mcp_servers.0.command", "program"),
        (HTTP + 'args = ["x"]\n', "mcp_servers.0", "args is for servers with command"),
        (HTTP + 'env_from = { A = "FLEET_A" }\n', "mcp_servers.0", "env_from is for servers"),
        (STDIO + 'headers = { "X-A" = "b" }\n', "mcp_servers.0", "headers is for servers with url"),
        (
            STDIO + 'headers_env = { Authorization = "FLEET_T" }\n',
            "mcp_servers.0",
            "headers_env is for servers with url",
        ),
        ('[[mcp_servers]]\nname = "d"\nurl = "ftp://h/x"\n', "mcp_servers.0.url", "http://"),
        ('[[mcp_servers]]\nname = "d"\nurl = "http://h:port/x"\n', "mcp_servers.0.url", "URL"),
        (HTTP + 'headers = { Authorization = "Bearer x" }\n', "mcp_servers.0.headers", "secret"),
        (HTTP + 'headers = { "Bad Header" = "x" }\n', "mcp_servers.0.headers", "header name"),
        (HTTP + 'headers = { "Content-Type" = "x" }\n', "mcp_servers.0.headers", "transport"),
        (
            HTTP + 'headers_env = { Authorization = "token" }\n',
            "mcp_servers.0.headers_env",
            "environment variable like",
        ),
        (
            HTTP + 'headers = { "X-A" = "1" }\nheaders_env = { "X-A" = "FLEET_A" }\n',
            "mcp_servers.0",
            "set twice",
        ),
        (STDIO + 'env_from = { A = "lower" }\n', "mcp_servers.0.env_from", "environment var"),
        (STDIO + 'env = { "A-B" = "x" }\n', "mcp_servers.0.env", "not an environment variable"),
        (STDIO + 'include = [""]\n', "mcp_servers.0.include", "matches nothing"),
        (STDIO + 'connect_timeout = "0s"\n', "mcp_servers.0.connect_timeout", "greater than"),
        (STDIO + 'call_timeout = "soon"\n', "mcp_servers.0.call_timeout", "duration"),
        (STDIO + 'retry = "maybe"\n', "mcp_servers.0.retry", "'safe' or 'unsafe'"),
        (STDIO + STDIO, "mcp_servers", "two servers are named 'gh'"),
        (STDIO + 'lifetime = "forever"\n', "mcp_servers.0.lifetime", "'run' or 'worker'"),
        (STDIO + 'idle_timeout = "5m"\n', "mcp_servers.0", "idle_timeout is for lifetime"),
        (
            STDIO + 'lifetime = "worker"\nidle_timeout = "0s"\n',
            "mcp_servers.0.idle_timeout",
            "greater than",
        ),
        (
            STDIO + "max_concurrent_calls = 0\n",
            "mcp_servers.0.max_concurrent_calls",
            "greater than or equal to 1",
        ),
        (
            STDIO + "max_concurrent_calls = 65\n",
            "mcp_servers.0.max_concurrent_calls",
            "less than or equal to 64",
        ),
        (
            '[[mcp_servers]]\nname = "gh"\ncommand = "{pyhton}"\n',
            "mcp_servers.0.command",
            "'{python}' starts fleet's own Python interpreter",
        ),
    ],
)
def test_bad_entries_name_file_and_key(tmp_path, text, key, fragment):
    root = agent(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert info.value.file == str(root / "agents" / "a.toml")
    assert info.value.key == key
    assert fragment in info.value.reason


def test_a_refused_secret_is_not_echoed(tmp_path):
    root = agent(tmp_path, HTTP + 'headers = { Authorization = "Bearer sk-live-123456" }\n')
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert "sk-live-123456" not in str(info.value)


def test_the_label_shows_no_credentials_or_query_and_is_short():
    server = McpServerConfig(name="x", url="https://user:pw@h.example:8443/mcp?key=abc")
    assert server.label == "MCP server 'x' (http: https://h.example:8443/mcp)"
    v6 = McpServerConfig(name="z", url="http://[::1]:8080/mcp")
    assert v6.label == "MCP server 'z' (http: http://[::1]:8080/mcp)"
    long = McpServerConfig(name="y", command="run", args=("a" * 200,))
    assert len(long.label) < 120 and long.label.endswith("…)")


def test_missing_secrets_name_server_and_variable_never_the_value():
    server = McpServerConfig(
        name="gh",
        command="npx",
        env_from={"GITHUB_TOKEN": "FLEET_GH_TOKEN", "OTHER": "FLEET_OTHER"},
    )
    assert server.missing_secrets({"FLEET_OTHER": "value-1", "FLEET_GH_TOKEN": ""}) == [
        "MCP server 'gh' (stdio: npx): variable GITHUB_TOKEN needs environment variable "
        "FLEET_GH_TOKEN, which is not set"
    ]


def checks(monkeypatch, root: Path, tmp_path: Path) -> dict[str, list[tuple[str, str]]]:
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(root))
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    for var in ("FLEET_DATABASE_URL", "FLEET_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    found: dict[str, list[tuple[str, str]]] = {}
    for result in run_checks():
        found.setdefault(result.name, []).append((result.state, result.detail))
    return found


def test_fleet_check_fails_on_an_unset_secret_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("FLEET_DOCS_TOKEN", raising=False)
    root = agent(tmp_path, HTTP + 'headers_env = { Authorization = "FLEET_DOCS_TOKEN" }\n')
    found = checks(monkeypatch, root, tmp_path)
    assert (
        "fail",
        f"{root / 'agents' / 'a.toml'}: MCP server 'docs' (http: "
        "https://mcp.example.com/mcp): header Authorization needs environment variable "
        "FLEET_DOCS_TOKEN, which is not set",
    ) in found["config"]
    assert "mcp" not in found


def test_fleet_check_does_not_contact_servers_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_DOCS_TOKEN", "secret-value-1")
    root = agent(tmp_path, HTTP + 'headers_env = { Authorization = "FLEET_DOCS_TOKEN" }\n')
    found = checks(monkeypatch, root, tmp_path)
    assert [state for state, _ in found["config"]] == ["ok"]
    [(state, detail)] = found["mcp"]
    assert state == "ok"
    assert detail.startswith("1 server (a: docs (http)); not contacted")
    assert "secret-value-1" not in repr(found)
