"""Memory blocks (with version history) and per-conversation notes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fleet.domain import blocks
from fleet.domain.blocks import Block, BlockVersion, NoteReceipt, NoteValue
from fleet.errors import Conflict, InputError, NotFound
from fleet.store import schema as s
from fleet.store.base import StoreBase

b, v, n, o = s.memory_blocks, s.memory_block_versions, s.notes, s.note_operations


def _block(row: object) -> Block:
    m = row._mapping  # type: ignore[attr-defined]
    return Block(
        m["namespace"],
        m["name"],
        m["title"],
        m["description"],
        m["value"],
        m["version"],
        m["updated_at"],
    )


class MemoryStore(StoreBase):
    def get_block(self, namespace: str, name: str, *, tenant: str) -> Block | None:
        with self.read() as conn:
            row = conn.execute(
                select(b).where(b.c.tenant == tenant, b.c.namespace == namespace, b.c.name == name)
            ).first()
        return None if row is None else _block(row)

    def blocks_named(
        self, namespace: str, names: Sequence[str], *, tenant: str
    ) -> dict[str, Block]:
        """The tenant's blocks of ``namespace`` called one of ``names`` (missing ones are left
        out)."""
        if not names:
            return {}
        with self.read() as conn:
            rows = conn.execute(
                select(b).where(
                    b.c.tenant == tenant, b.c.namespace == namespace, b.c.name.in_(list(names))
                )
            ).all()
        return {r.name: _block(r) for r in rows}

    def list_blocks(self, namespace: str | None = None, *, tenant: str) -> list[Block]:
        query = select(b).where(b.c.tenant == tenant).order_by(b.c.namespace, b.c.name)
        if namespace is not None:
            query = query.where(b.c.namespace == namespace)
        with self.read() as conn:
            return [_block(r) for r in conn.execute(query).all()]

    def edit_block(
        self,
        namespace: str,
        name: str,
        edit: blocks.Edit,
        *,
        tenant: str,
        author: str,
        now: datetime,
        title: str | None = None,
        description: str | None = None,
        receipt: str | None = None,
        max_bytes: int = blocks.MAX_BLOCK_BYTES,
    ) -> Block:
        """Apply ``edit`` (creating the block at version 1), recording the new version.

        The row is updated only if its version is still the one read, so two concurrent edits
        cannot both win: the loser sees Conflict (with ``expected_version``) or retries the read.
        An edit with a ``receipt`` already recorded is not applied again (a retried tool call):
        the block is returned as it is.
        """
        blocks.check_block_name(name)
        for _ in range(5):
            with self.tx() as conn:
                row = conn.execute(
                    select(b).where(
                        b.c.tenant == tenant, b.c.namespace == namespace, b.c.name == name
                    )
                ).first()
                current = _block(row) if row is not None else None
                if row is not None and receipt is not None:
                    done = conn.execute(
                        select(v.c.version).where(v.c.block_id == row.id, v.c.receipt == receipt)
                    ).first()
                    if done is not None:
                        assert current is not None
                        return current
                value = blocks.apply(
                    current.value if current else "",
                    current.version if current else 0,
                    edit,
                    max_bytes=max_bytes,
                )
                value = self.redactor.text(value)
                if current is None:
                    block_id = uuid.uuid4()
                    insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
                    created = conn.execute(
                        insert(b)
                        .values(
                            id=block_id,
                            tenant=tenant,
                            namespace=namespace,
                            name=name,
                            title=title or "",
                            description=description or "",
                            value=value,
                            version=1,
                            created_at=now,
                            updated_at=now,
                        )
                        .on_conflict_do_nothing(index_elements=["tenant", "namespace", "name"])
                        .returning(b.c.id)
                    ).first()
                    if created is None:  # another writer created it meanwhile: read it again
                        if edit.expected_version is not None:
                            raise Conflict(
                                f"the block was created meanwhile, not at version "
                                f"{edit.expected_version}: read it again",
                                field="expectedVersion",
                            )
                        continue
                    version = 1
                else:
                    version = current.version + 1
                    moved = conn.execute(
                        update(b)
                        .where(b.c.id == row.id, b.c.version == current.version)  # type: ignore[union-attr]
                        .values(
                            value=value,
                            version=version,
                            updated_at=now,
                            title=current.title if title is None else title,
                            description=current.description if description is None else description,
                        )
                    ).rowcount
                    if moved != 1:
                        if edit.expected_version is not None:
                            now_at = conn.execute(
                                select(b.c.version).where(b.c.id == row.id)  # type: ignore[union-attr]
                            ).scalar_one_or_none()
                            raise Conflict(
                                f"the block is at version {now_at}, not {edit.expected_version}: "
                                "read it again and apply your change to the current value",
                                field="expectedVersion",
                            )
                        continue
                    block_id = row.id  # type: ignore[union-attr]
                conn.execute(
                    v.insert().values(
                        block_id=block_id,
                        version=version,
                        value=value,
                        author=author,
                        created_at=now,
                        receipt=receipt,
                    )
                )
            found = self.get_block(namespace, name, tenant=tenant)
            assert found is not None
            return found
        raise Conflict("the block kept changing; try again")

    def block_history(self, namespace: str, name: str, *, tenant: str) -> list[BlockVersion]:
        with self.read() as conn:
            rows = conn.execute(
                select(v.c.version, v.c.value, v.c.author, v.c.created_at)
                .join(b, b.c.id == v.c.block_id)
                .where(b.c.tenant == tenant, b.c.namespace == namespace, b.c.name == name)
                .order_by(v.c.version)
            ).all()
        if not rows:
            raise NotFound(f"no memory block {name!r} in namespace {namespace!r}", field="block")
        return [BlockVersion(r.version, r.value, r.author, r.created_at) for r in rows]

    # -- notes ----------------------------------------------------------------------------------

    def _live(self, now: datetime) -> ColumnElement[bool]:
        return or_(n.c.expires_at.is_(None), n.c.expires_at > now)

    def note_receipt(self, conversation_id: uuid.UUID, receipt: str) -> NoteReceipt | None:
        """The answer a notes tool call with this receipt already got, if it was applied."""
        with self.read() as conn:
            row = conn.execute(
                select(o).where(o.c.conversation_id == conversation_id, o.c.receipt == receipt)
            ).first()
        return None if row is None else NoteReceipt(row.op, row.key, dict(row.outcome))

    def _receipt(
        self,
        conn: Connection,
        conversation_id: uuid.UUID,
        receipt: str | None,
        *,
        op: str,
        key: str,
        outcome: dict[str, object],
        now: datetime,
    ) -> None:
        if receipt is not None:
            conn.execute(
                o.insert().values(
                    conversation_id=conversation_id,
                    receipt=receipt,
                    op=op,
                    key=key,
                    outcome=outcome,
                    created_at=now,
                )
            )

    def set_note(
        self,
        conversation_id: uuid.UUID,
        key: str,
        body: str,
        now: datetime,
        expires_at: datetime | None = None,
        *,
        receipt: str | None = None,
    ) -> NoteValue:
        """Create or replace a note; a ``receipt`` commits together with the edit."""
        blocks.check_note(key, body)
        body = self.redactor.text(body)
        with self.tx() as conn:
            conn.execute(
                delete(n).where(
                    n.c.conversation_id == conversation_id,
                    n.c.expires_at.is_not(None),
                    n.c.expires_at <= now,
                )
            )
            moved = conn.execute(
                update(n)
                .where(n.c.conversation_id == conversation_id, n.c.key == key)
                .values(body=body, expires_at=expires_at, updated_at=now)
            ).rowcount
            if not moved:
                live = conn.execute(
                    select(func.count())
                    .select_from(n)
                    .where(n.c.conversation_id == conversation_id)
                ).scalar_one()
                if live >= blocks.MAX_NOTES:
                    raise InputError(
                        f"a conversation holds at most {blocks.MAX_NOTES} notes; remove one first",
                        field="key",
                    )
                conn.execute(
                    n.insert().values(
                        id=uuid.uuid4(),
                        conversation_id=conversation_id,
                        key=key,
                        body=body,
                        expires_at=expires_at,
                        created_at=now,
                        updated_at=now,
                    )
                )
            outcome: dict[str, object] = {
                "bytes": len(body.encode()),
                "expires_at": expires_at.isoformat() if expires_at else None,
                "created": not moved,
            }
            self._receipt(
                conn, conversation_id, receipt, op="set", key=key, outcome=outcome, now=now
            )
        return NoteValue(key, body, expires_at, now)

    def get_note(self, conversation_id: uuid.UUID, key: str, now: datetime) -> NoteValue | None:
        with self.read() as conn:
            row = conn.execute(
                select(n).where(
                    and_(n.c.conversation_id == conversation_id, n.c.key == key, self._live(now))
                )
            ).first()
        return None if row is None else NoteValue(row.key, row.body, row.expires_at, row.updated_at)

    def list_notes(self, conversation_id: uuid.UUID, now: datetime) -> list[NoteValue]:
        with self.read() as conn:
            rows = conn.execute(
                select(n)
                .where(n.c.conversation_id == conversation_id, self._live(now))
                .order_by(n.c.key)
                .limit(blocks.MAX_NOTES_LISTED)
            ).all()
        return [NoteValue(r.key, r.body, r.expires_at, r.updated_at) for r in rows]

    def remove_note(
        self,
        conversation_id: uuid.UUID,
        key: str,
        *,
        now: datetime | None = None,
        receipt: str | None = None,
    ) -> bool:
        with self.tx() as conn:
            gone = conn.execute(
                delete(n).where(n.c.conversation_id == conversation_id, n.c.key == key)
            ).rowcount
            if receipt is not None:
                assert now is not None
                outcome: dict[str, object] = {"removed": bool(gone)}
                self._receipt(
                    conn, conversation_id, receipt, op="remove", key=key, outcome=outcome, now=now
                )
        return bool(gone)

    def count_notes(self, conversation_id: uuid.UUID, now: datetime) -> int:
        with self.read() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(n)
                    .where(n.c.conversation_id == conversation_id, self._live(now))
                ).scalar_one()
            )
