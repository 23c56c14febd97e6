"""Context selection: which past messages a run's prompt holds, and a record of why (pure).

Newest whole messages first, within an item and a byte budget; rendered oldest first. A message
larger than the whole byte budget is omitted (``oversized``) and selection goes on; the first one
that does not fit in what is left ends it (``byte_limit``), so the history stays contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.constants import PREVIEW_CHARS

DropReason = Literal["oversized", "byte_limit", "item_limit"]


@dataclass(frozen=True, slots=True)
class Record:
    """A stored message as context selection sees it."""

    id: int
    role: str
    content: str

    @property
    def size(self) -> int:
        return len(self.content.encode())

    def ref(self, **extra: Any) -> dict[str, Any]:
        preview = self.content[:PREVIEW_CHARS] + ("…" if len(self.content) > PREVIEW_CHARS else "")
        return {"id": self.id, "role": self.role, "bytes": self.size, "preview": preview, **extra}


@dataclass(frozen=True, slots=True)
class Selection:
    #: Chosen records, oldest first (the order the model sees them).
    selected: tuple[Record, ...]
    #: Records seen but left out, newest first, with the reason.
    dropped: tuple[tuple[Record, DropReason], ...] = ()
    #: Older records exist beyond those fetched (the item limit stopped the query).
    older_unseen: bool = False
    bytes: int = field(default=0)


def select(
    newest_first: Sequence[Record], *, max_items: int, max_bytes: int, more_exist: bool = False
) -> Selection:
    """Pick the newest whole records that fit ``max_items`` and ``max_bytes``."""
    chosen: list[Record] = []
    dropped: list[tuple[Record, DropReason]] = []
    used = 0
    stopped: DropReason | None = None
    for rec in newest_first:
        if stopped is not None:
            dropped.append((rec, stopped))
        elif len(chosen) >= max_items:
            stopped = "item_limit"
            dropped.append((rec, stopped))
        elif rec.size > max_bytes:
            dropped.append((rec, "oversized"))
        elif used + rec.size > max_bytes:
            stopped = "byte_limit"
            dropped.append((rec, stopped))
        else:
            chosen.append(rec)
            used += rec.size
    return Selection(
        selected=tuple(reversed(chosen)),
        dropped=tuple(dropped),
        older_unseen=more_exist,
        bytes=used,
    )


def provenance(sel: Selection, *, max_items: int, max_bytes: int) -> dict[str, Any]:
    """The run's record of what it injected, what it dropped and why."""
    return {
        "limits": {"max_items": max_items, "max_bytes": max_bytes},
        "injected": [r.ref() for r in sel.selected],
        "injected_bytes": sel.bytes,
        "dropped": [r.ref(reason=why) for r, why in sel.dropped],
        "older_unseen": sel.older_unseen,
    }
