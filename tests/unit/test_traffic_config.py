"""``[[model_limits]]``, ``[prices]`` and ``[model] fallbacks``: read, and refused naming the file,
the key and the reason (by ``load_config`` and so by ``fleet check``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.checks import run_checks
from fleet.config import load_config
from fleet.errors import ConfigError
from tests.conftest import write_config

GOOD = """
[[model_limits]]
match = "openai:*"
requests_per_minute = 500
burst = 10
tokens_per_minute = 200000
max_concurrent = 32
max_wait = "60s"

[[model_limits]]
match = "openai:gpt-4o*"
requests_per_minute = 100

[prices."openai:gpt-4o-mini"]
input = 0.15
output = 0.60
"""


def _root(tmp_path: Path, fleet_toml: str) -> Path:
    root = write_config(tmp_path / "config")
    (root / "fleet.toml").write_text(fleet_toml)
    return root


def test_the_issues_example_loads(tmp_path: Path) -> None:
    app = load_config(_root(tmp_path, GOOD)).app
    first = app.model_limits[0].limit()
    assert (first.match, first.requests_per_minute, first.burst) == ("openai:*", 500, 10)
    assert (first.tokens_per_minute, first.max_concurrent, first.max_wait_s) == (200000, 32, 60.0)
    assert app.model_limits[1].limit().request_capacity == 2.0  # one second of 100/min
    assert app.prices["openai:gpt-4o-mini"].output == 0.60


@pytest.mark.parametrize(
    ("toml", "key", "reason"),
    [
        (
            '[[model_limits]]\nmatch = "gpt-4o"\nrequests_per_minute = 5\n',
            "model_limits.0.match",
            "glob",
        ),
        ('[[model_limits]]\nmatch = "openai:*"\n', "model_limits.0", "at least one of"),
        (
            '[[model_limits]]\nmatch = "openai:*"\nrequests_per_minute = 0\n',
            "model_limits.0.requests_per_minute",
            "greater than or equal to 1",
        ),
        (
            '[[model_limits]]\nmatch = "openai:*"\nmax_concurrent = 2\nburst = 3\n',
            "model_limits.0",
            "burst needs requests_per_minute",
        ),
        (
            '[[model_limits]]\nmatch = "openai:*"\nmax_concurrent = 2\nmax_wait = "soon"\n',
            "model_limits.0.max_wait",
            "duration",
        ),
        (
            '[[model_limits]]\nmatch = "openai:*"\nmax_concurrent = 2\nrpm = 3\n',
            "model_limits.0.rpm",
            "Extra inputs",
        ),
        ('[prices."gpt-4o"]\ninput = 1\noutput = 2\n', "prices", "'openai:<model>'"),
        (
            '[prices."openai:m"]\ninput = -1\noutput = 2\n',
            "prices.openai:m.input",
            "than or equal to 0",
        ),
    ],
)
def test_bad_keys_name_file_key_and_reason(
    tmp_path: Path, toml: str, key: str, reason: str
) -> None:
    root = _root(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        load_config(root)
    err = caught.value
    assert err.file == str(root / "fleet.toml")
    assert err.key == key
    assert reason in err.reason


def test_fleet_check_reports_a_bad_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path, '[[model_limits]]\nmatch = "openai:*"\nburst = 2\nmax_concurrent = 1\n')
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(root))
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
    failed = [r for r in run_checks() if r.state == "fail"]
    assert failed and failed[0].name == "config"
    assert failed[0].detail == (
        f"{root / 'fleet.toml'}: model_limits.0: burst needs requests_per_minute "
        "(it is a burst of requests)"
    )


def test_fallbacks_are_models_without_fallbacks_of_their_own(tmp_path: Path) -> None:
    agent = (
        '[model]\nprovider = "openai"\nname = "gpt-4o"\n'
        'fallbacks = [{ provider = "anthropic", name = "claude-x", max_retries = 1 }]\n'
    )
    root = write_config(
        tmp_path / "config", agents={"a": agent}, deployments={"d": 'agent = "a"\n'}
    )
    model = load_config(root).agents["a"].model
    assert [c.label for c in model.choices] == ["openai:gpt-4o", "anthropic:claude-x"]
    nested = agent.replace("max_retries = 1", "fallbacks = []")
    (root / "agents" / "a.toml").write_text(nested)
    with pytest.raises(ConfigError) as caught:
        load_config(root)
    assert caught.value.key == "model.fallbacks.0.fallbacks"


def test_fleet_check_shows_what_each_limit_holds_and_warns_of_strays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = '[model]\nprovider = "openai"\nname = "gpt-4o"\n'
    root = write_config(
        tmp_path / "config", agents={"a": agent}, deployments={"d": 'agent = "a"\n'}
    )
    (root / "fleet.toml").write_text(
        '[[model_limits]]\nmatch = "openai:*"\nrequests_per_minute = 5\n'
        '[[model_limits]]\nmatch = "anthropic:*"\nrequests_per_minute = 5\n'
        '[prices."openai:gpt-5"]\ninput = 1\noutput = 2\n'
    )
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(root))
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
    found = [
        (r.name, r.state, r.detail) for r in run_checks() if r.name in ("model limits", "prices")
    ]
    where = root / "fleet.toml"
    assert found == [
        ("model limits", "ok", "openai:*: openai:gpt-4o"),
        (
            "model limits",
            "warn",
            f"{where}: model_limits.1.match: 'anthropic:*' matches no agent's model "
            "(models: openai:gpt-4o)",
        ),
        (
            "prices",
            "warn",
            f"{where}: prices.openai:gpt-5: no agent's model is 'openai:gpt-5' "
            "(models: openai:gpt-4o)",
        ),
    ]
