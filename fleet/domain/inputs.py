"""A submission's input: text or a list of parts, validated and measured (pure)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from fleet.constants import (
    DEFAULT_PRIORITY,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_PRIORITY,
    MAX_SAFE_INTEGER,
)
from fleet.domain.values import DataPart, Part, TextPart
from fleet.errors import InputError

_PARTS: TypeAdapter[tuple[TextPart | DataPart, ...]] = TypeAdapter(tuple[Part, ...])


def part_bytes(part: TextPart | DataPart) -> int:
    if isinstance(part, TextPart):
        return len(part.text.encode())
    return len(json.dumps(part.data, sort_keys=True).encode())


def parse(
    value: str | Sequence[Any], max_bytes: int
) -> tuple[tuple[TextPart | DataPart, ...], int]:
    """Text becomes one text part; a list must hold ``{"type": "text"|"data", …}`` parts."""
    if isinstance(value, str):
        parts: tuple[TextPart | DataPart, ...] = (TextPart(text=value),)
    else:
        try:
            parts = _PARTS.validate_python(
                [p.model_dump() if isinstance(p, TextPart | DataPart) else p for p in value]
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"][:2])
            raise InputError(
                f'input part {where}: {err["msg"]}; a part is {{"type": "text", "text": "…"}} '
                'or {"type": "data", "data": {…}}',
                field="input",
            ) from None
    for i, part in enumerate(parts):
        why = unstorable(part.text if isinstance(part, TextPart) else part.data)
        if why is not None:
            raise InputError(f"input part {i}: {why}", field="input")
    if not parts or all(isinstance(p, TextPart) and not p.text.strip() for p in parts):
        raise InputError("input is empty; send the text the agent should work on", field="input")
    size = sum(part_bytes(p) for p in parts)
    if size > max_bytes:
        raise InputError(
            f"input is {size} bytes; this deployment accepts at most {max_bytes} "
            "(split it, or raise max_input_bytes in the agent's config)",
            field="input",
        )
    return parts, size


def unstorable(value: Any) -> str | None:
    """Why a JSON value cannot be stored: a NUL, invalid Unicode, NaN or infinity; or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"holds the number {value}, which JSON cannot carry; send a finite number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        return (
            f"holds an integer beyond ±{MAX_SAFE_INTEGER} (2**53 - 1), which JSON peers cannot "
            "carry exactly; send it as a string"
        )
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (U+0000), which cannot be stored; remove it"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"is not valid Unicode text (lone surrogate at position {exc.start})"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            why = unstorable(k) or unstorable(v)
            if why is not None:
                return why
    elif isinstance(value, list):
        for v in value:
            why = unstorable(v)
            if why is not None:
                return why
    return None


def resource_id(value: str | None) -> str | None:
    """A submission's resource (who or what it is about across conversations), or None."""
    return _printable(value, "resource id", "resourceId")


def idempotency_key(value: str | None) -> str | None:
    return _printable(value, "idempotency key", "idempotencyKey")


def _printable(value: str | None, what: str, field: str) -> str | None:
    """None, or ``value`` if it is 1 to ``MAX_IDEMPOTENCY_KEY_CHARS`` printable characters."""
    if value is None:
        return None
    if not value or len(value) > MAX_IDEMPOTENCY_KEY_CHARS or not value.isprintable():
        raise InputError(
            f"{what} {value!r} must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} printable characters",
            field=field,
        )
    return value


def priority(own: int | None, deployment: int | None = None) -> int:
    """A task's priority among its tenant's due work: its own, else its deployment's, else
    ``DEFAULT_PRIORITY`` (0-9, higher runs first)."""
    chosen = own if own is not None else deployment
    if chosen is None:
        return DEFAULT_PRIORITY
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen <= MAX_PRIORITY:
        raise InputError(
            f"priority {chosen!r} must be a whole number from 0 to {MAX_PRIORITY} (higher first)",
            field="priority",
        )
    return chosen
