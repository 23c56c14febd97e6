"""README.md and the docs pages are checked against the code they document: limits, settings and
the two commands (the generated references are checked in test_docs_site.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.constants import LIMITS
from tests.support.docs import page, plugin

README = (Path(__file__).parents[2] / "README.md").read_text()
#: The page with the limits table.
CONFIGURATION = page("configuration.md")

#: Limit names on the Configuration page by constants.LIMITS key.
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
def test_every_setting_is_in_the_settings_reference(field: str) -> None:
    assert f"| `FLEET_{field.upper()}` |" in plugin("config_reference").render()


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_every_limit_row_matches_the_constants(key: str) -> None:
    limit = LIMITS[key]
    row = re.search(
        rf"^\| `{re.escape(LIMIT_NAMES[key])}` \| (\d+) \| (\d+) \|", CONFIGURATION, re.M
    )
    assert row is not None, f"no limits row for {key} in docs/configuration.md"
    assert (int(row.group(1)), int(row.group(2))) == (limit.default, limit.maximum)


def test_the_two_commands_are_named() -> None:
    assert "pip install -e '.[dev]'" in README
    assert 'fleet run support "My order hasn\'t arrived" --conversation ticket-4711' in README
    assert "make test" in README


def test_the_readme_says_plainly_how_the_echo_model_calls_a_tool() -> None:
    """The tour's tool example: which lines make the echo model call a tool, with what."""
    prose = " ".join(README.split())
    assert (
        "For each line of its input that reads `/tool NAME {json}`, the echo model calls the "
        "tool NAME with those JSON arguments, then replies." in prose
    )
    assert "of its input names" not in prose


def test_the_readme_stays_short_and_links_the_docs() -> None:
    assert len(README.splitlines()) <= 300
    for target in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (Path(__file__).parents[2] / target).is_file(), target
