"""Semantic recall's decisions (pure): filters, scoring, picking hits, expanding them.

Scores are cosine similarities of normalized embeddings; the hits are the ``top_k`` best at or
above ``threshold``, each expanded by ``message_range`` neighbours of its conversation, with
what is already in the run's recent window left out (it is there anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

#: The filter operators (the provenance-backed memory reference's).
OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
#: What a filter may name: the message's role, when it was said, and its task's labels.
FIELDS = ("role", "created_at")


def check_filter(flt: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise ValueError naming the field or operator a filter gets wrong."""
    for name, ops in flt.items():
        if name not in FIELDS and not (name.startswith("labels.") and len(name) > 7):
            raise ValueError(f"filter field {name!r}: use role, created_at or labels.<label name>")
        if not isinstance(ops, Mapping) or not ops:
            raise ValueError(
                f"filter field {name!r}: give {{ op = value }}, e.g. {{ eq = 'user' }}"
            )
        for op, value in ops.items():
            if op not in OPERATORS:
                raise ValueError(
                    f"filter field {name!r}: operator {op!r} is not one of {', '.join(OPERATORS)}"
                )
            if op in ("in", "nin") and not isinstance(value, list | tuple):
                raise ValueError(f"filter field {name!r}: {op} takes a list")


def _value(record: Mapping[str, Any], name: str) -> Any:
    if name.startswith("labels."):
        return (record.get("labels") or {}).get(name[7:])
    return record.get(name)


def _compare(actual: Any, op: str, wanted: Any) -> bool:
    if op == "in":
        return actual in wanted
    if op == "nin":
        return actual not in wanted
    if op == "eq":
        return bool(actual == wanted)
    if op == "ne":
        return bool(actual != wanted)
    if actual is None:
        return False
    if isinstance(actual, datetime) and isinstance(wanted, str):
        wanted = datetime.fromisoformat(wanted.replace("Z", "+00:00"))
        if wanted.tzinfo is None:  # a date or a time without a zone: UTC, as fleet stores
            wanted = wanted.replace(tzinfo=UTC)
    try:
        return bool(
            {
                "gt": actual > wanted,
                "gte": actual >= wanted,
                "lt": actual < wanted,
                "lte": actual <= wanted,
            }[op]
        )
    except TypeError:  # not comparable (a label that is no number, say): not a match
        return False


def matches(record: Mapping[str, Any], flt: Mapping[str, Mapping[str, Any]]) -> bool:
    """Does a message (``role``, ``created_at``, ``labels``) pass every condition?"""
    return all(
        _compare(_value(record, name), op, wanted)
        for name, ops in flt.items()
        for op, wanted in ops.items()
    )


def normalized(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32)
    return out


def best(
    query: npt.NDArray[np.float32],
    candidates: npt.NDArray[np.float32],
    *,
    top_k: int,
    threshold: float,
) -> list[tuple[int, float]]:
    """(index, score) of the ``top_k`` candidates most like ``query``, best first, each at
    least ``threshold``; exact (every candidate scored)."""
    if len(candidates) == 0:
        return []
    scores = normalized(candidates) @ normalized(query.reshape(1, -1))[0]
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [
        (int(i), round(float(scores[i]), 4))
        for i in order
        if math.isfinite(float(scores[i])) and scores[i] >= threshold
    ]


def expand(
    hits: Sequence[int], neighbours: Mapping[int, Sequence[int]], already: set[int]
) -> list[int]:
    """The messages to show for ``hits`` (message ids, best first): each hit with its
    neighbours, in conversation order within a hit, without repeats or what is ``already`` in
    the prompt."""
    shown: list[int] = []
    seen = set(already)
    for hit in hits:
        for mid in sorted({hit, *neighbours.get(hit, ())}):
            if mid not in seen:
                seen.add(mid)
                shown.append(mid)
    return shown
