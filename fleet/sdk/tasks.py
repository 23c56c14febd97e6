"""A submitted task as the SDK shows it: its handle, its state, its messages, its failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.domain.values import TaskStatus
from fleet.errors import FleetError
from fleet.sdk.backends import MESSAGES_PAGE, Backend, View, messages_of

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


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of a model step's text as the model wrote it (``TaskHandle.stream``)."""

    text: str
    #: The model step it belongs to, and the task's attempt (run) that wrote it.
    step: int
    attempt: int
    #: The text before it that no finished step carried is void: start again with this.
    reset: bool = False

    def __str__(self) -> str:
        return self.text

    @classmethod
    def from_view(cls, view: View) -> TextChunk:
        return cls(
            text=view["text"],
            step=view["step"],
            attempt=view["attempt"],
            reset=bool(view.get("reset")),
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
        return TaskInfo.from_view(self._backend.get_task(self.id))

    def wait(self, timeout: float | None = None) -> str:
        """Block until the task ends; its reply. TaskFailed if it failed or was cancelled,
        TimeoutError if ``timeout`` seconds pass first (the task goes on)."""
        return _reply(self._backend.wait(self.id, timeout), timeout)

    async def await_(self, timeout: float | None = None) -> str:
        """``wait`` for async code: the event loop goes on while the task runs."""
        return _reply(await self._backend.wait_async(self.id, timeout), timeout)

    def __await__(self) -> Generator[Any, None, str]:
        return self.await_().__await__()

    def stream(self, timeout: float | None = None) -> Iterator[TextChunk]:
        """Its model text as the model writes it, until the task ends (or ``timeout`` passes):
        ``for chunk in handle.stream(): print(chunk.text, end="")``. A chunk with ``reset``
        voids the unfinished text before it (a retried call); each model step's text is
        chunks of its ``step`` (a step that then called tools was not the reply). Then
        ``wait()`` gives the reply (or raises)."""
        for data in self._backend.texts(self.id, timeout):
            yield TextChunk.from_view(data)

    async def astream(self, timeout: float | None = None) -> AsyncIterator[TextChunk]:
        """``stream`` for async code: the event loop goes on between chunks."""
        chunks = self.stream(timeout)
        done = object()
        while True:
            chunk = await asyncio.to_thread(next, chunks, done)
            if chunk is done:
                return
            assert isinstance(chunk, TextChunk)
            yield chunk

    def cancel(self) -> str:
        """Cancel it: ``cancelled`` (it was queued), ``requested`` (it stops at its next step
        boundary) or ``finished`` (too late; nothing changed)."""
        effect: str = self._backend.cancel(self.id)["effect"]
        return effect

    def pending_approvals(self) -> list[View]:
        """The tool calls it waits to have decided (``waiting``), as GetTask's
        ``pendingApprovals`` shows them: ``id``, ``tool``, ``arguments``, ``expiresAt``..."""
        found: list[View] = self._backend.get_task(self.id).get("pendingApprovals") or []
        return found

    def approve(self, approval_id: str, reason: str | None = None) -> View:
        """Approve one of its pending approvals: the call runs once, with the arguments shown;
        the approval as decided. Conflict when it was decided already or expired."""
        approval: View = self._backend.decide_approval(
            self.id, approval_id, "approve", reason=reason
        )["approval"]
        return approval

    def reject(self, approval_id: str, reason: str | None = None) -> View:
        """Reject one of its pending approvals: the call never runs, the model is told who
        decided and ``reason``; the approval as decided."""
        approval: View = self._backend.decide_approval(
            self.id, approval_id, "reject", reason=reason
        )["approval"]
        return approval

    def messages(self) -> list[Message]:
        """The messages this task added to its conversation (its input, then its reply)."""
        found = messages_of(self._backend, self.deployment, self.conversation, MESSAGES_PAGE)
        return [Message.from_view(m) for m in found if m.get("taskId") == self.id]
