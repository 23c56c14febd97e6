"""Where-clause pieces several stores share."""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from sqlalchemy import ColumnElement, Select, Table


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
