"""The Python SDK: one ``Conversation`` object is one conversation, continued by each run.

``Fleet()`` runs embedded (a SQLite file, tasks run on a pool of threads in this process while
the object lives), admits into a fleet when ``FLEET_REDIS_URL`` is set (workers run the tasks),
or talks to a ``fleet serve`` with ``Fleet(server=URL, api_key=...)`` (or ``FLEET_SERVER``).
Every way keeps the same guarantees: a conversation's tasks run one at a time, in order.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from fleet.domain.values import TaskStatus
from fleet.errors import FleetError, InputError
from fleet.sdk_backends import MESSAGES_PAGE, Backend, Input, View

#: Statuses ``run`` and ``wait`` raise ``TaskFailed`` for (``superseded`` has a reply: its report).
FAILED = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A task as it is now: its status and, once finished, its reply or error."""

    id: str
    deployment: str
    #: The scoped conversation key (``api:ticket-4711``): what continues the conversation.
    conversation: str
    #: Its place in the conversation (tasks run in this order).
    seq: int
    status: TaskStatus
    reply: str | None
    error: str | None
    labels: dict[str, str]
    attempts: int
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_view(cls, view: View) -> TaskInfo:
        return cls(
            id=view["id"],
            deployment=view["deployment"],
            conversation=view["conversation"],
            seq=view["seq"],
            status=TaskStatus(view["status"]),
            reply=view.get("reply"),
            error=view.get("error"),
            labels=dict(view.get("labels") or {}),
            attempts=view.get("attempts", 0),
            created_at=_when(view.get("createdAt")),
            started_at=_when(view.get("startedAt")),
            finished_at=_when(view.get("finishedAt")),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """A stored conversation message: a user's input or an agent's reply."""

    id: int
    role: str
    content: str
    #: The task that added it.
    task_id: str | None
    created_at: datetime | None

    @classmethod
    def from_view(cls, view: View) -> Message:
        return cls(
            id=view["id"],
            role=view["role"],
            content=view["content"],
            task_id=view.get("taskId"),
            created_at=_when(view.get("createdAt")),
        )


class TaskFailed(FleetError):
    """The task ended failed or cancelled; ``task`` holds its id, status and error."""

    def __init__(self, task: TaskInfo) -> None:
        super().__init__(f"task {task.id} {task.status.value}: {task.error or 'no error recorded'}")
        self.task = task
        self.task_id = task.id
        self.error = task.error


def _reply(view: View, timeout: float | None) -> str:
    """A finished task's reply; TaskFailed if it failed, TimeoutError if it has not finished."""
    info = TaskInfo.from_view(view)
    if info.status in FAILED:
        raise TaskFailed(info)
    if not info.status.terminal:
        waited = "" if timeout is None else f" after {timeout:g}s"
        raise TimeoutError(
            f"task {info.id} is still {info.status.value}{waited}; it goes on: "
            "wait again, or cancel it"
        )
    return info.reply or ""


@dataclass(eq=False)
class TaskHandle:
    """A submitted task: wait for its reply (``wait()``, ``await handle``), cancel it, read it."""

    _backend: Backend = field(repr=False)
    id: str
    deployment: str
    conversation: str
    seq: int
    #: The idempotency key was seen before: this is the original task; nothing was created.
    duplicate: bool = False
    #: ``collect`` merged the submission into this still-queued task.
    merged: bool = False
    #: ``queued`` (a task, new or merged) or ``run`` (``steer``: into this running task's run).
    delivered_to: str = "queued"
    #: The queued task a full queue cancelled to make room (``on_full = "drop_oldest"``).
    dropped: str | None = None
    #: The running task this submission asked to stop (``interrupt``).
    interrupted: str | None = None

    @classmethod
    def _admitted(cls, backend: Backend, view: View) -> TaskHandle:
        return cls(
            backend,
            id=view["id"],
            deployment=view["deployment"],
            conversation=view["conversation"],
            seq=view["seq"],
            duplicate=bool(view.get("duplicate")),
            merged=view.get("mergedInto") is not None,
            delivered_to=view.get("deliveredTo") or "queued",
            dropped=view.get("dropped"),
            interrupted=view.get("interrupted"),
        )

    def info(self) -> TaskInfo:
        """The task as it is now."""
        return TaskInfo.from_view(self._backend.get(self.id))

    def wait(self, timeout: float | None = None) -> str:
        """Block until the task ends; its reply. TaskFailed if it failed or was cancelled,
        TimeoutError if ``timeout`` seconds pass first (the task goes on)."""
        return _reply(self._backend.wait(self.id, timeout), timeout)

    async def await_(self, timeout: float | None = None) -> str:
        """``wait`` for async code: the event loop goes on while the task runs."""
        return _reply(await self._backend.wait_async(self.id, timeout), timeout)

    def __await__(self) -> Generator[Any, None, str]:
        return self.await_().__await__()

    def cancel(self) -> str:
        """Cancel it: ``cancelled`` (it was queued), ``requested`` (it stops at its next step
        boundary) or ``finished`` (too late; nothing changed)."""
        effect: str = self._backend.cancel(self.id)["effect"]
        return effect

    def messages(self) -> list[Message]:
        """The messages this task added to its conversation (its input, then its reply)."""
        found = self._backend.messages(self.deployment, self.conversation, MESSAGES_PAGE)
        return [Message.from_view(m) for m in found if m.get("taskId") == self.id]


class Conversation:
    """One conversation of a deployment: each run continues it, in order.

    Without a key the first submission starts a new conversation, and this object keeps its
    key (``conv.key``, e.g. ``api:3f2c...``); ``fleet.conversation(name, key=that)`` resumes it
    later, from this process or another.
    """

    def __init__(
        self, backend: Backend, deployment: str, key: str | None, resource: str | None = None
    ) -> None:
        self._backend = backend
        self.deployment = deployment
        #: Who the conversation is about (``resourceId``): recall and working memory with
        #: ``scope = "resource"`` reach that resource's other conversations.
        self.resource = resource
        self._key = key or None
        self._first = threading.Lock()

    @property
    def key(self) -> str | None:
        """The conversation's scoped key (``api:ticket-4711``) once a submission answered (the
        key as given before that; None for a keyless conversation not yet started)."""
        return self._key

    def __repr__(self) -> str:
        return f"Conversation({self.deployment!r}, key={self._key!r}, resource={self.resource!r})"

    def submit(
        self,
        input: Input,
        *,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        delivery: str | None = None,
    ) -> TaskHandle:
        """Add a task to the conversation and return at once (it runs after those before it).

        ``delivery`` (``followup``, ``collect``, ``steer``, ``interrupt``) overrides the
        deployment's queue mode for this submission; ``idempotency_key`` makes repeats
        return the first task.
        """

        def send() -> View:
            view = self._backend.submit(
                self.deployment,
                input,
                key=self._key,
                labels=labels,
                idempotency_key=idempotency_key,
                delivery=delivery,
                resource=self.resource,
            )
            self._key = view["conversation"]
            return view

        if self._key is not None:
            view = send()
        else:
            with self._first:  # a keyless conversation's first run: the others wait for its key
                view = send()
        return TaskHandle._admitted(self._backend, view)

    def run(
        self,
        input: Input,
        *,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        delivery: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """Submit and wait: the agent's reply. TaskFailed if the task failed or was
        cancelled; TimeoutError after ``timeout`` seconds (the task goes on)."""
        handle = self.submit(
            input, labels=labels, idempotency_key=idempotency_key, delivery=delivery
        )
        return handle.wait(timeout)

    async def asubmit(
        self,
        input: Input,
        *,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        delivery: str | None = None,
    ) -> TaskHandle:
        """``submit`` for async code (the admission runs on a worker thread)."""
        return await asyncio.to_thread(
            self.submit,
            input,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
        )

    async def arun(
        self,
        input: Input,
        *,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        delivery: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """``run`` for async code: the event loop goes on while the task runs."""
        handle = await self.asubmit(
            input, labels=labels, idempotency_key=idempotency_key, delivery=delivery
        )
        return await handle.await_(timeout)

    def messages(self, limit: int = 100) -> list[Message]:
        """The conversation's newest ``limit`` messages (at most 1000), oldest first."""
        if self._key is None:
            return []
        found = self._backend.messages(self.deployment, self._key, limit)
        return [Message.from_view(m) for m in found]


class Fleet:
    """Entry point of the SDK; close it (or use ``with``) to stop its threads and connections.

    - ``Fleet()``: embedded without ``FLEET_REDIS_URL`` (SQLite in ``FLEET_HOME``, tasks run on
      ``concurrency`` threads here: ``FLEET_EMBEDDED_CONCURRENCY``, 4); with it, fleet mode
      (the store of ``FLEET_DATABASE_URL``; ``fleet worker`` processes run the tasks).
    - ``Fleet(server=URL, api_key=KEY)`` (or ``FLEET_SERVER`` / ``FLEET_API_KEY``): a
      ``fleet serve`` over HTTP.

    ``config_dir``, ``home`` and ``database_url`` override ``FLEET_CONFIG_DIR``, ``FLEET_HOME``
    and ``FLEET_DATABASE_URL``.
    """

    def __init__(
        self,
        server: str | None = None,
        api_key: str | None = None,
        *,
        config_dir: str | Path | None = None,
        home: str | Path | None = None,
        database_url: str | None = None,
        concurrency: int | None = None,
    ) -> None:
        from fleet.config import load_settings

        overrides: dict[str, Any] = {
            k: v
            for k, v in (("config_dir", config_dir), ("home", home), ("database_url", database_url))
            if v is not None
        }
        if concurrency is not None:
            if not 1 <= concurrency <= 32:
                raise InputError(
                    f"concurrency must be 1 to 32, got {concurrency}", field="concurrency"
                )
            overrides["embedded_concurrency"] = concurrency
        settings = load_settings(**overrides)
        server = server or settings.server
        self._backend: Backend
        if server:
            if concurrency is not None:
                raise InputError(
                    "concurrency is for embedded mode; the server's own settings decide",
                    field="concurrency",
                )
            from fleet.sdk_backends import ServerBackend

            secret = settings.api_key.get_secret_value() if settings.api_key else None
            self._backend = ServerBackend(server, api_key or secret)
        else:
            from fleet.sdk_backends import StoreBackend

            self._backend = StoreBackend(settings, concurrency)
        self._closed = False

    @property
    def mode(self) -> str:
        """``embedded``, ``fleet`` or ``server``."""
        return self._backend.mode

    def conversation(
        self, deployment: str, key: str | None = None, *, resource: str | None = None
    ) -> Conversation:
        """The conversation ``key`` of ``deployment`` (created by its first run); no key: a new
        one on the first run. ``resource`` names who its submissions are about."""
        if key == "":  # not "no key": that would start a new conversation every time
            raise InputError(
                "conversation key '' is empty: give the key, or none for a new conversation",
                field="key",
            )
        self._open()
        self._backend.check_deployment(deployment)
        return Conversation(self._backend, deployment, key, resource)

    def task(self, task_id: str) -> TaskHandle:
        """A handle on a task submitted earlier (by id)."""
        self._open()
        try:
            uuid.UUID(task_id)
        except ValueError:
            raise InputError(f"task id {task_id!r} is not a UUID", field="id") from None
        return TaskHandle._admitted(self._backend, self._backend.get(task_id))

    def _open(self) -> None:
        if self._closed:
            raise FleetError("this Fleet is closed; make a new one")

    def close(self) -> None:
        """Stop running tasks here (embedded: each running one finishes first) and disconnect."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
