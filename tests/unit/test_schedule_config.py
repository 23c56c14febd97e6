"""``config/schedules``: every key checked, each error naming the file, the key and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.config import load_config
from fleet.errors import ConfigError
from tests.conftest import write_config

GOOD = 'deployment = "chat"\ncron = "0 8 * * 1-5"\ntimezone = "Europe/Berlin"\ninput = "Digest."\n'


def _load(tmp_path: Path, body: str, callers: dict[str, str] | None = None) -> object:
    root = write_config(tmp_path / "config")
    (root / "schedules").mkdir()
    (root / "schedules" / "digest.toml").write_text(body)
    if callers:
        (root / "callers").mkdir()
        for name, text in callers.items():
            (root / "callers" / f"{name}.toml").write_text(text)
    return load_config(root)


def test_a_schedule_file_loads(tmp_path: Path) -> None:
    body = GOOD + 'conversation = "daily"\nend_at = 2027-06-30T00:00:00Z\noverlap = "queue"\n'
    config = _load(tmp_path, body)
    sched = config.schedules["digest"]  # type: ignore[attr-defined]
    assert sched.deployment == "chat" and sched.conversation == "daily"
    assert sched.catch_up == "latest" and sched.overlap == "queue"
    assert sched.end_at.year == 2027 and sched.caller is None


OPS = 'source = "api"\nkey_sha256 = "' + "a" * 64 + '"\ndeployments = ["chat"]\n'


@pytest.mark.parametrize(
    ("body", "key", "says"),
    [
        (GOOD.replace("0 8 * * 1-5", "0 8 * * 1-8"), "cron", "day of week 8 is out of range"),
        (GOOD.replace("0 8 * * 1-5", "0 8 * *"), "cron", "has 4 fields"),
        (GOOD.replace("Europe/Berlin", "Europe/Berlinn"), "timezone", "not a time zone name"),
        (GOOD.replace('cron = "0 8 * * 1-5"', 'every = "500ms"'), "every", "at least 1s"),
        (GOOD.replace('cron = "0 8 * * 1-5"', 'every = "soon"'), "every", "expected a duration"),
        (GOOD + 'every = "15m"\n', "(top level)", "exactly one of cron"),
        (GOOD.replace('cron = "0 8 * * 1-5"\n', ""), "(top level)", "exactly one of cron"),
        (GOOD + 'overlap = "wait"\n', "overlap", "'skip' or 'queue'"),
        (GOOD + 'catch_up = "all"\n', "catch_up", "'latest' or 'none'"),
        (GOOD + 'end_at = "2027-06-30T00:00:00"\n', "end_at", "timezone"),
        (GOOD.replace('"chat"', '"nope"'), "deployment", "no deployment named 'nope'"),
        (GOOD + 'caller = "ops"\n', "caller", "no callers are configured"),
        (GOOD + "cronn = 1\n", "cronn", "Extra inputs are not permitted"),
        (GOOD.replace('input = "Digest."', 'input = ""'), "input", "at least 1 character"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, body: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, body)
    assert info.value.file.endswith("schedules/digest.toml")
    assert info.value.key == key
    assert says in info.value.reason


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("", "required once callers are configured"),
        ('caller = "nobody"\n', "no caller named 'nobody' (known: ops)"),
    ],
)
def test_the_caller_must_exist_once_callers_are_configured(
    tmp_path: Path, line: str, says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, GOOD + line, callers={"ops": OPS})
    assert info.value.key == "caller" and says in info.value.reason


def test_the_caller_must_may_use_the_deployment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="caller 'ops' may not use deployment 'solo'"):
        _load(
            tmp_path,
            GOOD.replace('"chat"', '"solo"') + 'caller = "ops"\n',
            callers={"ops": OPS},
        )
    config = _load(tmp_path / "ok", GOOD + 'caller = "ops"\n', callers={"ops": OPS})
    assert config.schedules["digest"].caller == "ops"  # type: ignore[attr-defined]
