"""Schedules: their rows, the beat's scan for due ones, and the compare-and-set by which one
beat of several acts on each tick."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from fleet.domain.schedules import Record
from fleet.errors import Conflict
from fleet.store import schema as s
from fleet.store.base import StoreBase

#: Most rows one scan or listing returns.
MAX_ROWS = 1000


def _record(row: Any) -> Record:
    m = row._mapping
    return Record(
        id=m["id"],
        tenant=m["tenant"],
        scope=m["scope"],
        name=m["name"],
        source=m["source"],
        caller=m["caller"],
        spec=dict(m["spec"]),
        last_tick=m["last_tick"],
        state=m["state"],
        last_task_id=m["last_task_id"],
        next_tick=m["next_tick"],
        fired=m["fired"],
        skipped=m["skipped"],
        note=m["note"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


class ScheduleStore(StoreBase):
    def create_schedule(
        self,
        *,
        tenant: str,
        scope: str,
        name: str,
        source: str,
        caller: str | None,
        spec: dict[str, Any],
        next_tick: datetime | None,
        now: datetime,
    ) -> Record:
        """A new schedule; Conflict when its scope has one of that name."""
        sc = s.schedules
        row = {
            "id": uuid.uuid4(),
            "tenant": tenant,
            "scope": scope,
            "name": name,
            "source": source,
            "caller": caller,
            "spec": spec,
            "state": "new",
            "next_tick": next_tick,
            "fired": 0,
            "skipped": 0,
            "created_at": now,
            "updated_at": now,
        }
        try:
            with self.tx() as conn:
                conn.execute(insert(sc).values(**row))
                found = conn.execute(select(sc).where(sc.c.id == row["id"])).one()
        except IntegrityError:
            held = self.schedule(tenant, scope, name)
            where = "config/schedules" if held is not None and held.source == "file" else "the API"
            raise Conflict(
                f"a schedule named {name!r} exists in scope {scope!r} (from {where}); "
                "delete it first or pick another name",
                field="name",
            ) from None
        return _record(found)

    def schedule(self, tenant: str, scope: str, name: str) -> Record | None:
        sc = s.schedules
        with self.read() as conn:
            row = conn.execute(
                select(sc).where(sc.c.tenant == tenant, sc.c.scope == scope, sc.c.name == name)
            ).first()
        return None if row is None else _record(row)

    def schedule_by_id(self, schedule_id: uuid.UUID) -> Record | None:
        sc = s.schedules
        with self.read() as conn:
            row = conn.execute(select(sc).where(sc.c.id == schedule_id)).first()
        return None if row is None else _record(row)

    def list_schedules(
        self, *, tenant: str | None = None, scope: str | None = None, limit: int = MAX_ROWS
    ) -> list[Record]:
        """Schedules (of one tenant and scope when given), by name."""
        sc = s.schedules
        query = select(sc)
        if tenant is not None:
            query = query.where(sc.c.tenant == tenant)
        if scope is not None:
            query = query.where(sc.c.scope == scope)
        with self.read() as conn:
            rows = conn.execute(query.order_by(sc.c.name, sc.c.tenant, sc.c.scope).limit(limit))
            return [_record(r) for r in rows]

    def delete_schedule(self, tenant: str, scope: str, name: str) -> bool:
        """Delete a schedule created over the API (False: none of that name in the scope)."""
        sc = s.schedules
        with self.tx() as conn:
            done = conn.execute(
                delete(sc).where(
                    sc.c.tenant == tenant,
                    sc.c.scope == scope,
                    sc.c.name == name,
                    sc.c.source == "api",
                )
            )
            return done.rowcount > 0

    # -- config/schedules ------------------------------------------------------------------------

    def sync_file_schedule(
        self,
        *,
        tenant: str,
        scope: str,
        name: str,
        caller: str | None,
        spec: dict[str, Any],
        next_tick: Any,
        now: datetime,
    ) -> Record:
        """Create a file's schedule, or bring its row's settings in line with the file.

        ``next_tick`` maps the row's ``since`` to its next tick under these settings."""
        sc = s.schedules
        held = self.schedule(tenant, scope, name)
        if held is None:
            try:
                return self.create_schedule(
                    tenant=tenant,
                    scope=scope,
                    name=name,
                    source="file",
                    caller=caller,
                    spec=spec,
                    next_tick=next_tick(now),
                    now=now,
                )
            except Conflict:  # another beat synced it meanwhile
                held = self.schedule(tenant, scope, name)
                assert held is not None
        if held.source == "file" and held.spec == spec and held.caller == caller:
            return held
        with self.tx() as conn:
            conn.execute(
                update(sc)
                .where(sc.c.id == held.id)
                .values(
                    source="file",
                    caller=caller,
                    spec=spec,
                    next_tick=next_tick(held.since),
                    updated_at=now,
                )
            )
        found = self.schedule_by_id(held.id)
        assert found is not None
        return found

    def drop_file_schedules(self, keep: Iterable[uuid.UUID]) -> int:
        """Delete the file schedules whose file is gone (not in ``keep``); how many (a read
        alone when there are none: a start writes nothing it need not)."""
        sc = s.schedules
        kept = set(keep)
        with self.read() as conn:
            held = conn.execute(select(sc.c.id).where(sc.c.source == "file")).scalars().all()
        gone = [i for i in held if i not in kept]
        if not gone:
            return 0
        with self.tx() as conn:
            return conn.execute(delete(sc).where(sc.c.source == "file", sc.c.id.in_(gone))).rowcount

    # -- the beat ------------------------------------------------------------------------------

    def due_schedules(self, now: datetime, limit: int = MAX_ROWS) -> list[Record]:
        """Schedules whose next tick is due by ``now``, or whose claimed tick is still
        ``firing`` (its claimer may have died)."""
        sc = s.schedules
        with self.read() as conn:
            rows = conn.execute(
                select(sc)
                .where((sc.c.next_tick <= now) | (sc.c.state == "firing"))
                .order_by(sc.c.next_tick)
                .limit(limit)
            )
            return [_record(r) for r in rows]

    def earliest_tick(self) -> datetime | None:
        """The soonest next tick of any schedule."""
        with self.read() as conn:
            found: datetime | None = conn.execute(
                select(func.min(s.schedules.c.next_tick))
            ).scalar()
        return found

    def claim_tick(
        self,
        found: Record,
        tick: datetime,
        state: str,
        next_tick: datetime | None,
        now: datetime,
        *,
        note: str | None = None,
    ) -> bool:
        """Act on ``tick``: only if the row's last tick is still the one read in ``found`` and
        no tick is ``firing`` (compare-and-set). ``state``: ``firing`` or ``skipped``."""
        sc = s.schedules
        same = (
            sc.c.last_tick.is_(None)
            if found.last_tick is None
            else sc.c.last_tick == found.last_tick
        )
        values: dict[str, Any] = {
            "last_tick": tick,
            "state": state,
            "next_tick": next_tick,
            "note": note,
            "updated_at": now,
        }
        if state == "skipped":
            values["skipped"] = sc.c.skipped + 1
        with self.tx() as conn:
            done = conn.execute(
                update(sc).where(sc.c.id == found.id, same, sc.c.state != "firing").values(**values)
            )
            return done.rowcount == 1

    def settle_tick(
        self,
        schedule_id: uuid.UUID,
        tick: datetime,
        task_id: uuid.UUID | None,
        now: datetime,
        *,
        note: str | None = None,
    ) -> bool:
        """Record what the ``firing`` tick became: its task (``fired``), or, without one,
        ``refused`` with ``note`` saying why (False: another beat recorded it first)."""
        sc = s.schedules
        values: dict[str, Any] = {"updated_at": now, "note": note}
        if task_id is not None:
            values.update(state="fired", last_task_id=task_id, fired=sc.c.fired + 1)
        else:
            values.update(state="refused")
        with self.tx() as conn:
            done = conn.execute(
                update(sc)
                .where(sc.c.id == schedule_id, sc.c.last_tick == tick, sc.c.state == "firing")
                .values(**values)
            )
            return done.rowcount == 1

    def set_next_tick(
        self, schedule_id: uuid.UUID, next_tick: datetime | None, now: datetime
    ) -> None:
        """Store a schedule's next tick (None: it has ended)."""
        sc = s.schedules
        with self.tx() as conn:
            conn.execute(
                update(sc).where(sc.c.id == schedule_id).values(next_tick=next_tick, updated_at=now)
            )
