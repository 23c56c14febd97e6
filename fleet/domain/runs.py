"""What a run produces: its recorded steps (the step journal) and how it ended."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from fleet.domain.values import TaskStatus

#: ``finished``: the step's output is final. ``started``: a tool call journaled before it ran.
StepStatus = Literal["finished", "started"]


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One model or tool step of a run, ready to store (and, read back, a journal entry)."""

    step: int
    kind: str
    name: str
    input: Any
    output: Any
    error: str | None
    usage: dict[str, int]
    started_at: datetime
    duration_ms: float
    status: StepStatus = "finished"
    #: The model's id for a tool call; None for model steps.
    call_id: str | None = None
    #: Taken from an earlier attempt's journal, not computed by this run.
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A message taken from a run's inbox at a step boundary (steer, signal)."""

    id: int
    source: str
    text: str


@dataclass(frozen=True, slots=True)
class Signals:
    """What a step boundary learned besides storing the finished steps."""

    cancel: bool = False
    #: A newer submission asks the run to report and stop (``interrupt`` mode).
    interrupt: bool = False
    #: Messages taken from the inbox here (already journaled as an ``inbox`` step).
    taken: tuple[InboxItem, ...] = ()
    #: Messages waiting in the inbox (at a boundary that does not take them).
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended, as the store records it."""

    status: TaskStatus
    reply: str | None
    error: str | None
    usage: dict[str, int]
    traces: Sequence[TraceRow] = ()
    #: What else the run record keeps: ``replayed`` steps, ``shortened`` tool results.
    details: dict[str, Any] = field(default_factory=dict)
    #: Inbox messages the run took, in order: stored in the transcript after the input.
    inbox: tuple[str, ...] = ()
    #: The stored reply's ``delivery``: ``sent`` (returned to whoever asks), or ``pending``
    #: while deliveries of it are journaled (fleet.delivery).
    reply_delivery: str = "sent"
    #: ``waiting``: what the run stopped to wait for (``fleet.domain.waits``).
    waits: tuple[Any, ...] = ()
    #: ``failed``: why, in one word (``fleet.domain.error_classes``); None: the store
    #: classifies the error's words.
    error_class: str | None = None
