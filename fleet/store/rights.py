"""A person's data in the store: find a resource's conversations, read them out as export
lines, erase them with everything derived from them, and keep the erased resource's tombstone.

The rules (kinds, digests, refusals) are ``fleet.domain.rights``'; the order of an erasure
(tombstone, stop, erase, look again) is ``fleet.dispatch.rights``'. Each conversation is erased
in one transaction: rows without a foreign key to it (token usage, events its waits took,
memory-block versions its runs wrote, working-memory receipts, delegations it asked for) go
first, then the conversation row and all that cascades from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

from fleet.domain import rights as rules
from fleet.domain.values import ACTIVE, CLAIMABLE
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.lifecycle import bury

c, t, r, tr = s.conversations, s.tasks, s.runs, s.traces
stone = s.resource_tombstones

#: Export lines of each conversation-owned table: (line kind, table, how it is reached).
_OWNED: tuple[tuple[str, Table, str], ...] = (
    ("task", s.tasks, "conversation"),
    ("run", s.runs, "conversation"),
    ("step", s.traces, "task"),
    ("message", s.messages, "conversation"),
    ("note", s.notes, "conversation"),
    ("observation", s.observations, "conversation"),
    ("followup", s.followups, "conversation"),
    ("inbox", s.run_inbox, "conversation"),
    ("wait", s.waits, "task"),
    ("delivery", s.deliveries, "task"),
)
#: What a run's frozen prompt becomes once its tenant's ``context`` retention is over.
EXPIRED: dict[str, Any] = {"expired": True}
#: Columns an export leaves out: derived numbers (vectors) and lease tokens.
_SKIPPED = frozenset({"vector", "embedding", "claim", "fence"})


def _value(v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, bytes | memoryview):
        return None
    return v


def _line(kind: str, row: Mapping[Any, Any]) -> dict[str, Any]:
    fields = rules.clean({str(k): _value(v) for k, v in row.items() if k not in _SKIPPED})
    return {"kind": kind, "record": fields}


class RightsStore(StoreBase):
    # -- finding ------------------------------------------------------------------------------

    def resource_tenants(self, resource: str) -> list[str]:
        """The tenants in which a task named ``resource`` (for the CLI's one-tenant check)."""
        with self.read() as conn:
            return sorted(
                conn.execute(select(t.c.tenant).where(t.c.resource_id == resource).distinct())
                .scalars()
                .all()
            )

    def resource_conversations(self, tenant: str, resource: str) -> list[uuid.UUID]:
        """Every conversation a task naming ``resource`` joined in ``tenant``, oldest first."""
        with self.read() as conn:
            return list(
                conn.execute(
                    select(t.c.conversation_id)
                    .where(t.c.tenant == tenant, t.c.resource_id == resource)
                    .group_by(t.c.conversation_id)
                    .order_by(func.min(t.c.created_at))
                ).scalars()
            )

    def resource_working_keys(
        self, tenant: str, resource: str, namespaces: Mapping[str, str]
    ) -> list[str]:
        """The working-memory keys kept for ``resource`` (``fleet.recall.working.key_of``):
        one per namespace (of its tasks' deployments, ``namespaces``) and scope it was named in."""
        with self.read() as conn:
            pairs = conn.execute(
                select(t.c.deployment, t.c.scope)
                .where(t.c.tenant == tenant, t.c.resource_id == resource)
                .distinct()
            ).all()
        return sorted(
            {rules.memory_key(tenant, namespaces.get(d, d), sc, resource) for d, sc in pairs}
        )

    def busy_tasks(self, conversation_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """The tasks of these conversations that run or wait (an erasure stops them first)."""
        if not conversation_ids:
            return []
        with self.read() as conn:
            return list(
                conn.execute(
                    select(t.c.id).where(
                        t.c.conversation_id.in_(conversation_ids),
                        t.c.status.in_((*ACTIVE, *CLAIMABLE)),
                    )
                ).scalars()
            )

    # -- export -------------------------------------------------------------------------------

    def export_conversation(self, conversation_id: uuid.UUID) -> Iterator[dict[str, Any]]:
        """The conversation and everything it holds, as export lines (``LINE_KINDS``)."""
        with self.read() as conn:
            row = conn.execute(select(c).where(c.c.id == conversation_id)).first()
            if row is None:
                return
            yield _line("conversation", row._mapping)
            tasks = select(t.c.id).where(t.c.conversation_id == conversation_id)
            for kind, table, via in _OWNED:
                where = (
                    table.c.conversation_id == conversation_id
                    if via == "conversation"
                    else table.c.task_id.in_(tasks)
                )
                order = [col for col in table.primary_key.columns]
                for found in conn.execute(select(table).where(where).order_by(*order)):
                    yield _line(kind, found._mapping)
            runs = list(
                conn.execute(select(r.c.id).where(r.c.conversation_id == conversation_id)).scalars()
            )
            for version in conn.execute(
                select(s.memory_block_versions, s.memory_blocks.c.namespace, s.memory_blocks.c.name)
                .join(s.memory_blocks, s.memory_blocks.c.id == s.memory_block_versions.c.block_id)
                .where(s.memory_block_versions.c.author.in_([f"run:{i}" for i in runs]))
                .order_by(s.memory_block_versions.c.created_at)
            ):
                yield _line("memory_version", version._mapping)
            key = f"conversation:{conversation_id}"
            for wm in conn.execute(select(s.working_memory).where(s.working_memory.c.key == key)):
                yield _line("working_memory", wm._mapping)

    def export_working(self, keys: Iterable[str]) -> Iterator[dict[str, Any]]:
        """Working memory kept under ``keys`` (a resource's), as export lines."""
        wm = s.working_memory
        with self.read() as conn:
            for row in conn.execute(select(wm).where(wm.c.key.in_(list(keys))).order_by(wm.c.key)):
                yield _line("working_memory", row._mapping)

    # -- erasure ------------------------------------------------------------------------------

    def erase_conversation(
        self,
        conversation_id: uuid.UUID,
        now: datetime,
        *,
        by: str | None = None,
        idle_before: datetime | None = None,
    ) -> tuple[dict[str, int], list[uuid.UUID]]:
        """Erase the conversation and every copy derived from it, in one transaction: counts
        per kind and its tasks' ids (none when it is gone already: erasure is idempotent).
        ``by``: leave its key's tombstone too (an erased conversation's, not a resource's).
        ``idle_before`` (retention): only if it is still idle since then, looked at under the
        row's lock, so a task admitted meanwhile keeps it whole."""
        with self.tx() as conn:
            # The row's lock: an admission (which upserts it) waits for this transaction.
            row = conn.execute(
                select(c.c.deployment, c.c.scope, c.c.key, c.c.tenant)
                .where(c.c.id == conversation_id)
                .with_for_update()
            ).first()
            if row is None:
                return {}, []
            if idle_before is not None and not self._idle(conn, conversation_id, idle_before):
                return {}, []
            task_ids = list(
                conn.execute(select(t.c.id).where(t.c.conversation_id == conversation_id)).scalars()
            )
            counts = self._count_owned(conn, conversation_id, task_ids)
            counts |= self._erase_unlinked(conn, conversation_id, task_ids)
            if by is not None:
                bury(conn, row, now, by=by, tasks=counts["tasks"], said=counts["messages"])
            # Everything else goes with the row (ON DELETE CASCADE).
            conn.execute(delete(c).where(c.c.id == conversation_id))
        return counts, task_ids

    def erase_working(self, keys: Iterable[str]) -> int:
        """Working memory kept under ``keys`` and its receipts; how many states went."""
        wm, ops = s.working_memory, s.working_memory_operations
        keys = list(keys)
        if not keys:
            return 0
        with self.tx() as conn:
            conn.execute(delete(ops).where(ops.c.key.in_(keys)))
            return int(conn.execute(delete(wm).where(wm.c.key.in_(keys))).rowcount or 0)

    @staticmethod
    def _idle(conn: Connection, conversation_id: uuid.UUID, since: datetime) -> bool:
        """No unfinished task, and none created or finished since ``since``."""
        return (
            conn.execute(
                select(t.c.id)
                .where(t.c.conversation_id == conversation_id, _recent(since))
                .limit(1)
            ).first()
            is None
        )

    @staticmethod
    def _count_owned(
        conn: Connection, conversation_id: uuid.UUID, task_ids: list[uuid.UUID]
    ) -> dict[str, int]:
        def n(table: Table, *where: Any) -> int:
            return int(
                conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()
            )

        by_conv = {
            "tasks": s.tasks,
            "runs": s.runs,
            "messages": s.messages,
            "notes": s.notes,
            "observations": s.observations,
            "recall_vectors": s.message_embeddings,
        }
        counts = {
            k: n(table, table.c.conversation_id == conversation_id) for k, table in by_conv.items()
        }
        counts["conversations"] = 1
        counts["steps"] = n(s.traces, s.traces.c.task_id.in_(task_ids))
        counts["deliveries"] = n(s.deliveries, s.deliveries.c.task_id.in_(task_ids))
        counts["waits"] = n(s.waits, s.waits.c.task_id.in_(task_ids))
        return counts

    @staticmethod
    def _erase_unlinked(
        conn: Connection, conversation_id: uuid.UUID, task_ids: list[uuid.UUID]
    ) -> dict[str, int]:
        """Rows tied to the conversation without a cascading key, deleted before it."""
        counts: dict[str, int] = {}
        w, ev = s.waits, s.inbound_events
        taken = conn.execute(
            select(w.c.tenant, w.c.event_id).where(
                w.c.task_id.in_(task_ids), w.c.event_id.is_not(None)
            )
        ).all()
        gone = 0
        for tenant, event_id in taken:
            gone += int(
                conn.execute(
                    delete(ev).where(ev.c.tenant == tenant, ev.c.event_id == event_id)
                ).rowcount
                or 0
            )
        counts["events"] = gone
        usage = s.token_usage
        counts["usage"] = int(
            conn.execute(delete(usage).where(usage.c.task_id.in_(task_ids))).rowcount or 0
        )
        runs = [
            f"run:{i}"
            for i in conn.execute(
                select(r.c.id).where(r.c.conversation_id == conversation_id)
            ).scalars()
        ]
        counts["memory_versions"] = _erase_versions(conn, runs)
        ops = s.working_memory_operations
        if task_ids:
            conn.execute(
                delete(ops).where(or_(*(ops.c.receipt.startswith(f"{i}:") for i in task_ids)))
            )
        wm = s.working_memory
        counts["working_memory"] = int(
            conn.execute(delete(wm).where(wm.c.key == f"conversation:{conversation_id}")).rowcount
            or 0
        )
        dg = s.delegations
        conn.execute(delete(dg).where(dg.c.parent_task_id.in_(task_ids)))
        return counts

    def scrub(self) -> None:
        """After an erasure: on SQLite, copy the write-ahead log into the database and empty
        it (erased rows' old pages live on in the log until then; deletes overwrite in the
        file, ``secure_delete``). PostgreSQL's dead rows are VACUUM's (see the docs)."""
        if self.dialect != "sqlite":
            return
        raw = self.engine.raw_connection()  # outside a transaction (autocommit)
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            raw.close()

    # -- retention ----------------------------------------------------------------------------

    def expired_conversations(self, tenant: str, cutoff: datetime, limit: int) -> list[uuid.UUID]:
        """Conversations of ``tenant`` idle since before ``cutoff``: every task finished
        before it, none unfinished (oldest first, at most ``limit``)."""
        recent = select(t.c.id).where(t.c.conversation_id == c.c.id, _recent(cutoff))
        with self.read() as conn:
            return list(
                conn.execute(
                    select(c.c.id)
                    .where(c.c.tenant == tenant, c.c.created_at < cutoff, ~recent.exists())
                    .order_by(c.c.created_at)
                    .limit(limit)
                ).scalars()
            )

    def expire_steps(self, tenant: str, cutoff: datetime, limit: int) -> int:
        """Delete at most ``limit`` journal steps of ``tenant``'s tasks finished before
        ``cutoff``; how many went."""
        old = (
            select(tr.c.id)
            .join(t, t.c.id == tr.c.task_id)
            .where(t.c.tenant == tenant, t.c.finished_at < cutoff)
            .limit(limit)
        )
        with self.tx() as conn:
            return int(conn.execute(delete(tr).where(tr.c.id.in_(old))).rowcount or 0)

    def expire_context(self, tenant: str, cutoff: datetime, limit: int) -> int:
        """Replace the frozen prompt of at most ``limit`` runs of ``tenant``'s tasks finished
        before ``cutoff`` with a note that it expired; how many."""
        old = (
            select(r.c.id)
            .join(t, t.c.id == r.c.task_id)
            .where(
                t.c.tenant == tenant,
                t.c.finished_at < cutoff,
                r.c.context["expired"].as_boolean().is_(None),
            )
            .limit(limit)
        )
        with self.tx() as conn:
            return int(
                conn.execute(update(r).where(r.c.id.in_(old)).values(context=EXPIRED)).rowcount or 0
            )

    # -- tombstones ---------------------------------------------------------------------------

    def tombstone_resource(
        self,
        tenant: str,
        digest: str,
        *,
        now: datetime,
        until: datetime,
        by: str,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        """Write (or renew) the erased resource's tombstone; ``counts`` once the erasure is done."""
        with self.tx() as conn:
            found = conn.execute(
                update(stone)
                .where(stone.c.tenant == tenant, stone.c.digest == digest)
                .values(
                    erased_at=now,
                    refused_until=until,
                    erased_by=by[:200],
                    **({} if counts is None else {"counts": dict(counts)}),
                )
            ).rowcount
            if not found:
                conn.execute(
                    insert(stone).values(
                        tenant=tenant,
                        digest=digest,
                        erased_at=now,
                        refused_until=until,
                        erased_by=by[:200],
                        counts=dict(counts or {}),
                    )
                )

    def erased(self, tenant: str, digest: str, now: datetime) -> tuple[datetime, datetime] | None:
        """(erased at, refused until) of a resource erased in ``tenant`` and still refused."""
        with self.read() as conn:
            row = conn.execute(
                select(stone.c.erased_at, stone.c.refused_until).where(
                    stone.c.tenant == tenant, stone.c.digest == digest, stone.c.refused_until > now
                )
            ).first()
        return None if row is None else (row.erased_at, row.refused_until)


def _recent(since: datetime) -> ColumnElement[bool]:
    """A task that keeps its conversation from retention: unfinished, or of the window."""
    return or_(
        t.c.status.in_((*ACTIVE, *CLAIMABLE)), t.c.created_at >= since, t.c.finished_at >= since
    )


def _erase_versions(conn: Connection, authors: list[str]) -> int:
    """Delete the memory-block versions ``authors`` wrote; a block whose value one of them
    set goes back to its newest version left (empty if none is)."""
    if not authors:
        return 0
    v, b = s.memory_block_versions, s.memory_blocks
    blocks = list(
        conn.execute(select(v.c.block_id).where(v.c.author.in_(authors)).distinct()).scalars()
    )
    gone = int(conn.execute(delete(v).where(v.c.author.in_(authors))).rowcount or 0)
    for block_id in blocks:
        left = conn.execute(
            select(v.c.value).where(v.c.block_id == block_id).order_by(v.c.version.desc()).limit(1)
        ).scalar()
        conn.execute(update(b).where(b.c.id == block_id).values(value=left or ""))
    return gone
