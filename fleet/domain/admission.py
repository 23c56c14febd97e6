"""Admission decisions: what a submission does to its conversation (pure, no I/O).

A conversation's queue mode decides what a new submission does while the conversation is busy:

- ``followup`` queues it behind (first in, first out);
- ``collect`` merges it into the newest task while that one is still queued (debounced, bounded
  by ``max_wait`` from the burst's first submission and by ``max_merged`` submissions);
- ``steer`` sends it into the active run's inbox (delivered at the run's next step boundary; if
  the run ends first it becomes the next queued task) — unless tasks are queued behind that
  run: then it queues after them, so the conversation keeps the order messages came in;
- ``interrupt`` queues it and asks the active run to stop (after one last turn to report).

A queue cap (``max_queued``) applies to what would be queued: ``reject`` refuses the submission,
``drop_oldest`` cancels the oldest queued task, ``merge`` folds it into the newest queued one.
Nothing is silent: the decision says what happened, and the caller's answer shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT, MAX_LABELS
from fleet.domain.delegation import Record
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict

QueueMode = Literal["followup", "collect", "steer", "interrupt"]
OnFull = Literal["reject", "drop_oldest", "merge"]
QUEUE_MODES: tuple[QueueMode, ...] = ("followup", "collect", "steer", "interrupt")


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A deployment's (or one submission's) queue mode and its bounds."""

    mode: QueueMode = "followup"
    debounce_s: float = 2.0
    #: collect: a burst's task starts at the latest this long after its first submission.
    max_wait_s: float | None = None
    #: collect: submissions one task may hold (then a new task starts).
    max_merged: int | None = None
    #: Tasks a conversation may have queued (not yet running) at once; None: no cap.
    max_queued: int | None = None
    on_full: OnFull = "reject"


@dataclass(frozen=True, slots=True)
class NewestTask:
    """What admission needs to know of a conversation's newest task."""

    id: UUID
    status: TaskStatus
    input_bytes: int
    label_keys: frozenset[str] = frozenset()
    submissions: int = 1
    #: When its first submission arrived (a collect burst's start).
    created_at: datetime | None = None
    not_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class Busy:
    """The rest of what a busy conversation looks like to admission."""

    #: The task a worker runs now (leased or running), if any.
    active: UUID | None = None
    #: A finished task whose inbox still holds messages (they are about to become tasks): a
    #: steered message joins them, so the order of the conversation's messages holds.
    draining: UUID | None = None
    #: How many tasks wait in ``queued``, and the oldest of them.
    queued: int = 0
    oldest_queued: UUID | None = None


@dataclass(frozen=True, slots=True)
class Create:
    """Queue a new task behind the conversation's others."""

    not_before: datetime
    #: ``interrupt``: ask this active task's run to stop (it reports, then yields).
    interrupt: UUID | None = None
    #: ``drop_oldest``: cancel this queued task to make room.
    drop: UUID | None = None


@dataclass(frozen=True, slots=True)
class Merge:
    """Append the input to ``task_id`` (still queued) and move its start out to ``not_before``."""

    task_id: UUID
    not_before: datetime
    #: Why: ``collect`` or ``queue_full`` (the cap's ``merge`` policy).
    reason: str = "collect"


@dataclass(frozen=True, slots=True)
class Steer:
    """Deliver the input into the running task's inbox."""

    task_id: UUID


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse the submission (the queue is full); nothing is stored."""

    reason: str


Decision = Create | Merge | Steer | Reject


def decide(
    policy: QueuePolicy,
    newest: NewestTask | None,
    input_bytes: int,
    max_input_bytes: int,
    now: datetime,
    *,
    label_keys: frozenset[str] = frozenset(),
    busy: Busy = Busy(),
) -> Decision:
    """What the submission does; see the module docstring for the modes and the cap.

    collect debounces the first task of a burst too, so the burst's later messages find it still
    queued. A merge that would make the input larger than ``max_input_bytes``, give the task
    more than ``MAX_LABELS`` labels (``label_keys`` are the submission's) or more than
    ``max_merged`` submissions starts a new task.
    """
    mode = policy.mode
    target = busy.active or busy.draining
    if mode == "steer" and target is not None and busy.queued == 0:
        # (with tasks queued behind the run, the message queues after them: order holds)
        return Steer(task_id=target)
    not_before = now
    if mode == "collect":
        not_before = now + timedelta(seconds=policy.debounce_s)
        if _can_merge(policy, newest, input_bytes, max_input_bytes, label_keys):
            assert newest is not None
            return Merge(task_id=newest.id, not_before=_bounded(policy, newest, not_before))
    if policy.max_queued is not None and busy.queued >= policy.max_queued:
        return _full(
            policy,
            newest,
            input_bytes,
            max_input_bytes,
            label_keys=label_keys,
            busy=busy,
            not_before=not_before,
        )
    interrupt = busy.active if mode == "interrupt" else None
    return Create(not_before=not_before, interrupt=interrupt)


def _can_merge(
    policy: QueuePolicy,
    newest: NewestTask | None,
    input_bytes: int,
    max_input_bytes: int,
    label_keys: frozenset[str],
) -> bool:
    return (
        newest is not None
        and newest.status == TaskStatus.QUEUED
        and newest.input_bytes + input_bytes <= max_input_bytes
        and len(newest.label_keys | label_keys) <= MAX_LABELS
        and (policy.max_merged is None or newest.submissions < policy.max_merged)
    )


def _bounded(policy: QueuePolicy, newest: NewestTask, wanted: datetime) -> datetime:
    """A merge moves the start out, but never past the burst's ``max_wait`` deadline."""
    if policy.max_wait_s is None or newest.created_at is None:
        return wanted
    deadline = newest.created_at + timedelta(seconds=policy.max_wait_s)
    return max(min(wanted, deadline), newest.not_before or wanted)


def _full(
    policy: QueuePolicy,
    newest: NewestTask | None,
    input_bytes: int,
    max_input_bytes: int,
    *,
    label_keys: frozenset[str],
    busy: Busy,
    not_before: datetime,
) -> Decision:
    cap = (
        f"the conversation already has {busy.queued} queued tasks "
        f"(max_queued = {policy.max_queued})"
    )
    if policy.on_full == "drop_oldest" and busy.oldest_queued is not None:
        interrupt = busy.active if policy.mode == "interrupt" else None
        return Create(not_before=not_before, drop=busy.oldest_queued, interrupt=interrupt)
    if policy.on_full == "merge" and newest is not None and newest.status == TaskStatus.QUEUED:
        if (
            newest.input_bytes + input_bytes <= max_input_bytes
            and len(newest.label_keys | label_keys) <= MAX_LABELS
        ):
            return Merge(
                task_id=newest.id, not_before=newest.not_before or not_before, reason="queue_full"
            )
        return Reject(f"{cap}, and merging would exceed the input or label limits")
    return Reject(cap)


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
    #: Who or what it is about across conversations (recall and working memory by resource).
    resource_id: str | None = None
    #: A delegated task (or a result reported back): its record, written with the task.
    delegation: Record | None = None
    #: The tenant whose wall the conversation lies within (its quotas, budget and turn).
    tenant: str = DEFAULT_TENANT
    #: Among its tenant's due work, higher runs first (0-9).
    priority: int = DEFAULT_PRIORITY
    #: The tenant's ``max_queued_tasks`` when this submission may be refused by it (an API or
    #: A2A caller's); None: not checked.
    queued_cap: int | None = None

    @property
    def idempotency_scope(self) -> str:
        return self.caller_scope or self.scope
