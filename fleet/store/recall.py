"""Recall's reads and writes: message embeddings, candidates for a search, neighbours of hits,
working memory with receipts, and observations journaled by range."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, func, insert, literal, select, union_all, update
from sqlalchemy.exc import IntegrityError

from fleet.constants import DEFAULT_TENANT
from fleet.store import schema as s
from fleet.store.base import StoreBase

m, e, t, c = s.messages, s.message_embeddings, s.tasks, s.conversations


def as_floats(vector: bytes) -> list[float]:
    """Little-endian float32 bytes as a list of floats."""
    import numpy as np  # (here: a process that reads no vectors does not load numpy)

    return [float(x) for x in np.frombuffer(vector, dtype="<f4")]


def embedded_in(
    query: Select[Any],
    conversation_id: uuid.UUID | None,
    resource: tuple[str | None, str | None, str | None, str | None],
) -> Select[Any]:
    """``query`` of embeddings narrowed to one conversation's, or (without ``conversation_id``)
    to those of every conversation of a resource within one scope and namespace: ``resource``
    is (tenant, scope, namespace, resource id)."""
    if conversation_id is not None:
        return query.where(e.c.conversation_id == conversation_id)
    tenant, scope, namespace, resource_id = resource
    return query.where(
        e.c.tenant == tenant,
        e.c.scope == scope,
        e.c.namespace == namespace,
        e.c.resource_id == resource_id,
    )


@dataclass(frozen=True, slots=True)
class Unembedded:
    """A stored message waiting for its embedding, with what recall filters on."""

    message_id: int
    conversation_id: uuid.UUID
    generation: int
    scope: str
    resource_id: str | None
    role: str
    content: str
    labels: dict[str, Any]
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class Candidate:
    """A message a search may return: where it is, what filters see, and its vector."""

    message_id: int
    conversation_id: uuid.UUID
    role: str
    labels: dict[str, Any]
    created_at: datetime
    vector: bytes


@dataclass(frozen=True, slots=True)
class Recalled:
    """A message shown by recall."""

    id: int
    conversation_id: uuid.UUID
    conversation: str
    role: str
    content: str
    created_at: datetime
    #: The seq of the task (turn) it belongs to; None once that task is gone.
    seq: int | None = None


class RecallStore(StoreBase):
    def unembedded(self, conversation_id: uuid.UUID, limit: int = 500) -> list[Unembedded]:
        """The conversation's messages (current generation) not embedded yet, oldest first."""
        with self.read() as conn:
            found = conn.execute(
                select(
                    m.c.id,
                    m.c.conversation_id,
                    m.c.generation,
                    c.c.scope,
                    t.c.resource_id,
                    m.c.role,
                    m.c.content,
                    t.c.labels,
                    c.c.tenant,
                )
                .join(c, c.c.id == m.c.conversation_id)
                .outerjoin(t, t.c.id == m.c.task_id)
                .outerjoin(e, e.c.message_id == m.c.id)
                .where(
                    m.c.conversation_id == conversation_id,
                    m.c.generation == c.c.generation,
                    e.c.message_id.is_(None),
                )
                .order_by(m.c.id)
                .limit(limit)
            ).all()
        return [
            Unembedded(r[0], r[1], r[2], r[3], r[4], r[5], r[6], dict(r[7] or {}), r[8])
            for r in found
        ]

    def save_embeddings(
        self,
        rows: Sequence[Unembedded],
        vectors: Sequence[bytes],
        *,
        namespace: str,
        model: str,
        now: datetime,
    ) -> int:
        """Store the vectors of ``rows`` (a message embedded twice keeps its first vector)."""
        if not rows:
            return 0
        with self.tx() as conn:
            done = {
                r.message_id
                for r in conn.execute(
                    select(e.c.message_id).where(e.c.message_id.in_([x.message_id for x in rows]))
                )
            }
            fresh = [
                {
                    "message_id": row.message_id,
                    "conversation_id": row.conversation_id,
                    "generation": row.generation,
                    "tenant": row.tenant,
                    "scope": row.scope,
                    "namespace": namespace,
                    "resource_id": row.resource_id,
                    "role": row.role,
                    "labels": row.labels,
                    "model": model,
                    "vector": vector,
                    # PostgreSQL keeps the values as real[] too, for pgvector (see schema)
                    "embedding": as_floats(vector) if self.dialect == "postgresql" else None,
                    "created_at": now,
                }
                for row, vector in zip(rows, vectors, strict=True)
                if row.message_id not in done
            ]
            if fresh:
                conn.execute(insert(e), fresh)
        return len(fresh)

    def candidates(
        self,
        *,
        model: str,
        limit: int,
        conversation_id: uuid.UUID | None = None,
        tenant: str | None = None,
        scope: str | None = None,
        namespace: str | None = None,
        resource_id: str | None = None,
        after_id: int = 0,
    ) -> list[Candidate]:
        """The newest ``limit`` embedded messages of a conversation, or of every conversation
        of a resource within one scope and namespace (current generations only), newer than
        ``after_id``."""
        query = (
            select(
                e.c.message_id,
                e.c.conversation_id,
                e.c.role,
                e.c.labels,
                m.c.created_at,
                e.c.vector,
            )
            .join(m, m.c.id == e.c.message_id)
            .join(c, and_(c.c.id == e.c.conversation_id, c.c.generation == e.c.generation))
            .where(e.c.model == model, e.c.message_id > after_id)
            .order_by(e.c.message_id.desc())
            .limit(limit)
        )
        query = embedded_in(query, conversation_id, (tenant, scope, namespace, resource_id))
        with self.read() as conn:
            found = conn.execute(query).all()
        return [Candidate(r[0], r[1], r[2], dict(r[3] or {}), r[4], bytes(r[5])) for r in found]

    def pending_embeddings(self, conversation_id: uuid.UUID) -> int:
        """How many of the conversation's messages came after its newest embedded one: not
        recallable yet."""
        newest = (
            select(func.coalesce(func.max(e.c.message_id), 0))
            .where(e.c.conversation_id == conversation_id)
            .scalar_subquery()
        )
        with self.read() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(m)
                    .join(c, and_(c.c.id == m.c.conversation_id, c.c.generation == m.c.generation))
                    .where(m.c.conversation_id == conversation_id, m.c.id > newest)
                ).scalar_one()
            )

    def neighbours(self, hits: Sequence[int], around: int) -> dict[int, list[int]]:
        """For each message id, up to ``around`` messages before and after it in its
        conversation (same generation): one statement for all hits."""
        if around <= 0 or not hits:
            return {h: [] for h in hits}
        h = m.alias("h")
        parts = []
        for hit in hits:
            same = and_(
                h.c.id == hit,
                m.c.conversation_id == h.c.conversation_id,
                m.c.generation == h.c.generation,
            )
            for side, order in ((m.c.id < hit, m.c.id.desc()), (m.c.id > hit, m.c.id)):
                parts.append(
                    select(literal(hit).label("hit"), m.c.id)
                    .select_from(m.join(h, same))
                    .where(side)
                    .order_by(order)
                    .limit(around)
                    .subquery()
                    .select()
                )
        out: dict[int, list[int]] = {hit: [] for hit in hits}
        with self.read() as conn:
            for hit, mid in conn.execute(union_all(*parts)):
                out[int(hit)].append(int(mid))
        return out

    def recalled(self, ids: Sequence[int]) -> list[Recalled]:
        """The messages with these ids, with their conversation's key."""
        if not ids:
            return []
        with self.read() as conn:
            found = conn.execute(
                select(
                    m.c.id,
                    m.c.conversation_id,
                    c.c.scope,
                    c.c.key,
                    m.c.role,
                    m.c.content,
                    m.c.created_at,
                    t.c.seq,
                )
                .join(c, and_(c.c.id == m.c.conversation_id, c.c.generation == m.c.generation))
                .outerjoin(t, t.c.id == m.c.task_id)
                .where(m.c.id.in_(list(ids)))
            ).all()
        by_id = {
            r[0]: Recalled(r[0], r[1], f"{r[2]}:{r[3]}", r[4], r[5], r[6], r[7]) for r in found
        }
        return [by_id[i] for i in ids if i in by_id]

    def message_seqs(self, ids: Sequence[int]) -> dict[int, int | None]:
        """The seq of the task (turn) each message belongs to (None: that task is gone; a
        message that is gone is left out)."""
        if not ids:
            return {}
        with self.read() as conn:
            found = conn.execute(
                select(m.c.id, t.c.seq)
                .select_from(m.outerjoin(t, t.c.id == m.c.task_id))
                .where(m.c.id.in_(sorted(set(ids))))
            ).all()
        return {int(r[0]): (None if r[1] is None else int(r[1])) for r in found}

    def conversation_ref(self, conversation_id: uuid.UUID) -> tuple[str, str, str] | None:
        """(deployment, scope, key) of a conversation, or None."""
        with self.read() as conn:
            row = conn.execute(
                select(c.c.deployment, c.c.scope, c.c.key).where(c.c.id == conversation_id)
            ).first()
        return None if row is None else (row[0], row[1], row[2])

    # -- working memory ---------------------------------------------------------------------

    def working_memory(self, key: str) -> tuple[Any, int] | None:
        """The state kept under ``key`` and its version (None: never written)."""
        wm = s.working_memory
        with self.read() as conn:
            row = conn.execute(select(wm.c.value, wm.c.version).where(wm.c.key == key)).first()
        return None if row is None else (row.value, row.version)

    def write_working_memory(
        self, key: str, value: Any, *, version: int, receipt: str, author: str, now: datetime
    ) -> int | None:
        """Store ``value`` if the state is still at ``version`` and this receipt is new.

        Returns the new version; None if the version moved on (read and merge again). A
        receipt seen before returns the version it made, changing nothing (a retried call).
        """
        wm, ops = s.working_memory, s.working_memory_operations
        with self.tx() as conn:
            seen = conn.execute(select(ops.c.version).where(ops.c.receipt == receipt)).scalar()
            if seen is not None:
                return int(seen)
            value = self.redactor.json(value)
            if version == 0:
                exists = conn.execute(select(wm.c.key).where(wm.c.key == key)).first()
                if exists is not None:
                    return None
                conn.execute(
                    insert(wm).values(
                        key=key, value=value, version=1, updated_at=now, author=author
                    )
                )
            else:
                moved = conn.execute(
                    update(wm)
                    .where(wm.c.key == key, wm.c.version == version)
                    .values(value=value, version=version + 1, updated_at=now, author=author)
                ).rowcount
                if moved != 1:
                    return None
            conn.execute(
                insert(ops).values(receipt=receipt, key=key, version=version + 1, created_at=now)
            )
        return version + 1


