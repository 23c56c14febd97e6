"""How tasks and messages look to users: one JSON shape for the CLI's ``--json`` and the API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fleet.domain.values import Admission, Message, Task


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat().replace("+00:00", "Z")


def task_json(task: Task) -> dict[str, Any]:
    return {
        "id": str(task.id),
        "deployment": task.deployment,
        "status": task.status.value,
        "conversation": task.conversation,
        "seq": task.seq,
        "input": [p.model_dump() for p in task.input],
        "submissions": task.submissions,
        "labels": task.labels,
        "idempotencyKey": task.idempotency_key,
        "attempts": task.attempts,
        "maxAttempts": task.max_attempts,
        "cancelRequested": task.cancel_requested,
        "createdAt": iso(task.created_at),
        "notBefore": iso(task.not_before),
        "startedAt": iso(task.started_at),
        "finishedAt": iso(task.finished_at),
        "reply": task.reply,
        "error": task.error,
    }


def admission_json(adm: Admission) -> dict[str, Any]:
    out = task_json(adm.task)
    out["mergedInto"] = str(adm.merged_into) if adm.merged_into else None
    out["duplicate"] = adm.duplicate
    return out


def message_json(msg: Message) -> dict[str, Any]:
    return {
        "id": msg.id,
        "role": msg.role,
        "content": msg.content,
        "taskId": str(msg.task_id) if msg.task_id else None,
        "runId": str(msg.run_id) if msg.run_id else None,
        "delivery": msg.delivery,
        "createdAt": iso(msg.created_at),
    }
