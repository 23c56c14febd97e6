"""Explicit mapping from rows to the frozen values of ``fleet.domain.values``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT
from fleet.domain.runs import TraceRow
from fleet.domain.values import DataPart, Message, Run, Step, Task, TaskStatus, TextPart
from fleet.store import schema as s

_PARTS = TypeAdapter(tuple[TextPart | DataPart, ...])
#: Validates stored input parts (tasks, inbox messages).
PARTS = _PARTS

#: Columns a task read returns (also the RETURNING list of task writes).
TASK_COLUMNS = tuple(s.tasks.c)


def _mapping(row: Any) -> Any:
    """A SQLAlchemy row's mapping, or the mapping itself (rows from the driver)."""
    return getattr(row, "_mapping", row)


def task(row: Any) -> Task:
    m = _mapping(row)
    return Task(
        id=m["id"],
        deployment=m["deployment"],
        conversation_id=m["conversation_id"],
        scope=m["scope"],
        key=m["conversation_key"],
        seq=m["seq"],
        status=TaskStatus(m["status"]),
        input=_PARTS.validate_python(m["input"]),
        submissions=m["submissions"],
        not_before=m["not_before"],
        idempotency_key=m["idempotency_key"],
        labels=m["labels"] or {},
        attempts=m["attempts"],
        max_attempts=m["max_attempts"],
        fence=m["fence"],
        cancel_requested=m["cancel_requested"],
        created_at=m["created_at"],
        leased_at=m["leased_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        error=m["error"],
        result=m["result"],
        caller=m.get("caller"),
        inbox=m.get("inbox") or 0,
        resource_id=m.get("resource_id"),
        interrupt_requested=bool(m.get("interrupt_requested")),
        tenant=m.get("tenant") or DEFAULT_TENANT,
        priority=m.get("priority", DEFAULT_PRIORITY),
        error_class=m.get("error_class"),
    )


#: Fields that read a NULL column as ``{}``.
_EMPTY = frozenset({"usage", "details", "labels"})


def pick(row: Any, names: Iterable[str]) -> dict[str, Any]:
    """The row's columns named like the value's fields, as they are (``_EMPTY`` ones: ``{}``
    for NULL)."""
    m = _mapping(row)
    return {n: (m[n] or {}) if n in _EMPTY else m[n] for n in names}


def message(row: Any) -> Message:
    return Message(**pick(row, Message.model_fields))


def run(row: Any) -> Run:
    return Run(**pick(row, Run.model_fields))


def step(row: Any) -> Step:
    return Step(**pick(row, Step.model_fields))


def trace(row: Any) -> TraceRow:
    """A journal step as a retry replays it (the same columns as ``step``)."""
    return TraceRow(**pick(row, Step.model_fields))


def dump_parts(parts: tuple[TextPart | DataPart, ...] | list[TextPart | DataPart]) -> list[Any]:
    return [p.model_dump() for p in parts]
