"""Context selection: which past messages a run's prompt holds, and a record of why (pure).

Newest whole messages first, within an item, a byte and (optionally) a token budget; rendered
oldest first. A message larger than a whole budget is omitted (``oversized``) and selection goes
on; the first one that does not fit in what is left ends it (``byte_limit``, ``token_limit``), so
the history stays contiguous.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.constants import PREVIEW_CHARS

DropReason = Literal["oversized", "byte_limit", "token_limit", "item_limit", "undelivered"]


@dataclass(frozen=True, slots=True)
class Record:
    """A stored message as context selection sees it."""

    id: int
    role: str
    content: str
    #: ``accepted`` (input), ``sent`` or a delivery's ``pending`` / ``failed`` / ``unknown``.
    delivery: str = field(default="sent", compare=False)

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
    #: Tokens of the selected records (0 when no token budget applied).
    tokens: int = 0
    #: Tokens per record id, for the records a token budget priced.
    priced: dict[int, int] = field(default_factory=dict)


def select(
    newest_first: Sequence[Record],
    *,
    max_items: int,
    max_bytes: int,
    more_exist: bool = False,
    max_tokens: int | None = None,
    cost: Callable[[Record], int] | None = None,
    keep: Callable[[Record], bool] | None = None,
) -> Selection:
    """Pick the newest whole records that fit ``max_items``, ``max_bytes`` and ``max_tokens``
    (tokens counted by ``cost``, which is required with a token budget).

    ``keep`` (``remember = "delivered"``) leaves records out first (``undelivered``): they
    count against no limit and do not end the selection.
    """
    chosen: list[Record] = []
    dropped: list[tuple[Record, DropReason]] = []
    priced: dict[int, int] = {}
    used = tokens = 0
    stopped: DropReason | None = None
    for rec in newest_first:
        if keep is not None and not keep(rec):
            dropped.append((rec, "undelivered"))
            continue
        if stopped is not None:
            dropped.append((rec, stopped))
            continue
        if len(chosen) >= max_items:
            stopped = "item_limit"
            dropped.append((rec, stopped))
            continue
        price = 0
        if max_tokens is not None:
            assert cost is not None, "a token budget needs a cost function"
            price = priced[rec.id] = cost(rec)
        if rec.size > max_bytes or (max_tokens is not None and price > max_tokens):
            dropped.append((rec, "oversized"))
        elif used + rec.size > max_bytes:
            stopped = "byte_limit"
            dropped.append((rec, stopped))
        elif max_tokens is not None and tokens + price > max_tokens:
            stopped = "token_limit"
            dropped.append((rec, stopped))
        else:
            chosen.append(rec)
            used += rec.size
            tokens += price
    return Selection(
        selected=tuple(reversed(chosen)),
        dropped=tuple(dropped),
        older_unseen=more_exist,
        bytes=used,
        tokens=tokens,
        priced=priced,
    )


def provenance(
    sel: Selection,
    *,
    max_items: int,
    max_bytes: int,
    tokens: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's record of what it injected, what it dropped and why.

    ``tokens`` (with a token budget): the limits and the tokenizer that counted; each record
    then also says how many tokens it cost.
    """

    def ref(r: Record, **extra: Any) -> dict[str, Any]:
        if r.id in sel.priced:
            extra["tokens"] = sel.priced[r.id]
        return r.ref(**extra)

    out: dict[str, Any] = {
        "limits": {"max_items": max_items, "max_bytes": max_bytes},
        "injected": [ref(r) for r in sel.selected],
        "injected_bytes": sel.bytes,
        "dropped": [
            ref(r, reason=why, **({"delivery": r.delivery} if why == "undelivered" else {}))
            for r, why in sel.dropped
        ],
        "older_unseen": sel.older_unseen,
    }
    if tokens is not None:
        out["limits"].update(tokens.get("limits", {}))
        out["injected_tokens"] = sel.tokens
        out["tokenizer"] = tokens.get("tokenizer")
    return out
