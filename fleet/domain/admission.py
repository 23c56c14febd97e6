"""Admission decisions: create a task or merge into the still-queued one (pure, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from fleet.constants import MAX_LABELS
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict

QueueMode = Literal["followup", "collect"]


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A deployment's queue mode and its collect debounce."""

    mode: QueueMode = "followup"
    debounce_s: float = 2.0


@dataclass(frozen=True, slots=True)
class NewestTask:
    """What admission needs to know of a conversation's newest task."""

    id: UUID
    status: TaskStatus
    input_bytes: int
    label_keys: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Create:
    """Queue a new task behind the conversation's others."""

    not_before: datetime


@dataclass(frozen=True, slots=True)
class Merge:
    """Append the input to ``task_id`` (still queued) and move its start out to ``not_before``."""

    task_id: UUID
    not_before: datetime


def decide(
    policy: QueuePolicy,
    newest: NewestTask | None,
    input_bytes: int,
    max_input_bytes: int,
    now: datetime,
    *,
    label_keys: frozenset[str] = frozenset(),
) -> Create | Merge:
    """followup always queues; collect merges into the newest task while it is still ``queued``.

    collect debounces the first task of a burst too, so the burst's later messages find it still
    queued. A merge that would make the input larger than ``max_input_bytes``, or give the task
    more than ``MAX_LABELS`` labels (``label_keys`` are the submission's), starts a new task.
    """
    if policy.mode == "followup":
        return Create(not_before=now)
    not_before = now + timedelta(seconds=policy.debounce_s)
    if (
        newest is not None
        and newest.status == TaskStatus.QUEUED
        and newest.input_bytes + input_bytes <= max_input_bytes
        and len(newest.label_keys | label_keys) <= MAX_LABELS
    ):
        return Merge(task_id=newest.id, not_before=not_before)
    return Create(not_before=not_before)


def check_duplicate(original_deployment: str, deployment: str, key: str) -> None:
    """A repeated idempotency key must name the same deployment as the original submission."""
    if original_deployment != deployment:
        # Not naming the other deployment: the key's scope may be shared by callers that
        # cannot use it.
        raise Conflict(
            f"idempotency key {key!r} was already used for a submission to another deployment; "
            f"use a new key for {deployment!r}",
            field="idempotencyKey",
        )


@dataclass(frozen=True, slots=True)
class Submission:
    """A validated submission, ready for the store's admission transaction."""

    deployment: str
    scope: str
    key: str
    input: tuple[Any, ...]
    input_bytes: int
    labels: dict[str, str]
    idempotency_key: str | None
    policy: QueuePolicy
    max_attempts: int
    max_input_bytes: int
    #: Where the submission came from; idempotency keys live here (a singleton's conversation
    #: scope is shared by every source, its callers' keys must not be).
    caller_scope: str = ""
    #: Who submitted it (a configured caller's name), for the authorize policy at run time.
    caller: str | None = None

    @property
    def idempotency_scope(self) -> str:
        return self.caller_scope or self.scope
