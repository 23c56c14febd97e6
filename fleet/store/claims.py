"""What the lease-claim-settle cycle passes around: claims, prepared contexts, started runs."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from fleet.domain.context import Record
from fleet.domain.runs import Outcome
from fleet.domain.values import CLAIMABLE, Task, TaskStatus


@dataclass(frozen=True, slots=True)
class Claim:
    """A task this worker now holds, with what its context is built from."""

    task: Task
    #: Newest-first history records (first attempt, or a retry whose first run never started).
    history: tuple[Record, ...] = ()
    #: More history exists beyond ``history`` (the item limit stopped the query).
    more_history: bool = False
    #: A retry reuses the frozen context of the task's earlier run.
    frozen_context: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the caller decided for a claimed task: its frozen context and the model it uses."""

    context: dict[str, Any]
    model: str


@dataclass(frozen=True, slots=True)
class Started:
    """A task this worker now runs (status ``running``) and the run opened for it."""

    task: Task
    run_id: uuid.UUID
    context: dict[str, Any]
    #: Message ids for what its settle stores (user input, reply), taken by the claim.
    reserved: tuple[int, int] | None = None
    #: The history read for its context, newest first (None: a retry's frozen context).
    found: tuple[Record, ...] | None = None
    #: The row of the conversation's next unfinished task, as read by the claim.
    after: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Head:
    """A conversation's lowest unfinished task: what blocks it or what it waits for."""

    task_id: uuid.UUID
    status: TaskStatus
    not_before: datetime
    fence: int
    #: PostgreSQL's settle reads the next head with its history: the next claim starts from it.
    context_row: dict[str, Any] | None = None

    @property
    def claimable(self) -> bool:
        return self.status in CLAIMABLE


class Closing(NamedTuple):
    """What a settle writes of a run: its task, the run, the outcome, the redacted reply and
    error, and the time."""

    task: Task
    run_id: uuid.UUID
    outcome: Outcome
    reply: str | None
    error: str | None
    now: datetime


class Settled(NamedTuple):
    """What a settle ended with: the task's final status, the conversation's next (a head, or
    the next task's ``Started`` when the settle claimed it) and whether an A2A push config
    awaits its delivery's journal (``Deliverer.after_settle`` opens it; no read otherwise)."""

    status: TaskStatus
    next: Head | Started | None
    push_pending: bool


@dataclass(frozen=True, slots=True)
class Chain:
    """Leave to claim the conversation's next task in the settle's own statement.

    The dispatcher gives it while its drain may go on (lease held, budget left, not stopping).
    """

    #: The next task's row and the settled task's history, from the settled task's claim.
    after: dict[str, Any]
    found: tuple[Record, ...]
    worker: str
    history_items: Callable[[str], int]
    prepare: Callable[[Claim], Prepared]

    @staticmethod
    def of(
        started: Started,
        worker: str,
        history_items: Callable[[str], int],
        prepare: Callable[[Claim], Prepared],
    ) -> Chain | None:
        if started.after is None or started.found is None or started.reserved is None:
            return None
        return Chain(started.after, started.found, worker, history_items, prepare)
