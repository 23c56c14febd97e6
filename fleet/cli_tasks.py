"""What ``fleet run`` and ``fleet tasks`` do, against the store or a server, and how it prints.

Both ways answer with the API's JSON shapes (:mod:`fleet.views`), so the output of a command is
the same whether it talked to the store (embedded or fleet) or to ``fleet serve``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.cli_live import POLL_MAX_S, POLL_MIN_S, OnEvent, StoreFollower
from fleet.cli_tables import Col, fit
from fleet.domain.ids import IdPrefix, short
from fleet.domain.values import Task, TaskStatus
from fleet.errors import InputError, NotFound

View = dict[str, Any]
#: Whole task ids as text (an alias: the classes below have a method named ``list``).
Ids = list[str]

#: An ambiguous id prefix lists at most this many of the ids it matches.
AMBIGUOUS_SHOWN = 10
#: ``tasks ls`` shows at most this many characters of a reply or error.
SUMMARY_CHARS = 60


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
        delivery: str | None = None,
        resource: str | None = None,
    ) -> View: ...

    def wait(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        """The task once finished (or as it is after ``timeout``); ``on_event`` gets its events
        as they are stored, else a spinner shows on ``status``."""
        ...

    def give_up(self, task_id: str) -> View | None:
        """The command stops waiting for an unfinished task: embedded, nothing would finish it
        once the command exits, so it is cancelled (its view then); else None (a worker or the
        server goes on)."""
        ...

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

    def find(self, prefix: IdPrefix, limit: int) -> Ids:
        """Ids (at most ``limit``) that start with ``prefix``, of the tasks this one may see."""
        ...


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
        delivery: str | None = None,
        resource: str | None = None,
    ) -> View:
        from fleet.views import admission_json

        adm = self.rt.dispatcher.submit(
            deployment,
            text,
            key=key,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
            resource_id=resource,
        )
        return admission_json(adm)

    def wait(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        from fleet.views import task_json

        tid = uuid.UUID(task_id)
        if self.rt.local_waker is not None:
            from fleet.dispatch.embedded import run_within

            def work() -> Task:
                return run_within(self.rt.dispatcher, self.rt.local_waker, tid, timeout)

            if on_event is None:
                return task_json(work())
            return task_json(StoreFollower(self.rt.store, tid, on_event).alongside(work))
        if on_event is None:
            with status.status(f"waiting for task {task_id}"):
                return task_json(self.rt.dispatcher.wait(tid, timeout))
        follower = StoreFollower(self.rt.store, tid, on_event)
        deadline = time.monotonic() + timeout
        pause = POLL_MIN_S
        while True:
            task = follower.poll()
            left = deadline - time.monotonic()
            if task.status.terminal or left <= 0:
                return task_json(task)
            time.sleep(min(pause, left))  # a poll interval, not a synchronization
            pause = min(pause * 2, POLL_MAX_S)

    def give_up(self, task_id: str) -> View | None:
        if self.rt.local_waker is None:
            return None  # fleet mode: the workers go on
        from fleet.dispatch.embedded import give_up
        from fleet.views import task_json

        return task_json(give_up(self.rt.dispatcher, uuid.UUID(task_id)))

    def get(self, task_id: uuid.UUID) -> View:
        from fleet.views import task_with_deliveries

        task = self.rt.store.get_task(task_id)
        return task_with_deliveries(task, self.rt.store.task_deliveries(task.id))

    def list(
        self,
        *,
        conversation: str | None,
        deployment: str | None,
        status: TaskStatus | None,
        limit: int,
    ) -> list[View]:
        from fleet.domain.keys import api_scope, split_scoped
        from fleet.store import TaskFilter
        from fleet.views import task_json

        if deployment is not None:
            self.rt.config.deployment(deployment)  # an unknown one is refused, as by the server
        scope, key, tenants = None, None, None
        if conversation is not None:
            # an operator's key: ``api:acme:k`` is tenant acme's when acme is configured
            tenant = self.rt.dispatcher.lifecycle.tenant_of(conversation)
            scope, key = split_scoped(conversation, api_scope(tenant))
            if scope == "api":
                scope = api_scope(tenant)
            tenants = frozenset({tenant})
        found = self.rt.store.list_tasks(
            TaskFilter(
                deployment=deployment,
                scope=scope,
                conversation_key=key,
                status=status,
                limit=limit,
                tenants=tenants,
            )
        )
        return [task_json(t) for t in found]

    def cancel(self, task_id: uuid.UUID) -> View:
        from fleet.views import task_json

        result = self.rt.dispatcher.cancel(task_id)
        return {"effect": result.effect, "task": task_json(result.task)}

    def find(self, prefix: IdPrefix, limit: int) -> Ids:
        from fleet.store import TaskFilter

        found = self.rt.store.list_tasks(TaskFilter(id_prefix=prefix, limit=limit))
        return [str(t.id) for t in found]


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
        delivery: str | None = None,
        resource: str | None = None,
    ) -> View:
        view: View = self.client.submit(
            deployment,
            text,
            conversation_key=key,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
            resource_id=resource,
        )
        return view

    def wait(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        if on_event is None:
            with status.status(f"waiting for task {task_id}"):
                view: View = self.client.wait(task_id, timeout)
            return view
        for ev in self.client.events(task_id, timeout):
            on_event(ev.kind, ev.data)
            if ev.kind == "end":
                final: View = ev.data["task"]
                return final
        found: View = self.client.get_task(task_id)
        return found

    def give_up(self, task_id: str) -> View | None:
        return None  # the server goes on

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

    def find(self, prefix: IdPrefix, limit: int) -> Ids:
        found = self.client.list_tasks(id_prefix=prefix.hex, limit=limit)
        return [str(v["id"]) for v in found]


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


def resolve_id(tasks: Tasks, ref: uuid.UUID | IdPrefix) -> uuid.UUID:
    """The one task id ``ref`` names: a whole id as is, a prefix when exactly one id has it."""
    if isinstance(ref, uuid.UUID):
        return ref
    found = tasks.find(ref, AMBIGUOUS_SHOWN + 1)
    if not found:
        raise NotFound(f"no task with an id starting {ref.typed!r}", field="id")
    if len(found) > 1:
        listed = ", ".join(found[:AMBIGUOUS_SHOWN])
        more = " and more" if len(found) > AMBIGUOUS_SHOWN else ""
        raise InputError(
            f"task id prefix {ref.typed!r} is ambiguous: it matches {listed}{more}; "
            "give more characters",
            field="id",
        )
    return uuid.UUID(found[0])


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
    table.add_column(overflow="fold")
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
    for d in view.get("deliveries") or ():
        rows.append(("delivery", _delivery_line(d)))
    for k, v in rows:
        table.add_row(k, Text(str(v)))  # Text: user text is never read as Rich markup
    out.print(table)


def _delivery_line(d: View) -> str:
    """``sent  reply:triggers/github  https://…  2/5 attempts`` and each attempt's outcome."""
    line = f"{d['status']}  {d['target']}  {d['url'] or '-'}  {d['attempts']}/{d['maxAttempts']}"
    if d.get("nextAttemptAt"):
        line += f"  next {_when(d['nextAttemptAt'])}"
    for a in d.get("journal") or ():
        code, error, detail = a.get("httpStatus"), a.get("error"), a.get("detail")
        status = f" (HTTP {code})" if code else ""
        line += f"\n  #{a.get('attempt')} {_when(a.get('at'))} {a.get('outcome')}"
        if a.get("outcome") == "sent" or not (error or detail):
            line += status
        elif error:  # what failed first: ``HTTP 500 from https://…: <the answer>``
            line += f": {error}"
        else:  # (journaled before errors said what failed)
            line += f"{status}: {detail}"
    return line


