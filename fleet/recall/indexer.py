"""Embedding stored messages, off the hot path (a background task after a run settles)."""

from __future__ import annotations

import uuid
from datetime import datetime

from fleet.recall.embeddings import Embedder, to_bytes
from fleet.store.recall import RecallStore

#: Messages embedded per batch (one embedder call, one insert).
BATCH = 256


def embed_pending(
    store: RecallStore,
    embedder: Embedder,
    conversation_id: uuid.UUID,
    *,
    namespace: str,
    now: datetime,
    batches: int = 20,
) -> int:
    """Embed the conversation's messages that have no vector yet; returns how many."""
    done = 0
    for _ in range(batches):
        rows = store.unembedded(conversation_id, limit=BATCH)
        if not rows:
            break
        vectors = embedder.embed([r.content for r in rows])
        done += store.save_embeddings(
            rows,
            [to_bytes(v) for v in vectors],
            namespace=namespace,
            model=embedder.name,
            now=now,
        )
        if len(rows) < BATCH:
            break
    return done
