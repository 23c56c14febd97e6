"""Semantic recall at a run's start: the input's nearest older messages, explained.

The candidates are the newest ``max_candidates`` embedded messages of the conversation, or of
the resource's conversations in the same scope and namespace. They are scored by the database
where it has vector search (pgvector, sqlite-vec: ``fleet.store.nearest``), else here, exactly
(every candidate scored, vectors pooled in this process); both give the same hits. The hits are
expanded by their neighbours and shown as one user message before the recent window, labelled
as recalled; the run's provenance records the method, each hit with its score, what was shown,
and how many messages were not embedded yet (not recallable yet).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleet.config import RecallConfig
from fleet.constants import PREVIEW_CHARS
from fleet.domain import recall as rules
from fleet.domain.values import Task
from fleet.recall.embeddings import Embedder, from_bytes, to_bytes
from fleet.store import Store
from fleet.store.recall import Candidate

_pool_lock = threading.Lock()

#: What precedes recalled messages in the prompt.
RECALL_PREAMBLE = (
    "Recalled from earlier messages by similarity to this one (they may be outdated; the "
    "recent conversation follows after):"
)
#: Characters of one recalled message shown (whole messages up to this).
RECALLED_CHARS = 2_000


class Pool:
    """The vectors of one search scope (a conversation, or a resource), kept in memory and
    topped up with only what was embedded since: a search reads its new rows, not all."""

    def __init__(self) -> None:
        self.candidates: list[Candidate] = []
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.newest = 0
        self.loaded_at = 0.0

    def refresh(self, fresh: list[Candidate], limit: int) -> None:
        if not fresh:
            return
        kept = [*reversed(fresh), *self.candidates][:limit]  # newest first
        rows = [from_bytes(x.vector) for x in reversed(fresh)]
        matrix = (
            np.stack(rows) if not len(self.matrix) else np.vstack([np.stack(rows), self.matrix])
        )
        self.candidates, self.matrix = kept, matrix[:limit]
        self.newest = max(self.newest, fresh[0].message_id)


class Pools:
    """Pools by search scope, each rebuilt from scratch after ``TTL_S`` (messages deleted or
    reset meanwhile leave it then; until then a recalled message is checked to still exist)."""

    TTL_S = 60.0
    MAX = 256

    def __init__(self) -> None:
        self._pools: dict[tuple[Any, ...], Pool] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Pool:
        with self._lock:
            pool = self._pools.get(key)
            if pool is None or time.monotonic() - pool.loaded_at > self.TTL_S:
                if len(self._pools) >= self.MAX:
                    self._pools.pop(next(iter(self._pools)))
                pool = self._pools[key] = Pool()
                pool.loaded_at = time.monotonic()
            return pool


#: This process's pools (a worker serves many conversations).
POOLS = Pools()


@dataclass(frozen=True)
class Recall:
    """What recall adds to a prompt: the message (None: nothing found) and its record."""

    text: str | None
    record: dict[str, Any]


def _preview(text: str) -> str:
    return text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")


def recall(
    store: Store,
    embedder: Embedder,
    cfg: RecallConfig,
    task: Task,
    query: str,
    *,
    namespace: str,
    already: Set[int],
) -> Recall:
    """Search for ``query`` as ``cfg`` says; ``already`` are ids in the prompt anyway."""
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "scope": cfg.scope,
        "top_k": cfg.top_k,
        "threshold": cfg.threshold,
        "message_range": cfg.message_range,
        "embedder": embedder.name,
    }
    by_resource = cfg.scope == "resource" and task.resource_id is not None
    if cfg.scope == "resource" and task.resource_id is None:
        record["note"] = "the task has no resourceId: searched its own conversation"
    where: dict[str, Any] = (
        {
            "tenant": task.tenant,
            "scope": task.scope,
            "namespace": namespace,
            "resource_id": task.resource_id,
        }
        if by_resource
        else {"conversation_id": task.conversation_id}
    )
    method = store.vector_search.method
    record["method"] = method
    search = _exact if method == "exact" else _in_database
    hits, record["searched"] = search(_Search(store, embedder, cfg, query, where, already))
    record["not_embedded_yet"] = store.pending_embeddings(task.conversation_id)
    if not hits:
        record["ms"] = round((time.perf_counter() - t0) * 1000, 3)
        record["hits"] = record["recalled"] = []
        return Recall(None, record)
    neighbours = store.neighbours([h for h, _ in hits], cfg.message_range)
    shown_ids = rules.expand([h for h, _ in hits], neighbours, set(already))
    shown = store.recalled(shown_ids)
    scores = dict(hits)
    record["hits"] = [
        {
            "id": x.id,
            "conversation": x.conversation,
            "seq": x.seq,
            "role": x.role,
            "score": scores[x.id],
            "preview": _preview(x.content),
        }
        for x in shown
        if x.id in scores
    ]
    record["recalled"] = [
        {
            "id": x.id,
            "conversation": x.conversation,
            "seq": x.seq,
            "role": x.role,
            "preview": _preview(x.content),
            **({"score": scores[x.id]} if x.id in scores else {}),
            "hit": x.id in scores,
        }
        for x in shown
    ]
    record["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    if not shown:
        return Recall(None, record)
    lines = [
        f"- [{x.conversation}, {x.role}, {x.created_at:%Y-%m-%d %H:%M}] "
        f"{x.content[:RECALLED_CHARS]}"
        for x in shown
    ]
    return Recall(RECALL_PREAMBLE + "\n" + "\n".join(lines), record)


@dataclass(frozen=True, slots=True)
class _Search:
    """One recall search, as either way of scoring takes it."""

    store: Store
    embedder: Embedder
    cfg: RecallConfig
    query: str
    #: Whose messages: a conversation's, or a resource's across its conversations.
    where: dict[str, Any]
    #: Messages already in the context (not recalled again).
    already: Set[int]


def _exact(search: _Search) -> tuple[list[tuple[int, float]], int]:
    """Score every candidate here (vectors pooled in this process); (hits, searched)."""
    store, embedder, cfg, query = search.store, search.embedder, search.cfg, search.query
    where, already = search.where, search.already
    # keyed by database too: a process (tests, tools) may open more than one
    database = store.engine.url.render_as_string(hide_password=True)
    cached = POOLS.get((database, embedder.name, cfg.max_candidates, *sorted(where.items())))
    with _pool_lock:
        fresh = store.candidates(
            model=embedder.name, limit=cfg.max_candidates, after_id=cached.newest, **where
        )
        cached.refresh(fresh, cfg.max_candidates)
        candidates, vectors = cached.candidates, cached.matrix
    keep = [
        i
        for i, x in enumerate(candidates)
        if x.message_id not in already
        and (
            not cfg.filter
            or rules.matches(
                {"role": x.role, "created_at": x.created_at, "labels": x.labels}, cfg.filter
            )
        )
    ]
    pool = [candidates[i] for i in keep]
    if not pool or not query.strip():
        return [], len(pool)
    matrix = vectors if len(keep) == len(candidates) else vectors[keep]
    q = embedder.embed([query])[0]
    scored = rules.best(q, matrix, top_k=cfg.top_k, threshold=cfg.threshold)
    return [(pool[i].message_id, score) for i, score in scored], len(pool)


def _in_database(search: _Search) -> tuple[list[tuple[int, float]], int]:
    """The same search scored by the database (pgvector or sqlite-vec); (hits, searched)."""
    if not search.query.strip():
        return [], 0
    flt = search.cfg.filter

    def keep(row: Mapping[str, Any]) -> bool:
        return rules.matches(row, flt)

    return search.store.nearest(
        to_bytes(search.embedder.embed([search.query])[0]),
        model=search.embedder.name,
        limit=search.cfg.max_candidates,
        top_k=search.cfg.top_k,
        threshold=search.cfg.threshold,
        exclude=search.already,
        keep=keep if flt else None,
        **search.where,
    )
