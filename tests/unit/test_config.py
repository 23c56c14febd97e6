"""Settings from FLEET_* variables and config/ folders: every failure names file, key and reason."""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fleet.config import (
    ModelConfig,
    Settings,
    load_config,
    load_settings,
    parse_duration,
)
from fleet.constants import DEFAULT_DEBOUNCE_S, LIMITS, MAX_DEBOUNCE_S
from fleet.errors import ConfigError, ConfigErrors, NotFound
from tests.conftest import write_config

SHIPPED = Path(__file__).resolve().parents[2] / "config"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """Settings read FLEET_* from the environment: start every test without any."""
    for name in list(os.environ):
        if name.upper().startswith("FLEET_"):
            monkeypatch.delenv(name)


# --------------------------------------------------------------------------------------------
# durations


@pytest.mark.parametrize(
    "value,seconds",
    [
        ("2s", 2.0),
        ("500ms", 0.5),
        ("1.5m", 90.0),
        ("1h", 3600.0),
        ("0s", 0.0),
        ("3", 3.0),
        ("2.25", 2.25),
        (" 2 s ", 2.0),
        (3, 3.0),
        (0, 0.0),
        (1.5, 1.5),
    ],
)
def test_parse_duration(value, seconds):
    result = parse_duration(value)
    assert result == seconds
    assert isinstance(result, float)


