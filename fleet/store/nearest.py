"""Nearest stored messages scored in the database: pgvector on PostgreSQL, sqlite-vec on SQLite.

The same search as recall's exact one, moved into SQL: the newest ``limit`` embedded messages of
the conversation (or of the resource's conversations in one scope and namespace) are the
candidates; those already in the prompt are left out; the rest are ordered by cosine distance
(ties: newer first), and the caller's filter and threshold pick the ``top_k`` best. No
approximate index is used, so the hits are those exact search finds.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Set
from typing import Any

from sqlalchemy import LargeBinary, and_, bindparam, cast, func, select

from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.recall import embedded_in
from fleet.store.vectors import EXACT, VectorSearch, probe

m, e, c = s.messages, s.message_embeddings, s.conversations

#: Rows read per page when a filter may reject some of the nearest (times top_k, growing).
PAGE_FACTOR = 4


class VectorStore(StoreBase):
    #: The search recall uses here (``exact`` until ``enable_vector_search`` finds more).
    vector_search: VectorSearch = EXACT

    def enable_vector_search(self, *, create: bool = True) -> VectorSearch:
        """Probe the database's vector search (``create``: create pgvector's extension if the
        server has it) and use it from now on."""
        self.vector_search = probe(self.engine, create=create)
        return self.vector_search

    def _distance(self, query: bytes) -> Any:
        if self.dialect == "postgresql":
            import numpy as np
            from pgvector.sqlalchemy import VECTOR

            q = np.frombuffer(query, dtype="<f4").astype(np.float32)
            return cast(e.c.embedding, VECTOR()).cosine_distance(
                bindparam("q", value=q, type_=VECTOR())
            )
        return func.vec_distance_cosine(e.c.vector, bindparam("q", value=query, type_=LargeBinary))

    def nearest(
        self,
        query: bytes,
        *,
        model: str,
        limit: int,
        top_k: int,
        threshold: float,
        exclude: Set[int],
        keep: Callable[[Mapping[str, Any]], bool] | None = None,
        conversation_id: uuid.UUID | None = None,
        tenant: str | None = None,
        scope: str | None = None,
        namespace: str | None = None,
        resource_id: str | None = None,
    ) -> tuple[list[tuple[int, float]], int]:
        """(message id, score) of the ``top_k`` nearest candidates at least ``threshold`` that
        ``keep`` accepts, best first; and how many candidates were scored."""
        assert self.vector_search.method != "exact", "nearest() needs a vector search"
        inner = (
            select(
                e.c.message_id,
                e.c.role,
                e.c.labels,
                m.c.created_at,
                self._distance(query).label("dist"),
            )
            .join(m, m.c.id == e.c.message_id)
            .join(c, and_(c.c.id == e.c.conversation_id, c.c.generation == e.c.generation))
            .where(e.c.model == model)
            .order_by(e.c.message_id.desc())
            .limit(limit)
        )
        inner = embedded_in(inner, conversation_id, (tenant, scope, namespace, resource_id))
        sub = inner.subquery()
        counted = select(sub, func.count().over().label("n"))
        if exclude:
            counted = counted.where(sub.c.message_id.not_in(list(exclude)))
        pool = counted.subquery()
        fetch = top_k if keep is None else top_k * PAGE_FACTOR
        while True:
            with self.read() as conn:
                rows = conn.execute(
                    select(pool).order_by(pool.c.dist, pool.c.message_id.desc()).limit(fetch)
                ).all()
            searched = int(rows[0].n) if rows else 0
            hits: list[tuple[int, float]] = []
            below = False
            for r in rows:
                if r.dist is None or not math.isfinite(r.dist):
                    continue
                score = 1.0 - float(r.dist)
                if score < threshold:
                    below = True
                    break
                labels = r.labels or {}
                if keep is None or keep(
                    {"role": r.role, "created_at": r.created_at, "labels": labels}
                ):
                    hits.append((int(r.message_id), round(score, 4)))
                    if len(hits) == top_k:
                        break
            if len(hits) == top_k or below or len(rows) < fetch:
                return hits, searched
            fetch *= PAGE_FACTOR
