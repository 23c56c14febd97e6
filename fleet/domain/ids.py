"""Task ids as people type them: a whole UUID, or a unique prefix of one (as git and docker take).

A prefix is hex digits, case-insensitive, with the UUID's dashes optional (``67bdb609-1a2b``
and ``67bdb6091a2b`` are one prefix). The store finds its tasks as the range of ids from the
prefix padded with ``0`` to the prefix padded with ``f``: an index range on PostgreSQL's uuid
and on SQLite's 32-hex-digit text alike.
"""

from __future__ import annotations

import string
import uuid
from dataclasses import dataclass

from fleet.constants import MIN_TASK_ID_PREFIX, SHORT_TASK_ID_CHARS
from fleet.errors import InputError

_HEX = frozenset(string.hexdigits)
#: What ``fleet tasks ls`` printed before ids were short: a cut id ending in an ellipsis.
_ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class IdPrefix:
    """A prefix as typed (for messages) and as lowercase hex digits without dashes."""

    typed: str
    hex: str

    def bounds(self) -> tuple[uuid.UUID, uuid.UUID]:
        """The lowest and highest id that start with this prefix."""
        return uuid.UUID(self.hex.ljust(32, "0")), uuid.UUID(self.hex.ljust(32, "f"))


def hex_prefix(value: str, *, field: str = "id") -> IdPrefix:
    """The prefix ``value`` stands for (a whole id is a prefix too); InputError if none."""
    typed = value.strip()
    digits = typed.removesuffix(_ELLIPSIS).replace("-", "").lower()
    if not (MIN_TASK_ID_PREFIX <= len(digits) <= 32) or not _HEX.issuperset(digits):
        raise InputError(
            f"task id {value!r} is not a UUID or a prefix of one (at least "
            f"{MIN_TASK_ID_PREFIX} hex characters); see `fleet tasks ls` for ids",
            field=field,
        )
    return IdPrefix(typed, digits)


def parse_ref(value: str) -> uuid.UUID | IdPrefix:
    """A whole id as a UUID, else the prefix it is; InputError if it is neither."""
    try:
        return uuid.UUID(value.strip())
    except ValueError:
        return hex_prefix(value)


def short(task_id: str) -> str:
    """The id as ``fleet tasks ls`` shows it: its first characters, which show/cancel accept."""
    return task_id[:SHORT_TASK_ID_CHARS]
