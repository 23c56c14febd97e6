"""Where-clause pieces several stores share."""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, select

from fleet.domain.values import CLAIMABLE, TaskStatus


def named(
    table: Table, deployment: str, tenant: str, scope: str, key: str
) -> tuple[ColumnElement[bool], ...]:
    """The rows of ``table`` (conversations, their tombstones) that carry a conversation's name:
    its deployment, tenant, scope and key."""
    return (
        table.c.deployment == deployment,
        table.c.tenant == tenant,
        table.c.scope == scope,
        table.c.key == key,
    )


def narrowed(query: Select[Any], *given: tuple[Any, object]) -> Select[Any]:
    """``query`` where each (column, value) matches, in the order given: equal to the value, or
    in a set's values (sorted); a None value narrows nothing."""
    for column, value in given:
        if value is None:
            continue
        if isinstance(value, Set):
            query = query.where(column.in_(sorted(value)))
        else:
            query = query.where(column == value)
    return query


def held(tasks: Table, now: datetime) -> ColumnElement[bool]:
    """Tasks of a conversation whose head is ``waiting`` and not due yet (for a person, a
    delegate or a time): nothing of it can start, so none of it is late or stuck."""
    head = tasks.alias("held_head")
    return (
        select(head.c.id)
        .where(
            head.c.conversation_id == tasks.c.conversation_id,
            head.c.status == TaskStatus.WAITING.value,
            head.c.not_before > now,
        )
        .exists()
    )


def due_work(tasks: Table, now: datetime) -> ColumnElement[bool]:
    """Tasks waiting for a worker (queued, handed back, a wait that ended and is to resume),
    not held behind a wait: what "oldest due" measures."""
    return tasks.c.status.in_([st.value for st in CLAIMABLE]) & ~held(tasks, now)
