"""How memory blocks look: one JSON shape for the memory API and ``fleet memory`` (against the
store or through a server), so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleet.domain.blocks import Block, BlockVersion
from fleet.views import iso

View = dict[str, Any]


def block_json(b: Block, *, value: bool = True) -> View:
    """A block (``value``: with its value; listings leave it out)."""
    out: View = {
        "namespace": b.namespace,
        "block": b.name,
        "title": b.title,
        "description": b.description,
        "version": b.version,
        "bytes": len(b.value.encode()),
        "updatedAt": iso(b.updated_at),
    }
    if value:
        out["value"] = b.value
    return out


def history_json(namespace: str, block: str, versions: Iterable[BlockVersion]) -> View:
    """Every version of a block, oldest first: who wrote it, when, and its value."""
    return {
        "namespace": namespace,
        "block": block,
        "versions": [
            {
                "version": v.version,
                "author": v.author,
                "createdAt": iso(v.created_at),
                "value": v.value,
            }
            for v in versions
        ],
    }
