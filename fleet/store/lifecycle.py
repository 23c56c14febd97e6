"""Conversation lifecycle in the store: look up without creating, reset to a new generation,
delete behind a tombstone, and prune by age and stored cap in short batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    case,
    delete,
    func,
    insert,
    select,
    true,
    update,
)

from fleet.constants import DEFAULT_TENANT
from fleet.domain import lifecycle as rules
from fleet.domain.values import ACTIVE, CLAIMABLE, TaskStatus
from fleet.errors import Conflict, NotFound
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.clauses import named
from fleet.store.waits import end_pending

c, t, m, n = s.conversations, s.tasks, s.messages, s.notes
tomb = s.conversation_tombstones


@dataclass(frozen=True, slots=True)
class StoredConversation:
    """What a conversation's row says of it: its name, generation and times."""

    id: uuid.UUID
    deployment: str
    scope: str
    key: str
    generation: int
    created_at: datetime
    updated_at: datetime

    @property
    def conversation(self) -> str:
        return f"{self.scope}:{self.key}"


#: A conversation row's columns that a ``StoredConversation`` (and its tenant) take as they are.
CONVERSATION_FIELDS = (*(f.name for f in fields(StoredConversation)), "tenant")


@dataclass(frozen=True, slots=True)
class ConversationInfo(StoredConversation):
    """One conversation as an operator sees it (GetConversation, ``conversations show``)."""

    #: Messages of the current generation (what runs recall), and of every generation.
    messages: int
    stored: int
    notes: int
    tasks: int
    queued: int
    #: The leased, running or handed-back task's id (None: no run is under way).
    active: uuid.UUID | None
    #: Its status (``interrupted``: handed back mid-run, waiting to resume).
    active_status: TaskStatus | None = None
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a deleted conversation leaves: its name, who deleted it when, and how many tasks
    and messages went with it (a new conversation of that name notes the deletion)."""

    deployment: str
    scope: str
    key: str
    deleted_at: datetime
    deleted_by: str
    tasks: int
    messages: int
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class Reset:
    generation: int
    #: Queued tasks of the old generation cancelled (with ``rules.RESET_REASON``).
    cancelled: tuple[uuid.UUID, ...]
    notes_removed: int


@dataclass(frozen=True, slots=True)
class Overfull:
    """A conversation whose current generation stores more messages than its cap."""

    id: uuid.UUID
    deployment: str
    generation: int
    stored: int


class LifecycleStore(StoreBase):
    def lookup(
        self, deployment: str, scope: str, key: str, *, tenant: str
    ) -> ConversationInfo | None:
        """The tenant's conversation with its counts, or None; creates nothing."""
        with self.read() as conn:
            row = conn.execute(select(c).where(*named(c, deployment, tenant, scope, key))).first()
            if row is None:
                return None
            cid, gen = row.id, row.generation
            stored, current = conn.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(case((m.c.generation == gen, 1), else_=0)), 0),
                ).where(m.c.conversation_id == cid)
            ).one()
            by_status: dict[str, int] = dict(
                conn.execute(
                    select(t.c.status, func.count())
                    .where(t.c.conversation_id == cid)
                    .group_by(t.c.status)
                ).all()
            )
            notes = conn.execute(
                select(func.count()).select_from(n).where(n.c.conversation_id == cid)
            ).scalar_one()
            active = conn.execute(
                select(t.c.id, t.c.status)
                .where(t.c.conversation_id == cid, t.c.status.in_(rules.BUSY))
                .order_by(t.c.seq)
                .limit(1)
            ).first()
        return ConversationInfo(
            **rows.pick(row, CONVERSATION_FIELDS),
            messages=int(current),
            stored=int(stored),
            notes=int(notes),
            tasks=sum(int(v) for v in by_status.values()),
            queued=sum(int(by_status.get(st, 0)) for st in CLAIMABLE),
            active=None if active is None else active.id,
            active_status=None if active is None else TaskStatus(active.status),
        )

    def tombstone(self, deployment: str, scope: str, key: str, *, tenant: str) -> Tombstone | None:
        with self.read() as conn:
            row = conn.execute(
                select(tomb).where(*named(tomb, deployment, tenant, scope, key))
            ).first()
        return None if row is None else Tombstone(**row._mapping)

    def stop_conversation(self, conversation_id: uuid.UUID, now: datetime, reason: str) -> None:
        """Cancel the queued tasks (a handed-back one too) and ask the running one to stop
        (``--cancel-running``)."""
        with self.tx() as conn:
            self._cancel_queued(conn, conversation_id, now, reason)
            conn.execute(
                update(t)
                .where(t.c.conversation_id == conversation_id, t.c.status.in_(ACTIVE))
                .values(cancel_requested=True)
            )

    def reset_conversation(
        self, conversation_id: uuid.UUID, now: datetime, *, keep_notes: bool = False
    ) -> Reset:
        """Start a new generation in one transaction; Conflict while a run is active."""
        with self.tx() as conn:
            # The update locks the row: admission (which upserts it) waits for this transaction.
            generation = conn.execute(
                update(c)
                .where(c.c.id == conversation_id)
                .values(generation=c.c.generation + 1, updated_at=now)
                .returning(c.c.generation)
            ).scalar()
            if generation is None:
                raise NotFound(f"no conversation with id {conversation_id}", field="id")
            self._refuse_active(conn, conversation_id, "reset")
            cancelled = self._cancel_queued(conn, conversation_id, now, rules.RESET_REASON)
            removed = 0
            if not keep_notes:
                removed = conn.execute(
                    delete(n).where(n.c.conversation_id == conversation_id)
                ).rowcount
                conn.execute(
                    delete(s.note_operations).where(
                        s.note_operations.c.conversation_id == conversation_id
                    )
                )
            conn.execute(
                delete(s.working_memory).where(
                    s.working_memory.c.key == f"conversation:{conversation_id}"
                )
            )
        return Reset(int(generation), cancelled, int(removed or 0))

    def delete_conversation(
        self, conversation_id: uuid.UUID, now: datetime, *, by: str, drop_pending: bool = False
    ) -> Tombstone:
        """Delete the conversation with everything it holds, leaving a tombstone of its key;
        Conflict while a run is active, or while a delivery of it is pending (unless
        ``drop_pending``: its journal goes with the tasks)."""
        with self.tx() as conn:
            row = conn.execute(
                update(c)
                .where(c.c.id == conversation_id)
                .values(updated_at=now)
                .returning(c.c.deployment, c.c.scope, c.c.key, c.c.tenant)
            ).first()
            if row is None:
                raise NotFound(f"no conversation with id {conversation_id}", field="id")
            self._refuse_active(conn, conversation_id, "delete")
            if not drop_pending:
                d = s.deliveries
                pending = conn.execute(
                    select(d.c.id, d.c.target)
                    .join(t, t.c.id == d.c.task_id)
                    .where(t.c.conversation_id == conversation_id, d.c.status == "pending")
                    .order_by(d.c.created_at, d.c.target)
                ).all()
                if pending:
                    raise rules.pending_deliveries(
                        f"{row.scope}:{row.key}", [(str(i), tg) for i, tg in pending]
                    )
            tasks = conn.execute(
                select(func.count()).select_from(t).where(t.c.conversation_id == conversation_id)
            ).scalar_one()
            said = conn.execute(
                select(func.count()).select_from(m).where(m.c.conversation_id == conversation_id)
            ).scalar_one()
            stone = bury(conn, row, now, by=by, tasks=int(tasks), said=int(said))
            conn.execute(
                delete(s.working_memory).where(
                    s.working_memory.c.key == f"conversation:{conversation_id}"
                )
            )
            # Everything else goes with the row (ON DELETE CASCADE).
            conn.execute(delete(c).where(c.c.id == conversation_id))
        return stone

    def _refuse_active(self, conn: Connection, conversation_id: uuid.UUID, action: str) -> None:
        active = conn.execute(
            select(t.c.id).where(t.c.conversation_id == conversation_id, t.c.status.in_(rules.BUSY))
        ).scalar()
        if active is not None:
            raise Conflict(
                f"task {active} of this conversation has a run under way; {action} refused "
                "(use --cancel-running / cancelRunning=true to stop it first)",
                field="cancelRunning",
            )

    @staticmethod
    def _cancel_queued(
        conn: Connection, conversation_id: uuid.UUID, now: datetime, reason: str
    ) -> tuple[uuid.UUID, ...]:
        found = conn.execute(
            update(t)
            .where(t.c.conversation_id == conversation_id, t.c.status.in_(CLAIMABLE))
            .values(
                status=TaskStatus.CANCELLED, error=reason, error_class="cancelled", finished_at=now
            )
            .returning(t.c.id)
        ).scalars()
        ids = tuple(found)
        for task_id in ids:  # a waiting one's pending waits end with it
            end_pending(conn, task_id, "cancelled", now)
        return ids

    # -- pruning --------------------------------------------------------------------------------

    def count_older(
        self,
        deployments: Iterable[str],
        cutoff: datetime,
        *,
        tenants: frozenset[str] | None = None,
    ) -> int:
        """Messages of these deployments' conversations (of ``tenants``; None: all) said
        before ``cutoff``."""
        names = sorted(deployments)
        with self.read() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(m.join(c, c.c.id == m.c.conversation_id))
                    .where(m.c.created_at < cutoff, c.c.deployment.in_(names), _of(tenants))
                ).scalar_one()
            )

    def delete_older(
        self,
        deployments: Iterable[str],
        cutoff: datetime,
        limit: int = rules.PRUNE_BATCH,
        *,
        tenants: frozenset[str] | None = None,
    ) -> int:
        """Delete at most ``limit`` of the oldest such messages (one short transaction)."""
        names = sorted(deployments)
        victims = (
            select(m.c.id)
            .join(c, c.c.id == m.c.conversation_id)
            .where(m.c.created_at < cutoff, c.c.deployment.in_(names), _of(tenants))
            .order_by(m.c.created_at, m.c.id)
            .limit(limit)
        )
        return self._delete_messages(victims)

    def overfull(
        self,
        deployments: Iterable[str],
        cap: int,
        *,
        after_id: int = 0,
        limit: int = 1000,
        tenants: frozenset[str] | None = None,
    ) -> list[Overfull]:
        """Conversations of these deployments whose current generation holds more than ``cap``
        messages; only those with a message newer than ``after_id`` are looked at."""
        names = sorted(deployments)
        touched = select(m.c.conversation_id).where(m.c.id > after_id).distinct()
        query = (
            select(c.c.id, c.c.deployment, c.c.generation, func.count(m.c.id))
            .join(m, and_(m.c.conversation_id == c.c.id, m.c.generation == c.c.generation))
            .where(c.c.deployment.in_(names), _of(tenants))
            .group_by(c.c.id, c.c.deployment, c.c.generation)
            .having(func.count(m.c.id) > cap)
            .limit(limit)
        )
        if after_id > 0:
            query = query.where(c.c.id.in_(touched))
        with self.read() as conn:
            found = conn.execute(query).all()
        return [Overfull(r[0], r[1], int(r[2]), int(r[3])) for r in found]

    def delete_oldest(self, conversation_id: uuid.UUID, generation: int, count: int) -> int:
        """Delete the ``count`` oldest messages of one generation (one short transaction)."""
        victims = (
            select(m.c.id)
            .where(m.c.conversation_id == conversation_id, m.c.generation == generation)
            .order_by(m.c.id)
            .limit(count)
        )
        return self._delete_messages(victims)

    def newest_message_id(self) -> int:
        with self.read() as conn:
            return int(conn.execute(select(func.max(m.c.id))).scalar() or 0)

    def _delete_messages(self, victims: object) -> int:
        with self.tx() as conn:
            ids = list(conn.execute(victims).scalars())  # type: ignore[call-overload]
            if not ids:
                return 0
            return int(conn.execute(delete(m).where(m.c.id.in_(ids))).rowcount or 0)


def _of(tenants: frozenset[str] | None) -> ColumnElement[bool]:
    """Conversations of these tenants (None: every tenant)."""
    return true() if tenants is None else c.c.tenant.in_(sorted(tenants))


def bury(conn: Connection, row: Any, now: datetime, *, by: str, tasks: int, said: int) -> Tombstone:
    """Leave (or replace) the tombstone of a conversation's key (``row``: its deployment,
    scope, key and tenant): a later submission with it starts fresh and is told so."""
    stone = Tombstone(row.deployment, row.scope, row.key, now, by[:200], tasks, said, row.tenant)
    conn.execute(delete(tomb).where(*named(tomb, row.deployment, row.tenant, row.scope, row.key)))
    conn.execute(insert(tomb).values(**asdict(stone)))
    return stone
