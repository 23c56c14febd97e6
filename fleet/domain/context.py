"""Context selection: which past messages a run's prompt holds, and a record of why (pure).

Newest whole turns first, within an item, a byte and (optionally) a token budget; rendered oldest
first. A turn is a task's messages: its input (and any message steered into its run) with the
reply that answered them, so the model never sees an answer without its question. A turn larger
than a whole budget is omitted (``oversized``) and selection goes on; the first one that does not
fit in what is left ends it (``item_limit``, ``byte_limit``, ``token_limit``), so the history
stays contiguous.
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
    #: The ``seq`` of the task (turn) the message belongs to; None once that task is gone.
    seq: int | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return len(self.content.encode())

    def ref(self, **extra: Any) -> dict[str, Any]:
        preview = self.content[:PREVIEW_CHARS] + ("…" if len(self.content) > PREVIEW_CHARS else "")
        return {
            "id": self.id,
            "seq": self.seq,
            "role": self.role,
            "bytes": self.size,
            "preview": preview,
            **extra,
        }


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


def turns(newest_first: Sequence[Record]) -> list[list[Record]]:
    """The records grouped by turn, newest turn first, each newest record first.

    A turn's records share their task's ``seq``; where it is gone (``None``), a turn is a
    reply with the user messages before it (going back, a reply starts the next turn).
    """
    grouped: list[list[Record]] = []
    for rec in newest_first:
        if grouped and _same_turn(grouped[-1], rec):
            grouped[-1].append(rec)
        else:
            grouped.append([rec])
    return grouped


def _same_turn(turn: list[Record], older: Record) -> bool:
    seq = turn[-1].seq
    if seq is not None or older.seq is not None:  # a task's messages all have a seq, or none
        return seq == older.seq
    return older.role != "assistant"


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
    """Pick the newest whole turns that fit ``max_items``, ``max_bytes`` and ``max_tokens``
    (tokens counted by ``cost``, which is required with a token budget).

    ``keep`` (``remember = "delivered"``) leaves records out first (``undelivered``): they
    count against no limit and do not end the selection. With ``more_exist`` the oldest turn
    given may lack its first messages (they were not read): it is left out (``item_limit``).
    """
    chosen: list[Record] = []
    dropped: list[tuple[Record, DropReason]] = []
    priced: dict[int, int] = {}
    used = tokens = 0
    stopped: DropReason | None = None
    grouped = turns(newest_first)
    for i, turn in enumerate(grouped):
        kept = [r for r in turn if keep is None or keep(r)]
        verdict: DropReason | None = stopped
        if verdict is None and kept and len(chosen) >= max_items:
            verdict = stopped = "item_limit"
        if verdict is None and kept:
            size = sum(r.size for r in kept)
            price = 0
            if max_tokens is not None:
                assert cost is not None, "a token budget needs a cost function"
                for r in kept:
                    priced[r.id] = cost(r)
                price = sum(priced[r.id] for r in kept)
            if (
                len(kept) > max_items
                or size > max_bytes
                or (max_tokens is not None and price > max_tokens)
            ):
                verdict = "oversized"
            elif len(chosen) + len(kept) > max_items:
                verdict = stopped = "item_limit"
            elif used + size > max_bytes:
                verdict = stopped = "byte_limit"
            elif max_tokens is not None and tokens + price > max_tokens:
                verdict = stopped = "token_limit"
            elif more_exist and i == len(grouped) - 1:  # it may begin before what was read
                verdict = stopped = "item_limit"
            else:
                chosen.extend(kept)
                used += size
                tokens += price
        for rec in turn:
            if keep is not None and not keep(rec):
                dropped.append((rec, "undelivered"))
            elif verdict is not None:
                dropped.append((rec, verdict))
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
