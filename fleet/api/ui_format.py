"""How the operator UI's templates show values: times, durations, ids, JSON, cut text."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

#: Characters of a tool's arguments or result shown before "show all".
CUT_CHARS = 400
#: What an empty cell shows (an en dash).
NONE = "\N{EN DASH}"


def when(value: str | datetime | None) -> str:
    """``2026-11-30T07:30:12.123Z`` → ``2026-11-30 07:30:12`` (UTC)."""
    if value is None:
        return NONE
    if isinstance(value, datetime):
        value = value.astimezone(UTC).isoformat()
    return value[:19].replace("T", " ")


def ago(seconds: float | None) -> str:
    if seconds is None or seconds <= 0:
        return NONE
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def since(value: datetime | None, now: datetime) -> str:
    return NONE if value is None else ago((now - value).total_seconds())


def ms(value: float | None) -> str:
    return NONE if value is None else f"{value:,.1f}"


def short(value: Any) -> str:
    return str(value)[:8]


def as_json(value: Any) -> str:
    """A value as the model sent or received it: text as is, the rest as indented JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def cut(text: str, n: int = CUT_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


FILTERS: dict[str, Callable[..., Any]] = {
    "when": when,
    "ago": ago,
    "since": since,
    "ms": ms,
    "short": short,
    "as_json": as_json,
    "cut": cut,
}
