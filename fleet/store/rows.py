"""Explicit mapping from rows to the frozen values of ``fleet.domain.values``."""

from __future__ import annotations

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
    )


def message(row: Any) -> Message:
    m = _mapping(row)
    return Message(
        id=m["id"],
        conversation_id=m["conversation_id"],
        task_id=m["task_id"],
        run_id=m["run_id"],
        role=m["role"],
        content=m["content"],
        delivery=m["delivery"],
        created_at=m["created_at"],
    )


def run(row: Any) -> Run:
    m = _mapping(row)
    return Run(
        id=m["id"],
        task_id=m["task_id"],
        attempt=m["attempt"],
        fence=m["fence"],
        status=m["status"],
        model=m["model"],
        context=m["context"],
        usage=m["usage"] or {},
        error=m["error"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        worker=m["worker"],
        details=m["details"] or {},
    )


def step(row: Any) -> Step:
    m = _mapping(row)
    return Step(
        step=m["step"],
        kind=m["kind"],
        name=m["name"],
        status=m["status"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        usage=m["usage"] or {},
        started_at=m["started_at"],
        duration_ms=m["duration_ms"],
        call_id=m["call_id"],
        replayed=m["replayed"],
    )


def trace(row: Any) -> TraceRow:
    m = _mapping(row)
    return TraceRow(
        step=m["step"],
        kind=m["kind"],
        name=m["name"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        usage=m["usage"] or {},
        started_at=m["started_at"],
        duration_ms=m["duration_ms"],
        status=m["status"],
        call_id=m["call_id"],
        replayed=m["replayed"],
    )


def dump_parts(parts: tuple[TextPart | DataPart, ...] | list[TextPart | DataPart]) -> list[Any]:
    return [p.model_dump() for p in parts]
