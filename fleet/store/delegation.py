"""Delegation records: a delegated task's chain, and the reporting of a started task's result."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update

from fleet.domain import delegation as rules
from fleet.domain.values import TERMINAL, Task
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase

d = s.delegations
t = s.tasks


def insert_record(
    conn: Connection, task_id: uuid.UUID, record: rules.Record, now: datetime, redact: Any
) -> None:
    """Write ``record`` for the task just admitted (inside the admission transaction)."""
    report_to = asdict(record.report_to) if record.report_to is not None else None
    if report_to is not None:
        report_to["labels"] = redact(dict(report_to["labels"]))
        if report_to["generation"] is None and record.parent_task_id:
            # the generation the caller's run is in (a reset waits for that run to end)
            report_to["generation"] = conn.execute(
                select(t.c.generation).where(t.c.id == uuid.UUID(record.parent_task_id))
            ).scalar()
    conn.execute(
        d.insert().values(
            task_id=task_id,
            mode=record.mode,
            parent_task_id=uuid.UUID(record.parent_task_id) if record.parent_task_id else None,
            chain=list(record.chain),
            report_to=report_to,
            created_at=now,
        )
    )


def _record(row: Any) -> rules.Record:
    to = row.report_to
    return rules.Record(
        mode=row.mode,
        chain=tuple(row.chain or ()),
        parent_task_id=str(row.parent_task_id) if row.parent_task_id else None,
        report_to=rules.ReportTo(**{**to, "labels": dict(to.get("labels") or {})}) if to else None,
        reported=row.reported_at is not None,
    )


class DelegationStore(StoreBase):
    def delegation(self, task_id: uuid.UUID) -> rules.Record | None:
        """The delegation record of a task (None: it was not delegated)."""
        with self.read() as conn:
            row = conn.execute(select(d).where(d.c.task_id == task_id)).first()
        return _record(row) if row is not None else None

    def unreported(self, limit: int = 100) -> list[tuple[Task, rules.Record]]:
        """Started tasks that have ended and whose result was not reported back yet."""
        with self.read() as conn:
            found = conn.execute(
                select(
                    d.c.mode,
                    d.c.chain,
                    d.c.parent_task_id,
                    d.c.report_to,
                    d.c.reported_at,
                    *rows.TASK_COLUMNS,
                )
                .join(t, t.c.id == d.c.task_id)
                .where(
                    d.c.mode == "start",
                    d.c.reported_at.is_(None),
                    t.c.status.in_([x.value for x in TERMINAL]),
                )
                .limit(limit)
            ).all()
        return [(rows.task(row), _record(row)) for row in found]

    def mark_reported(self, task_id: uuid.UUID, report_task_id: uuid.UUID, now: datetime) -> None:
        """The result of ``task_id`` was admitted as (or into) ``report_task_id``."""
        with self.tx() as conn:
            conn.execute(
                update(d)
                .where(d.c.task_id == task_id, d.c.reported_at.is_(None))
                .values(reported_at=now, reported_task_id=report_task_id)
            )