def _summary(view: View) -> str:
    """The reply (or error) on one line, cut at ``SUMMARY_CHARS``: ``tasks show`` has it whole."""
    text = view["reply"] if view["reply"] is not None else view["error"] or ""
    return " ".join(text.split())[:SUMMARY_CHARS]


def _undated_year(when: str) -> str:
    """``2026-11-30 06:12:34`` → ``11-30 06:12:34`` (the list's created time, when narrow)."""
    return when[5:] if len(when) == 19 else when


#: ``tasks ls``: ids, seqs, statuses and times whole; keys fold; the summary is one cut line.
#: Narrow, the created time loses its year, then the deployment and the summary columns go.
_LIST_COLUMNS = (
    Col("id", "whole"),
    Col("deployment", shrink=1, drop=1),
    Col("conversation", shrink=1),
    Col("seq", "whole", justify="right"),
    Col("status", "whole"),
    Col("created", "whole", short=_undated_year, shorten=0, drop=3),
    Col("reply/error", "cut", drop=2),
)


def show_task_list(out: Console, views: list[View]) -> None:
    """Ids, seqs, statuses and times whole, keys folded rather than cut, the summary ending in
    "…"; never a header split (columns go first: ``tasks show`` and ``--json`` have them)."""
    rows = [
        (
            short(v["id"]),
            v["deployment"],
            v["conversation"],
            str(v["seq"]),
            v["status"],
            _when(v["createdAt"]),
            _summary(v),
        )
        for v in views
    ]
    out.print(fit(_LIST_COLUMNS, rows, out.width).table())


CANCEL_MESSAGES = {
    "cancelled": "cancelled",
    "requested": "cancel requested: it stops at its next step boundary",
}


def cancel_message(result: View) -> str:
    task = result["task"]
    text = CANCEL_MESSAGES.get(result["effect"], f"already {task['status']}; nothing to cancel")
    return f"{task['id']}: {text}"
