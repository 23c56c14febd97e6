"""Frozen value objects that cross the layers (database rows stay inside ``fleet.store``)."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class TaskStatus(StrEnum):
    """Lifecycle of a task: queued → running → succeeded / failed / cancelled."""

    QUEUED = "queued"
    #: Claimed by a worker, run not open yet. fleet's claim opens the run in the same statement,
    #: so stores never show it; the one-active-task index covers it with ``running``.
    LEASED = "leased"
    RUNNING = "running"
    #: A run whose worker was lost, or handed back at worker shutdown; it waits to be resumed
    #: (it keeps its frozen snapshot and step journal).
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Stopped for a newer submission (``interrupt`` mode), with the report it gave first.
    SUPERSEDED = "superseded"
    #: Its run stopped at a step boundary to wait for something outside (an approval, a
    #: delegate, a time): it holds no worker and no lease, keeps its journal, and is claimable
    #: again once what it waits for came (``not_before`` is then now) or its deadline passed.
    WAITING = "waiting"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


TERMINAL = _TERMINAL = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.SUPERSEDED}
)
#: Statuses a conversation's head may be claimed from (once its ``not_before`` is due).
CLAIMABLE = (TaskStatus.QUEUED, TaskStatus.INTERRUPTED, TaskStatus.WAITING)
#: Statuses of the (at most one) task a worker holds.
ACTIVE = (TaskStatus.LEASED, TaskStatus.RUNNING)
#: Statuses that block every later task of the conversation.
UNFINISHED = (*CLAIMABLE, *ACTIVE)


class TextPart(_Frozen):
    type: Literal["text"] = "text"
    text: str


class DataPart(_Frozen):
    type: Literal["data"] = "data"
    data: dict[str, Any]


Part = Annotated[TextPart | DataPart, Field(discriminator="type")]


def render_parts(parts: tuple[TextPart | DataPart, ...] | list[TextPart | DataPart]) -> str:
    """The text a model sees for a task's input: parts in order, one per line."""
    return "\n".join(
        p.text if isinstance(p, TextPart) else json.dumps(p.data, sort_keys=True) for p in parts
    )


def render_stored(raw: Any) -> str:
    """``render_parts`` of parts as the store keeps them (a list of dicts)."""
    return render_parts(_PARTS.validate_python(raw or []))


class Task(_Frozen):
    """One unit of submitted work, as callers see it."""

    id: UUID
    deployment: str
    conversation_id: UUID
    scope: str
    key: str
    seq: int
    status: TaskStatus
    #: The tenant whose wall its conversation lies within.
    tenant: str = DEFAULT_TENANT
    #: Among its tenant's due work, higher runs first (0-9).
    priority: int = DEFAULT_PRIORITY
    input: tuple[TextPart | DataPart, ...]
    submissions: int = 1
    not_before: datetime
    idempotency_key: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    attempts: int = 0
    max_attempts: int
    fence: int = 0
    cancel_requested: bool = False
    created_at: datetime
    leased_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    #: The configured caller that submitted it (None: the operator's CLI or an open API).
    caller: str | None = None
    #: Messages waiting in its run's inbox (steer, signals).
    inbox: int = 0
    #: Who or what it is about across conversations (``resourceId``).
    resource_id: str | None = None
    #: A newer submission asked its run to report and stop (``interrupt`` mode).
    interrupt_requested: bool = False
    #: Why it did not succeed, in one word (``fleet.domain.error_classes``); None otherwise.
    error_class: str | None = None

    @property
    def conversation(self) -> str:
        """The conversation key with its scope (``api:acme:ticket-4711``): send it back to
        continue."""
        return f"{self.scope}:{self.key}"

    @property
    def reply(self) -> str | None:
        return (self.result or {}).get("reply")


class Admission(_Frozen):
    """What admitting a submission produced."""

    task: Task
    #: The submission was merged into this (still queued) task by collect mode.
    merged: bool = False
    #: The idempotency key was seen before: this is the original task; nothing was created.
    duplicate: bool = False
    #: Where the submission went: ``queued`` (a task, new or merged) or ``run`` (steer: into the
    #: inbox of ``task``, which is running; if it ends first, the message becomes a new task).
    delivered_to: Literal["queued", "run"] = "queued"
    #: ``drop_oldest``: the queued task cancelled to make room.
    dropped: UUID | None = None
    #: ``interrupt``: the running task asked to stop for this submission.
    interrupted: UUID | None = None
    #: The conversation's key was deleted then (a tombstone): this task starts it fresh.
    fresh_after_delete: datetime | None = None

    @property
    def merged_into(self) -> UUID | None:
        return self.task.id if self.merged else None


class Message(_Frozen):
    """A stored conversation message (user input or assistant reply)."""

    id: int
    conversation_id: UUID
    task_id: UUID | None
    run_id: UUID | None
    role: Literal["user", "assistant"]
    content: str
    delivery: str
    created_at: datetime


class Run(_Frozen):
    """One execution attempt of a task."""

    id: UUID
    task_id: UUID
    attempt: int
    fence: int
    status: str
    model: str
    context: dict[str, Any]
    usage: dict[str, int]
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    #: ``host:pid`` of the worker process that ran it.
    worker: str | None = None
    #: The release of fleet that ran it (``0.2.0+3f1c2a9b0d4e``; None before 0.2.0).
    release: str | None = None
    #: What the run did besides its steps: ``replayed`` step numbers, ``shortened`` results.
    details: dict[str, Any] = Field(default_factory=dict)


# The same fields as fleet.domain.runs.TraceRow, which runs build (positionally, with defaults)
# and the store writes; this is the validated model its readers get, so each keeps its own form.
class Step(_Frozen):
    """One recorded step of a run, a model call or a tool call, as readers see it."""

    step: int
    #: ``model`` or ``tool``.
    kind: str
    name: str
    #: ``finished``, or ``started``: a tool call journaled before it ran and never finished.
    status: str
    input: Any
    output: Any
    error: str | None
    usage: dict[str, int]
    started_at: datetime
    duration_ms: float
    call_id: str | None
    #: Copied from an earlier attempt's journal instead of being computed again.
    replayed: bool


class RunDetail(_Frozen):
    """A run with its recorded steps, in step order."""

    run: Run
    steps: tuple[Step, ...]


_PARTS: TypeAdapter[tuple[TextPart | DataPart, ...]] = TypeAdapter(tuple[TextPart | DataPart, ...])
