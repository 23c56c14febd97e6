"""What the operator UI decides (pure): a conversation's state, which ones are stuck, the order
they are listed in, and each deployment's figures."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from fleet.constants import DEFAULT_TENANT

#: Due work not started for this long makes its conversation stuck (no worker takes it).
STUCK_DUE_S = 60.0
#: A run going on for this long makes its conversation stuck (a hung tool, a lost worker).
STUCK_RUNNING_S = 900.0
#: The window of the overview's throughput and failure figures (seconds).
RECENT_S = 3600.0

State = Literal["stuck", "running", "queued", "waiting", "idle"]
#: The states in listing order.
STATES: tuple[State, ...] = ("stuck", "running", "queued", "waiting", "idle")


@dataclass(frozen=True, slots=True)
class Pending:
    """A conversation's unfinished tasks, summed up (one row of an aggregate read)."""

    #: Tasks not running (queued, interrupted or waiting).
    waiting: int = 0
    #: The earliest ``not_before`` among them that could start (``fleet.store.clauses.due_work``:
    #: None while they are held behind a task still waiting).
    oldest_due: datetime | None = None
    #: Of them, interrupted (a lost worker's task waiting for its retry).
    interrupted: int = 0
    #: When its running task started (None: none runs).
    running_since: datetime | None = None
    #: When its ``waiting`` task is due again (its first deadline; now once nothing is
    #: pending; None: none waits for an approval, a delegate or a time).
    resumes_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """One line of the conversations list."""

    id: uuid.UUID
    deployment: str
    scope: str
    key: str
    updated_at: datetime
    pending: Pending
    state: State
    #: Why it is stuck (empty unless it is).
    reason: str = ""
    #: Seconds it has been stuck (0 unless it is).
    stuck_s: float = 0.0
    tenant: str = DEFAULT_TENANT

    @property
    def conversation(self) -> str:
        return f"{self.scope}:{self.key}"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def state(p: Pending, now: datetime) -> tuple[State, str, float]:
    """The state of a conversation with these unfinished tasks, why it is stuck, for how long."""
    if p.running_since is not None:
        running = (now - p.running_since).total_seconds()
        if running >= STUCK_RUNNING_S:
            return "stuck", f"running for {_ago(running)}", running
        return "running", "", 0.0
    if p.resumes_at is not None:  # its head waits; the tasks queued behind it wait for it
        due = (now - p.resumes_at).total_seconds()
        if due < 0:
            return "waiting", "", 0.0
        if due >= STUCK_DUE_S:
            return "stuck", f"due {_ago(due)} ago, not resumed", due
        return "queued", "", 0.0
    if p.waiting:
        due = (now - p.oldest_due).total_seconds() if p.oldest_due is not None else 0.0
        if p.interrupted and due >= 0:
            return "stuck", f"interrupted, waiting {_ago(due)} for a retry", max(due, 0.0)
        if due >= STUCK_DUE_S:
            return "stuck", f"due {_ago(due)} ago, not started", due
        return "queued", "", 0.0
    return "idle", "", 0.0


def listing_order(row: ConversationRow) -> tuple[int, float, float]:
    """Stuck first (longest stuck first), then running, queued, waiting, idle; newest activity
    first."""
    return (STATES.index(row.state), -row.stuck_s, -row.updated_at.timestamp())


@dataclass(frozen=True, slots=True)
class DeploymentFigures:
    """One line of the overview."""

    deployment: str
    queued: int = 0
    running: int = 0
    interrupted: int = 0
    #: Waiting for an approval or a delegate (holding no worker).
    waiting: int = 0
    #: Seconds the oldest due task has waited (0: none waits).
    oldest_due_s: float = 0.0
    #: Tasks finished in the last ``RECENT_S`` (any final status), and of them failed.
    finished_recently: int = 0
    failed_recently: int = 0

    @property
    def per_minute(self) -> float:
        """Throughput: tasks finished per minute over the window."""
        return self.finished_recently / (RECENT_S / 60)
