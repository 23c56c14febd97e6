"""What ``fleet run`` and ``fleet tasks`` do, against the store or a server, and how it prints.

Both ways answer with the API's JSON shapes (:mod:`fleet.views`), so the output of a command is
the same whether it talked to the store (embedded or fleet) or to ``fleet serve``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from fleet.domain.values import TaskStatus

View = dict[str, Any]


class Tasks(Protocol):
    """The task operations the CLI needs; a store-backed and an HTTP-backed one exist."""

    def submit(
        self,
        deployment: str,
        text: str,
        *,
        key: str | None,
        labels: dict[str, str],
        idempotency_key: str | None,
    ) -> View: ...

    def wait(self, task_id: str, timeout: float, status: Console) -> View: ...

    def get(self, task_id: uuid.UUID) -> View: ...

    def list(
        self,
        *,
        conversation: str | None,
        deployment: str | None,
        status: TaskStatus | None,
        limit: int,
    ) -> list[View]: ...

    def cancel(self, task_id: uuid.UUID) -> View: ...


class LocalTasks:
    """Straight to the store (and, embedded, running the task in this process)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt

    def submit(
        self,
        deployment: str,
        text: str,
        *,
        key: str | None,
        labels: dict[str, str],
        idempotency_key: str | None,
    ) -> View:
        from fleet.views import admission_json

        adm = self.rt.dispatcher.submit(
            deployment, text, key=key, labels=labels, idempotency_key=idempotency_key
        )
        return admission_json(adm)

    def wait(self, task_id: str, timeout: float, status: Console) -> View:
        from fleet.views import task_json

        tid = uuid.UUID(task_id)
        if self.rt.local_waker is not None:
            from fleet.dispatch.embedded import run_until_done

            return task_json(run_until_done(self.rt.dispatcher, self.rt.local_waker, tid, timeout))
        with status.status(f"waiting for task {task_id}"):
            return task_json(self.rt.dispatcher.wait(tid, timeout))

    def get(self, task_id: uuid.UUID) -> View:
        from fleet.views import task_json

        return task_json(self.rt.store.get_task(task_id))

    def list(
        self,
        *,
        conversation: str | None,
        deployment: str | None,
        status: TaskStatus | None,
        limit: int,
    ) -> list[View]:
        from fleet.domain.keys import split_scoped
        from fleet.store import TaskFilter
        from fleet.views import task_json

        if deployment is not None:
            self.rt.config.deployment(deployment)  # an unknown one is refused, as by the server
        scope, key = split_scoped(conversation) if conversation is not None else (None, None)
        found = self.rt.store.list_tasks(
            TaskFilter(
                deployment=deployment, scope=scope, conversation_key=key, status=status, limit=limit
            )
        )
        return [task_json(t) for t in found]

    def cancel(self, task_id: uuid.UUID) -> View:
        from fleet.views import task_json

        result = self.rt.dispatcher.cancel(task_id)
        return {"effect": result.effect, "task": task_json(result.task)}


class RemoteTasks:
    """Through ``fleet serve``'s HTTP API."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def submit(
        self,
        deployment: str,
        text: str,
        *,
        key: str | None,
        labels: dict[str, str],
        idempotency_key: str | None,
    ) -> View:
        view: View = self.client.submit(
            deployment,
            text,
            conversation_key=key,
            labels=labels,
            idempotency_key=idempotency_key,
        )
        return view

    def wait(self, task_id: str, timeout: float, status: Console) -> View:
        with status.status(f"waiting for task {task_id}"):
            view: View = self.client.wait(task_id, timeout)
        return view

    def get(self, task_id: uuid.UUID) -> View:
        view: View = self.client.get_task(str(task_id))
        return view

    def list(
        self,
        *,
        conversation: str | None,
        deployment: str | None,
        status: TaskStatus | None,
        limit: int,
    ) -> list[View]:
        found: list[View] = self.client.list_tasks(
            conversation_key=conversation,
            deployment=deployment,
            status=None if status is None else status.value,
            limit=limit,
        )
        return found

    def cancel(self, task_id: uuid.UUID) -> View:
        view: View = self.client.cancel(str(task_id))
        return view


@contextmanager
def open_tasks(server: str | None, api_key: str | None) -> Iterator[Tasks]:
    """The server's API when ``server`` is set, else the store from the environment."""
    if server:
        from fleet.client import FleetClient

        with FleetClient(server, api_key) as client:
            yield RemoteTasks(client)
        return
    from fleet.runtime import build

    rt = build()
    try:
        yield LocalTasks(rt)
    finally:
        rt.close()


# -- printing ----------------------------------------------------------------------------------


def _when(value: str | None) -> str:
    """``2024-05-01T10:00:00.123456Z`` → ``2024-05-01 10:00:00``."""
    return value[:19].replace("T", " ") if value else "-"


def _input_text(view: View) -> str:
    return "\n".join(
        p["text"] if p.get("type") == "text" else json.dumps(p.get("data")) for p in view["input"]
    )


def show_task(out: Console, view: View) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, Any]] = [
        ("id", view["id"]),
        ("deployment", view["deployment"]),
        ("conversation", view["conversation"]),
        ("seq", view["seq"]),
        ("status", view["status"]),
        ("attempts", f"{view['attempts']}/{view['maxAttempts']}"),
        ("created", _when(view["createdAt"])),
        ("started", _when(view["startedAt"])),
        ("finished", _when(view["finishedAt"])),
        ("labels", ", ".join(f"{k}={v}" for k, v in view["labels"].items()) or "-"),
        ("input", _input_text(view)),
    ]
    if view["reply"] is not None:
        rows.append(("reply", view["reply"]))
    if view["error"]:
        rows.append(("error", view["error"]))
    for k, v in rows:
        table.add_row(k, str(v))
    out.print(table)


def show_task_list(out: Console, views: list[View]) -> None:
    table = Table("id", "deployment", "conversation", "seq", "status", "created", "reply/error")
    for v in views:
        summary = (v["reply"] if v["reply"] is not None else v["error"] or "")[:60]
        table.add_row(
            v["id"],
            v["deployment"],
            v["conversation"],
            str(v["seq"]),
            v["status"],
            _when(v["createdAt"]),
            summary,
        )
    out.print(table)


CANCEL_MESSAGES = {
    "cancelled": "cancelled",
    "requested": "cancel requested: it stops at its next step boundary",
}


def cancel_message(result: View) -> str:
    task = result["task"]
    text = CANCEL_MESSAGES.get(result["effect"], f"already {task['status']}; nothing to cancel")
    return f"{task['id']}: {text}"
