"""Shared pieces of fleet's configuration: durations, limit types, strict models, error text."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
)

from fleet.constants import LIMITS, Limit
from fleet.domain import redaction
from fleet.domain.tenancy import tenant_name

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


#: Longest duration any setting takes (a bigger one overflows timers, and is surely a typo).
MAX_DURATION_S = 30 * 24 * 3600.0


def parse_duration(value: Any, maximum: float = MAX_DURATION_S) -> float:
    """Seconds from ``2s``, ``500ms``, ``1.5m``, ``1h``, ``30d`` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '2s' or '500ms', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError(f"expected a duration like '2s' or '500ms', got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration must be a finite, non-negative time, got {value!r}")
    if seconds > maximum:
        raise ValueError(f"a duration must be at most {maximum / 86400:g} days, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _checked(ok: Callable[[Any], object], message: str) -> Any:
    """A field's check after parsing: a value ``ok`` refuses fails with ``message`` (as a
    ``field_validator`` raising ``ValueError(message)`` would)."""

    def check(v: Any) -> Any:
        if not ok(v):
            raise ValueError(message)
        return v

    return AfterValidator(check)


def _at_least(minimum: float, message: str) -> Any:
    """A number of at least ``minimum``, else ``message``."""
    return _checked(lambda v: v >= minimum, message)


def _matching(pattern: re.Pattern[str], message: str) -> Any:
    """A string ``pattern`` must match, else ``message``."""
    return _checked(pattern.match, message)


def _env_name(example: str) -> Any:
    """A string naming an environment variable (the message shows ``example``)."""
    return _matching(_ENV_NAME, f"must be an environment variable name like {example}")


_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")

#: A duration greater than zero.
PositiveDuration = Annotated[Duration, _checked(lambda v: v > 0, "must be greater than zero")]


def _retention(value: Any) -> float:
    lim = LIMITS["retention_days"]
    seconds = parse_duration(value, maximum=lim.maximum * 86400.0)
    if seconds < 3600:
        raise ValueError(f"must be from 1h to {lim.maximum}d, got {value!r}")
    return seconds


#: How long a conversation keeps its messages: ``30d``, ``12h``, at most 365 days.
Retention = Annotated[float, BeforeValidator(_retention)]


@dataclass(frozen=True)
class LimitRange:
    """A check that a limit is a whole number from 1 to its maximum, naming the range (the
    configuration reference reads ``limit`` to show the range)."""

    limit: Limit

    def __call__(self, v: int) -> int:
        if not 1 <= v <= self.limit.maximum:
            raise ValueError(f"must be from 1 to {self.limit.maximum} ({self.limit.doc}), got {v}")
        return v


def _in_range(name: str) -> Any:
    return AfterValidator(LimitRange(LIMITS[name]))


HistoryItems = Annotated[StrictInt, _in_range("max_history_items")]
HistoryBytes = Annotated[StrictInt, _in_range("max_history_bytes")]
InputBytes = Annotated[StrictInt, _in_range("max_input_bytes")]
Steps = Annotated[StrictInt, _in_range("max_steps")]
NotesBytes = Annotated[StrictInt, _in_range("notes_bytes")]
StoredMessages = Annotated[StrictInt, _in_range("stored_messages")]


def _reason(err: Any) -> str:
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    # An unknown key's value is not shown: it may be a secret put in the wrong place; nor is a
    # whole table or array (it may hold one, and the message already names the key).
    if (
        "input" in err
        and err.get("type") not in ("missing", "extra_forbidden")
        and not isinstance(err["input"], dict | list | tuple)
    ):
        # (a URL's password is masked: ``https://user:[REDACTED]@host``)
        shown = redaction.DEFAULT.text(repr(err["input"]))
        if shown not in msg:
            return f"{msg} (got {shown})"
    return msg


# --------------------------------------------------------------------------------------------
# config/ files


_TYPE_TAG = re.compile(r"(int|float|str|bool|list|tuple|dict)(\[.*\])?|[a-z-]+\[.*\]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _limit(name: str) -> Any:
    lim = LIMITS[name]
    return Field(default=lim.default, description=lim.doc)


_POINTER = re.compile(r"^(/([^~/]|~[01])*)*$")
_TOOL_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")


class TenantRef(_Strict):
    """The ``tenant = "…"`` key that callers and triggers share."""

    #: The tenant it belongs to (default: one named after the file).
    tenant: str | None = None

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str | None) -> str | None:
        return None if v is None else tenant_name(v)