@pytest.mark.parametrize(
    "value,fragment",
    [
        (True, "expected a duration"),
        (False, "expected a duration"),
        (None, "expected a duration"),
        ("", "expected a duration"),
        ("2w", "expected a duration"),
        ("31d", "at most 30 days"),
        ("s", "expected a duration"),
        ("-1s", "expected a duration"),
        ("1e3", "expected a duration"),
        ("2 seconds", "expected a duration"),
        ([2], "expected a duration"),
        (-1, "non-negative"),
        (-0.5, "non-negative"),
    ],
)
def test_parse_duration_refuses(value, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_duration(value)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_parse_duration_refuses_non_finite(value):
    with pytest.raises(ValueError):
        parse_duration(value)


# --------------------------------------------------------------------------------------------
# settings


def test_settings_defaults():
    s = load_settings()
    assert s.home == Path(".fleet")
    assert s.database_url is None
    assert s.redis_url is None
    assert s.embedded is True
    assert s.resolved_database_url == "sqlite:///.fleet/fleet.db"
    assert s.config_dir == Path("config")
    assert s.lease_ttl == 10.0
    assert s.sweep_interval == 5.0
    assert s.drain_budget == 5.0
    assert s.max_attempts == 3
    assert s.log_level == "WARNING"
    assert s.event_keepalive == 15.0
    assert s.secrets() == ()


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://r:6379/0")
    monkeypatch.setenv("FLEET_DATABASE_URL", "postgresql+psycopg://db/fleet")
    monkeypatch.setenv("FLEET_LEASE_TTL", "30s")
    monkeypatch.setenv("FLEET_SWEEP_INTERVAL", "1500ms")
    monkeypatch.setenv("FLEET_DRAIN_BUDGET", "1m")
    monkeypatch.setenv("FLEET_EVENT_KEEPALIVE", "45s")
    monkeypatch.setenv("FLEET_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("FLEET_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("FLEET_OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("FLEET_API_KEY", "fleet-secret")
    s = load_settings()
    assert s.embedded is False
    assert s.resolved_database_url == "postgresql+psycopg://db/fleet"
    assert s.lease_ttl == 30.0
    assert s.sweep_interval == 1.5
    assert s.drain_budget == 60.0
    assert s.event_keepalive == 45.0
    assert s.max_attempts == 5
    assert s.log_level == "DEBUG"
    assert set(s.secrets()) == {"sk-secret", "fleet-secret"}
    assert "sk-secret" not in repr(s)


def test_settings_overrides_win_over_environment(monkeypatch):
    monkeypatch.setenv("FLEET_MAX_ATTEMPTS", "5")
    assert load_settings(max_attempts=7).max_attempts == 7


def test_settings_home_sets_sqlite_path(monkeypatch):
    monkeypatch.setenv("FLEET_HOME", "/var/lib/fleet")
    assert load_settings().resolved_database_url == "sqlite:////var/lib/fleet/fleet.db"


def test_settings_are_frozen():
    s = load_settings()
    with pytest.raises(Exception, match="frozen"):
        s.max_attempts = 9  # type: ignore[misc]
    assert isinstance(s, Settings)


@pytest.mark.parametrize(
    "var,value,fragment",
    [
        ("FLEET_LEASE_TTL", "500ms", "at least 1s"),
        ("FLEET_LEASE_TTL", "soon", "expected a duration"),
        ("FLEET_LEASE_TTL", "-3", "expected a duration"),
        ("FLEET_SWEEP_INTERVAL", "0", "greater than zero"),
        ("FLEET_DRAIN_BUDGET", "0s", "greater than zero"),
        ("FLEET_EVENT_KEEPALIVE", "0", "at least 1s"),
        ("FLEET_EVENT_KEEPALIVE", "500ms", "at least 1s"),
        ("FLEET_MAX_ATTEMPTS", "0", "greater than or equal to 1"),
        ("FLEET_MAX_ATTEMPTS", "101", "less than or equal to 100"),
        ("FLEET_MAX_ATTEMPTS", "three", "valid integer"),
        ("FLEET_LOG_LEVEL", "verbose", "'DEBUG'"),
    ],
)
def test_settings_error_names_the_variable(monkeypatch, var, value, fragment):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    err = info.value
    assert err.file == "environment"
    assert err.key == var
    assert fragment in err.reason
    assert repr(value) in err.reason
    assert str(err) == f"environment: {var}: {err.reason}"


# --------------------------------------------------------------------------------------------
# model config


@pytest.mark.parametrize("delay", [0, 20, (0, 50), (5, 5), [0, 50]])
def test_model_delay_accepts(delay):
    cfg = ModelConfig(delay_ms=delay)
    assert cfg.delay_ms == (tuple(delay) if isinstance(delay, list) else delay)


@pytest.mark.parametrize("delay", [-1, (10, 5), (-1, 5), (-5, -1)])
def test_model_delay_refuses(delay):
    with pytest.raises(ValueError, match="non-negative number of ms or a range"):
        ModelConfig(delay_ms=delay)


def test_model_openai_needs_name():
    with pytest.raises(ValueError, match="needs name"):
        ModelConfig(provider="openai")
    assert ModelConfig(provider="openai", name="gpt-4o-mini").name == "gpt-4o-mini"


# --------------------------------------------------------------------------------------------
# config/ folders


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


AGENT = 'instructions = "Be brief."\nmodel = "echo"\n'
DEPLOYMENT = 'agent = "a"\n'


def test_load_minimal_config(tmp_path):
    cfg = load_config(write(tmp_path, {"agents/a.toml": AGENT, "deployments/d.toml": DEPLOYMENT}))
    assert cfg.root == tmp_path
    agent = cfg.agents["a"]
    assert agent.name == "a"
    assert agent.instructions == "Be brief."
    assert agent.model.provider == "echo"
    assert agent.tools == ()
    assert agent.max_steps == LIMITS["max_steps"].default
    assert agent.max_input_bytes == LIMITS["max_input_bytes"].default
    assert agent.history.max_items == LIMITS["max_history_items"].default
    assert agent.history.max_bytes == LIMITS["max_history_bytes"].default
    dep = cfg.deployment("d")
    assert dep.name == "d"
    assert dep.agent == "a"
    assert dep.kind == "pool"
    assert dep.conversations.queue_mode == "followup"
    assert dep.conversations.debounce == DEFAULT_DEBOUNCE_S
    assert dep.max_attempts is None
    assert dep.labels == {}
    assert cfg.agent_for("d") is agent


def test_load_full_config(tmp_path):
    root = write(
        tmp_path,
        {
            "agents/a.toml": """
                instructions = "x"
                tools = ["current_time", "wait"]
                max_steps = 64
                max_input_bytes = 65536
                [model]
                provider = "openai"
                name = "gpt-4o-mini"
                base_url = "http://localhost:9999/v1"
                timeout = "30s"
                temperature = 0.2
                [history]
                max_items = 100
                max_bytes = 131072
            """,
            "deployments/d.toml": """
                agent = "a"
                kind = "singleton"
                max_attempts = 2
                [conversations]
                queue_mode = "collect"
                debounce = "750ms"
                [labels]
                team = "search"
            """,
        },
    )
    cfg = load_config(root)
    agent = cfg.agents["a"]
    assert tuple(t.tool for t in agent.tools) == ("current_time", "wait")
    assert (agent.max_steps, agent.max_input_bytes) == (64, 65536)
    assert agent.model.provider == "openai"
    assert agent.model.name == "gpt-4o-mini"
    assert agent.model.base_url == "http://localhost:9999/v1"
    assert agent.model.timeout == 30.0
    assert agent.model.temperature == 0.2
    assert (agent.history.max_items, agent.history.max_bytes) == (100, 131072)
    dep = cfg.deployments["d"]
    assert dep.kind == "singleton"
    assert dep.max_attempts == 2
    assert dep.conversations.queue_mode == "collect"
    assert dep.conversations.debounce == 0.75
    assert dep.labels == {"team": "search"}


def test_unknown_deployment_lists_known(tmp_path):
    cfg = load_config(write(tmp_path, {"agents/a.toml": AGENT, "deployments/d.toml": DEPLOYMENT}))
    with pytest.raises(NotFound) as info:
        cfg.deployment("nope")
    assert "'nope'" in info.value.message
    assert "known: d" in info.value.message


def test_missing_folder(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent")
    assert info.value.file == str(tmp_path / "absent")
    assert info.value.key == "(folder)"
    assert "FLEET_CONFIG_DIR" in info.value.reason


def test_empty_folder_has_nothing(tmp_path):
    cfg = load_config(tmp_path)
    assert cfg.agents == {}
    assert cfg.deployments == {}


def _max(name: str) -> int:
    return LIMITS[name].maximum


@pytest.mark.parametrize(
    "rel,text,key,fragment",
    [
        ("agents/a.toml", 'instructions = "unterminated\n', "(syntax)", "not valid TOML"),
        ("deployments/d.toml", "agent = \n", "(syntax)", "not valid TOML"),
        ("agents/a.toml", 'colour = "blue"\n', "colour", "Extra inputs are not permitted"),
        ("agents/a.toml", '[model]\nprovider = "echo"\nspeed = 3\n', "model.speed", "Extra inputs"),
        ("deployments/d.toml", 'agent = "a"\nreplicas = 3\n', "replicas", "Extra inputs"),
        (
            "deployments/d.toml",
            'agent = "a"\nkind = "cron"\n',
            "kind",
            "'pool', 'task' or 'singleton'",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\nqueue_mode = "fifo"\n',
            "conversations.queue_mode",
            "'followup', 'collect', 'steer' or 'interrupt'",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\non_full = "block"\n',
            "conversations.on_full",
            "'reject', 'drop_oldest' or 'merge'",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\nmax_queued = 0\n',
            "conversations.max_queued",
            "greater than or equal to 1",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\ndebounce = "soon"\n',
            "conversations.debounce",
            "expected a duration",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\ndebounce = -1\n',
            "conversations.debounce",
            "non-negative",
        ),
        (
            "deployments/d.toml",
            'agent = "a"\n[conversations]\ndebounce = "2h"\n',
            "conversations.debounce",
            f"at most {MAX_DEBOUNCE_S:g}s",
        ),
        ("deployments/d.toml", 'agent = "a"\nmax_attempts = 0\n', "max_attempts", "greater than"),
        (
            "deployments/d.toml",
            'agent = "a"\n[labels]\n"bad key" = "v"\n',
            "labels",
            "contains ' '",
        ),
        ("deployments/d.toml", 'agent = "ghost"\n', "agent", "no agent named 'ghost'"),
        ("deployments/d.toml", 'kind = "pool"\n', "agent", "Field required"),
        ("agents/a.toml", 'tools = ["shell"]\n', "tools.0.tool", "unknown tool 'shell'"),
        ("agents/a.toml", 'model = "openai"\n', "model", "provider 'openai' needs name"),
        ("agents/a.toml", '[model]\nprovider = "openai"\n', "model", "needs name"),
        ("agents/a.toml", 'model = "claude"\n', "model.provider", "'openai' or 'anthropic'"),
        ("agents/a.toml", "[model]\ndelay_ms = [50, 10]\n", "model.delay_ms", "low <= high"),
        (
            "agents/a.toml",
            "[model]\nstream_ms = -5\n",
            "model.stream_ms",
            "non-negative number of ms between streamed words, got -5",
        ),
        ("agents/a.toml", '[model]\nstream_ms = "30"\n', "model.stream_ms", "integer"),
        (
            "agents/a.toml",
            '[model]\ntimeout = "1 minute"\n',
            "model.timeout",
            "expected a duration",
        ),
        (
            "agents/a.toml",
            f"max_steps = {_max('max_steps') + 1}\n",
            "max_steps",
            f"must be from 1 to {_max('max_steps')}",
        ),
        ("agents/a.toml", "max_steps = 0\n", "max_steps", "must be from 1 to 64"),
        (
            "agents/a.toml",
            f"max_input_bytes = {_max('max_input_bytes') + 1}\n",
            "max_input_bytes",
            f"must be from 1 to {_max('max_input_bytes')}",
        ),
        (
            "agents/a.toml",
            f"[history]\nmax_items = {_max('max_history_items') + 1}\n",
            "history.max_items",
            f"must be from 1 to {_max('max_history_items')}",
        ),
        (
            "agents/a.toml",
            f"[history]\nmax_bytes = {_max('max_history_bytes') + 1}\n",
            "history.max_bytes",
            f"must be from 1 to {_max('max_history_bytes')}",
        ),
        ("agents/Bad.toml", AGENT, "(file name)", "lowercase"),
        (
            "agents/a.toml",
            'model = "echo"\ndelegates = ["d", "ghost"]\n',
            "delegates[1]",
            "no deployment named 'ghost' (known: d)",
        ),
        ("agents/a.toml", 'model = "echo"\ndelegates = "d"\n', "delegates", "tuple"),
        # no silent conversions: a string or a number is not a yes/no, nor a string a count
        ("triggers/t.toml", 'deployment = "d"\npublic = "yes"\n', "public", "boolean"),
        ("triggers/t.toml", 'deployment = "d"\npublic = 1\n', "public", "boolean"),
        ("deployments/d.toml", 'agent = "a"\nmax_attempts = "3"\n', "max_attempts", "integer"),
        # a union's member is not named as a key
        (
            "agents/a.toml",
            '[model]\nprovider = "echo"\ndelay_ms = [1, 2, 3]\n',
            "model.delay_ms",
            "",
        ),
        ("agents/a.toml", b"\xff\xfe".decode("latin-1"), "(file)", "not UTF-8"),
    ],
)
def test_config_errors_name_file_key_reason(tmp_path, rel, text, key, fragment):
    files = {"agents/a.toml": AGENT, "deployments/d.toml": DEPLOYMENT}
    files[rel] = text
    root = write(tmp_path, files)
    if "not UTF-8" in fragment:
        (root / rel).write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(root)
    err = info.value
    assert err.file == str(root / rel)
    assert err.key == key
    assert fragment in err.reason
    assert str(err) == f"{err.file}: {key}: {err.reason}"


def _every(root: Path) -> list[tuple[str, str]]:
    """(file relative to ``root``, key) of every error one load reports."""
    with pytest.raises(ConfigError) as info:
        load_config(root)
    return [(str(Path(e.file).relative_to(root)), e.key) for e in info.value.every]


def test_every_bad_key_of_a_file_is_reported_in_one_load(tmp_path):
    root = write(
        tmp_path,
        {
            "agents/a.toml": AGENT,
            "deployments/d.toml": DEPLOYMENT,
            "tenants/acme.toml": 'weight = 0\nmax_running = "2"\nquota = 5\n',
        },
    )
    with pytest.raises(ConfigErrors) as info:
        load_config(root)
    where = root / "tenants" / "acme.toml"
    assert [(e.file, e.key) for e in info.value.every] == [
        (str(where), "weight"),
        (str(where), "max_running"),
        (str(where), "quota"),
    ]
    assert str(info.value).splitlines() == [e.message for e in info.value.every]


def test_every_broken_file_is_reported_in_one_load(tmp_path):
    """Four broken schedules, a broken agent and a file with a bad name: each one's errors, in
    one load; a deployment of the broken agent adds no error of its own."""
    schedule = 'deployment = "d"\ninput = "x"\n'
    root = write(
        tmp_path,
        {
            "agents/a.toml": "instructions = 7\n" + 'model = "echo"\n',
            "agents/b.toml": AGENT,
            "deployments/d.toml": DEPLOYMENT,
            "deployments/e.toml": 'agent = "nobody"\n',
            "deployments/Bad Name.toml": 'agent = "b"\n',
            "schedules/s1.toml": schedule + 'cron = "0 8 * * 1-8"\n',
            "schedules/s2.toml": schedule + 'every = "0.5s"\n',
            "schedules/s3.toml": schedule + 'every = "1m"\ntimezone = "Moon/Base"\n',
            "schedules/s4.toml": 'deployment = "nope"\ninput = "x"\nevery = "1m"\n',
            "schedules/s5.toml": schedule + "every = [\n",
        },
    )
    assert _every(root) == [
        ("agents/a.toml", "instructions"),
        ("deployments/Bad Name.toml", "(file name)"),
        ("schedules/s1.toml", "cron"),
        ("schedules/s2.toml", "every"),
        ("schedules/s3.toml", "timezone"),
        ("schedules/s5.toml", "(syntax)"),
        ("deployments/e.toml", "agent"),
        ("schedules/s4.toml", "deployment"),
    ]


def test_every_bad_setting_is_reported_at_once(monkeypatch):
    monkeypatch.setenv("FLEET_LEASE_TTL", "soon")
    monkeypatch.setenv("FLEET_MAX_ATTEMPTS", "0")
    with pytest.raises(ConfigErrors) as info:
        load_settings()
    assert [(e.file, e.key) for e in info.value.every] == [
        ("environment", "FLEET_LEASE_TTL"),
        ("environment", "FLEET_MAX_ATTEMPTS"),
    ]


@pytest.mark.parametrize(
    "text,field",
    [
        (f"max_steps = {_max('max_steps')}\n", "max_steps"),
        (f"max_input_bytes = {_max('max_input_bytes')}\n", "max_input_bytes"),
        (f"[history]\nmax_items = {_max('max_history_items')}\n", "max_history_items"),
        (f"[history]\nmax_bytes = {_max('max_history_bytes')}\n", "max_history_bytes"),
    ],
)
def test_limits_at_their_maximum_are_accepted(tmp_path, text, field):
    agent = load_config(write(tmp_path, {"agents/a.toml": text})).agents["a"]
    got = {
        "max_steps": agent.max_steps,
        "max_input_bytes": agent.max_input_bytes,
        "max_history_items": agent.history.max_items,
        "max_history_bytes": agent.history.max_bytes,
    }
    assert got[field] == _max(field)


def test_name_key_cannot_rename_a_deployment(tmp_path):
    root = write(
        tmp_path,
        {"agents/a.toml": AGENT, "deployments/d.toml": 'agent = "a"\nname = "other"\n'},
    )
    try:
        cfg = load_config(root)
    except ConfigError as exc:
        assert exc.key == "name"
        return
    assert cfg.deployments["d"].name == "d"


def test_nan_debounce_is_refused(tmp_path):
    root = write(
        tmp_path,
        {
            "agents/a.toml": AGENT,
            "deployments/d.toml": 'agent = "a"\n[conversations]\nqueue_mode = "collect"\n'
            "debounce = nan\n",
        },
    )
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert info.value.key == "conversations.debounce"


# --------------------------------------------------------------------------------------------
# the shipped config/ folder


def test_shipped_config():
    cfg = load_config(SHIPPED)
    assert set(cfg.agents) == {"support", "triage", "orders"}
    assert set(cfg.deployments) == {"support", "triage", "orders"}

    support = cfg.deployment("support")
    assert support.agent == "support"
    assert support.kind == "pool"
    assert support.conversations.queue_mode == "followup"
    assert support.conversations.debounce == 2.0
    agent = cfg.agent_for("support")
    assert agent.instructions.startswith("You are a helpful support agent.")
    assert agent.model.provider == "echo"
    assert [t.tool for t in agent.tools] == [
        "current_time",
        "shop.tools:lookup_order",
        "shop.tools:request_refund",
    ]
    assert agent.max_steps == 8
    assert (agent.history.max_items, agent.history.max_bytes) == (20, 32768)

    triage = cfg.deployment("triage")
    assert triage.agent == "triage"
    assert triage.kind == "pool"
    assert triage.conversations.queue_mode == "collect"
    assert triage.conversations.debounce == 2.0
    agent = cfg.agent_for("triage")
    assert agent.instructions == "Summarise what the user reported."
    assert agent.model.provider == "echo"
    assert agent.tools == ()

    orders = cfg.agent_for("orders")  # the worked example: a Python tool and an MCP server
    assert [t.tool for t in orders.tools] == ["shop.tools:lookup_order"]
    assert [(m.name, m.command, m.args, m.lifetime) for m in orders.mcp_servers] == [
        ("parcels", "{python}", ("-m", "shop.parcels"), "worker")
    ]


def test_an_unknown_keys_value_is_not_echoed(tmp_path):
    """It may be a secret in the wrong place (``key`` instead of ``key_sha256``)."""
    root = write(tmp_path, {"agents/a.toml": AGENT + 'api_key = "sk-plaintext-123"\n'})
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert info.value.key == "api_key" and "sk-plaintext-123" not in str(info.value)


def test_durations_have_an_upper_bound():
    assert parse_duration(30 * 24 * 3600) == 30 * 24 * 3600
    with pytest.raises(ValueError, match="at most 30 days"):
        parse_duration("99999999999h")


# -- limits: app-wide in config/fleet.toml, per-agent overrides --------------------------------


def _app(tmp_path: Path, fleet_toml: str, agent: str = 'model = "echo"\n') -> Any:
    root = write_config(tmp_path / "config", {"a": agent, "b": agent}, {"d": 'agent = "a"\n'})
    (root / "fleet.toml").write_text(textwrap.dedent(fleet_toml))
    return load_config(root)


def test_app_wide_limits_apply_unless_an_agent_sets_its_own(tmp_path: Path) -> None:
    cfg = _app(
        tmp_path,
        """
        [limits]
        notes_bytes = 4096
        retention = "7d"
        stored_messages = 500
        [limits.history]
        max_items = 10
        """,
        agent='model = "echo"\n[history]\nmax_bytes = 1000\n',
    )
    a = cfg.agents["a"]
    assert (a.notes_bytes, a.retention, a.stored_messages) == (4096, 7 * 86400.0, 500)
    assert (a.history.max_items, a.history.max_bytes) == (10, 1000)
    assert a.max_input_bytes == LIMITS["max_input_bytes"].default


def test_defaults_without_fleet_toml(tmp_path: Path) -> None:
    root = write_config(tmp_path / "config", {"a": 'model = "echo"\n'}, {"d": 'agent = "a"\n'})
    a = load_config(root).agents["a"]
    assert (a.notes_bytes, a.retention, a.stored_messages) == (8192, 30 * 86400.0, 1000)
    assert load_config(root).app.authorize is None


@pytest.mark.parametrize(
    ("limit", "below", "above"),
    [
        ("notes_bytes", 0, 32_769),
        ("stored_messages", 0, 10_001),
        ("max_input_bytes", 0, 65_537),
        ("history.max_items", 0, 101),
        ("history.max_bytes", 0, 131_073),
    ],
)
def test_limit_bounds_below_at_and_above(tmp_path: Path, limit: str, below: int, above: int):
    table, _, key = limit.rpartition(".")
    section = f"[limits.{table}]" if table else "[limits]"
    for value, ok in ((below, False), (1, True), (above - 1, True), (above, False)):
        if ok:
            _app(tmp_path / str(value), f"{section}\n{key} = {value}\n")
            continue
        with pytest.raises(ConfigError) as info:
            _app(tmp_path / str(value), f"{section}\n{key} = {value}\n")
        assert info.value.file.endswith("fleet.toml")
        assert info.value.key == f"limits.{limit}"
        assert f"must be from 1 to {above - 1}" in info.value.reason
        assert f"got {value}" in info.value.reason


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('"366d"', "at most 365 days"),
        ('"30m"', "from 1h to 365d"),
        ('"forever"', "expected a duration"),
        ("-1", "non-negative"),
    ],
)
def test_retention_bounds(tmp_path: Path, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        _app(tmp_path, f"[limits]\nretention = {value}\n")
    assert info.value.key == "limits.retention" and reason in info.value.reason
    assert (
        _app(tmp_path / "ok", '[limits]\nretention = "365d"\n').agents["a"].retention == 365 * 86400
    )


def test_fleet_toml_refuses_unknown_keys_and_bad_policies(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _app(tmp_path / "1", "[limits]\nbogus = 1\n")
    assert info.value.key == "limits.bogus"
    with pytest.raises(ConfigError) as info:
        _app(tmp_path / "2", 'authorize = "not a ref"\n')
    assert info.value.key == "authorize"
    assert _app(tmp_path / "3", 'authorize = "pol.icy:check"\n').app.authorize == "pol.icy:check"


@pytest.mark.parametrize(
    ("memory", "key", "reason"),
    [
        ('[{ block = "Bad Name" }]', "memory.0.block", "lowercase"),
        ('[{ block = "prefs", mode = "admin" }]', "memory.0.mode", "'read', 'append' or 'write'"),
        ('[{ block = "prefs", colour = 1 }]', "memory.0.colour", "Extra inputs"),
    ],
)
def test_memory_attachments_are_checked(tmp_path: Path, memory: str, key: str, reason: str):
    root = write_config(tmp_path / "config", {"a": f"memory = {memory}\n"}, {"d": 'agent = "a"\n'})
    with pytest.raises(ConfigError) as info:
        load_config(root)
    assert info.value.key == key and reason in info.value.reason
