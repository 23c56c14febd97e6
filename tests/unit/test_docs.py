"""README.md is checked against the code it documents: settings and limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.constants import LIMITS

README = (Path(__file__).parents[2] / "README.md").read_text()

#: README limit names by constants.LIMITS key.
LIMIT_NAMES = {
    "max_history_items": "history.max_items",
    "max_history_bytes": "history.max_bytes",
    "max_input_bytes": "max_input_bytes",
    "max_steps": "max_steps",
    "notes_bytes": "notes_bytes",
    "retention_days": "retention",
    "stored_messages": "stored_messages",
}


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_in_the_settings_table(field: str) -> None:
    assert f"| `FLEET_{field.upper()}` |" in README


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_every_limit_row_matches_the_constants(key: str) -> None:
    limit = LIMITS[key]
    row = re.search(rf"^\| `{re.escape(LIMIT_NAMES[key])}` \| (\d+) \| (\d+) \|", README, re.M)
    assert row is not None, f"no README limits row for {key}"
    assert (int(row.group(1)), int(row.group(2))) == (limit.default, limit.maximum)


def test_the_two_commands_are_named() -> None:
    assert "pip install -e '.[dev]'" in README
    assert 'fleet run support "My order hasn\'t arrived" --conversation ticket-4711' in README
    assert "make test" in README