@dataclass(frozen=True, slots=True)
class ObservationRow:
    """An observation (level 0) or a reflection (level 1) over a range of messages."""

    level: int
    from_message_id: int
    to_message_id: int
    text: str
    model: str
    tokens: int


#: An observation's columns, in ``ObservationRow``'s field order.
_OBSERVATION_COLUMNS = tuple(s.observations.c[f.name] for f in fields(ObservationRow))


class ObservationStore(StoreBase):
    def observations(self, conversation_id: uuid.UUID) -> list[ObservationRow]:
        """The conversation's observations and reflections (current generation), oldest first."""
        o = s.observations
        with self.read() as conn:
            found = conn.execute(
                select(*_OBSERVATION_COLUMNS)
                .join(c, and_(c.c.id == o.c.conversation_id, c.c.generation == o.c.generation))
                .where(o.c.conversation_id == conversation_id)
                .order_by(o.c.from_message_id, o.c.level)
            ).all()
        return [ObservationRow(*r) for r in found]

    def observation_at(
        self, conversation_id: uuid.UUID, generation: int, level: int, span: tuple[int, int]
    ) -> ObservationRow | None:
        """The observation journaled for exactly this range, if one was made."""
        o = s.observations
        with self.read() as conn:
            r = conn.execute(
                select(*_OBSERVATION_COLUMNS).where(
                    o.c.conversation_id == conversation_id,
                    o.c.generation == generation,
                    o.c.level == level,
                    o.c.from_message_id == span[0],
                    o.c.to_message_id == span[1],
                )
            ).first()
        return None if r is None else ObservationRow(*r)

    def save_observation(
        self,
        conversation_id: uuid.UUID,
        generation: int,
        row: ObservationRow,
        now: datetime,
    ) -> ObservationRow:
        """Journal an observation; if the range was observed meanwhile, keep (and return)
        the first one, so a range always reads the same text."""
        o = s.observations
        span = (row.from_message_id, row.to_message_id)
        try:
            with self.tx() as conn:
                conn.execute(
                    insert(o).values(
                        conversation_id=conversation_id,
                        generation=generation,
                        level=row.level,
                        from_message_id=span[0],
                        to_message_id=span[1],
                        text=self.redactor.text(row.text),
                        model=row.model,
                        tokens=row.tokens,
                        created_at=now,
                    )
                )
        except IntegrityError:
            pass
        found = self.observation_at(conversation_id, generation, row.level, span)
        assert found is not None
        return found

    def unobserved(
        self, conversation_id: uuid.UUID, *, after_id: int, keep_recent: int, limit: int = 500
    ) -> tuple[int, list[tuple[int, str, str]]]:
        """The conversation's generation and its messages after ``after_id`` that are older
        than its newest ``keep_recent`` (those stay in the recent window), oldest first."""
        with self.read() as conn:
            generation = conn.execute(
                select(c.c.generation).where(c.c.id == conversation_id)
            ).scalar_one()
            recent = (
                select(m.c.id)
                .where(m.c.conversation_id == conversation_id, m.c.generation == generation)
                .order_by(m.c.id.desc())
                .limit(keep_recent)
                .subquery()
            )
            found = conn.execute(
                select(m.c.id, m.c.role, m.c.content)
                .where(
                    m.c.conversation_id == conversation_id,
                    m.c.generation == generation,
                    m.c.id > after_id,
                    m.c.id.not_in(select(recent.c.id)),
                )
                .order_by(m.c.id)
                .limit(limit)
            ).all()
        return int(generation), [(r[0], r[1], r[2]) for r in found]
