"""A task's events, derived from its stored records (task, runs, step journal), in an order a
reconnecting client can resume from.

Each event has a *position* ``(attempt, step, sub)`` computed from the record it comes from, never
from counting: ``queued`` is ``0.0.0``; run *k* starts at ``k.0.0``; its step *n* (a model call,
a tool call, an inbox delivery, a wait) is ``k.n.0``; its end phase is ``k.end.x`` (``1``
interrupted or waiting; for the last run ``0`` the reply, ``2`` the final status, ``3`` the
end). The id a client sees is the position as text (``2.5.0``, ``1.end.3``);
``Last-Event-ID`` resumes after it.

A model step's text deltas (``fleet.domain.deltas``) are not derived from records: they go from
the worker to the streams directly. Each has the position ``(k, n, DELTA, s)`` — its run, the
step it belongs to, and its sequence number in that step — shown as ``k.n.d<s>`` (``2.5.d17``):
every delta of step *n* sorts after step *n - 1* and before step *n*'s own event, which stands
for them. An id this server does not know but that names a run and step (``2.5.x``, a later
release's) resumes at that step, its deltas not sent again, rather than failing the reconnect.

Why nothing is missed and nothing repeats: a record only ever appears at a position after every
event already derivable. A run's steps are journaled in step order while it runs, fenced (a
step journaled as ``started`` is held back until it finished, or until its run ended without
it); a run's end and the task's final status are written with its last steps in one
transaction, after which no step of that run can be written; the next run starts after the
previous one ended. Readers must read the task row before the runs and steps (a final status
seen first would otherwise hide steps committed between the reads) and take runs and their steps
from one snapshot (see ``fleet.store.events``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from fleet.domain.values import Step, Task, TaskStatus
from fleet.errors import InputError

#: The ``step`` of a run's end phase: after every step number a run can reach.
END = 1_000_000_000
#: Sub-positions in a run's end phase.
SUB_REPLY, SUB_INTERRUPTED, SUB_FINAL, SUB_END = 0, 1, 2, 3

Kind = Literal["status", "step", "inbox", "reply", "end"]
#: Journal step kinds shown as ``inbox`` events (messages delivered into a running run).
INBOX_KINDS = frozenset({"inbox"})

#: Run statuses after which the task goes on in a later run: its status event closes the run.
_PAUSED = frozenset({TaskStatus.INTERRUPTED.value, TaskStatus.WAITING.value})

#: The sub-position of a text delta: before the step's own event (``sub`` 0).
DELTA = -1
#: The highest delta sequence number: ``(k, n, DELTA, LAST_DELTA)`` is after every delta of
#: step *n* and before its event.
LAST_DELTA = 999_999_999

_ID = re.compile(r"^(\d{1,9})\.(\d{1,9}|end)\.(\d|d\d{1,9})$")
#: A run and step this server reads, with a sub-position it does not (a later release's).
_STEP_ID = re.compile(r"^(\d{1,9})\.(\d{1,9}|end)\.[A-Za-z0-9_-]{1,20}$")


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where an event stands in its task's history; events compare by it."""

    attempt: int
    step: int
    sub: int = 0
    #: A delta's sequence number in its step (``sub`` is ``DELTA``), else 0.
    seq: int = 0

    def __str__(self) -> str:
        step = "end" if self.step == END else str(self.step)
        if self.sub == DELTA:
            return f"{self.attempt}.{step}.d{self.seq}"
        return f"{self.attempt}.{step}.{self.sub}"

    @classmethod
    def delta(cls, attempt: int, step: int, seq: int) -> Position:
        """The position of delta ``seq`` of run ``attempt``'s step ``step``."""
        return cls(attempt, step, DELTA, seq)

    @property
    def is_delta(self) -> bool:
        return self.sub == DELTA

    @classmethod
    def parse(cls, text: str, *, field: str = "Last-Event-ID") -> Position:
        """An event id a stream sent (``2.5.0``); InputError naming ``field`` otherwise."""
        found = _ID.match(text.strip())
        if found is None:
            later = _STEP_ID.match(text.strip())
            if later is not None:  # resume at that step: its deltas are not sent again
                attempt, step = later.groups()
                return cls.delta(int(attempt), END if step == "end" else int(step), LAST_DELTA)
            raise InputError(
                f"{field} {text[:40]!r} is not an event id of this stream (like '1.3.0'); "
                "send the id of the last event you received, or none to start at the beginning",
                field=field,
            )
        attempt, step, sub = found.groups()
        n = END if step == "end" else int(step)
        if sub.startswith("d"):
            return cls.delta(int(attempt), n, int(sub[1:]))
        return cls(int(attempt), n, int(sub))


@dataclass(frozen=True, slots=True)
class RunMark:
    """What events need of a run (its frozen context stays in the store)."""

    id: uuid.UUID
    attempt: int
    status: str
    model: str
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One event of a task's stream."""

    position: Position
    kind: Kind
    task: Task
    #: ``status`` events: the status the task moved to.
    status: TaskStatus | None = None
    #: When it happened (a status change's timestamp, a step's start).
    at: datetime | None = None
    run: RunMark | None = None
    step: Step | None = None
    error: str | None = None

    @property
    def id(self) -> str:
        return str(self.position)


def derive(
    task: Task,
    runs: Sequence[RunMark],
    steps: Iterable[tuple[uuid.UUID, Step]],
    after: Position | None = None,
) -> list[TaskEvent]:
    """Every event of ``task`` after ``after`` (all when None), in order.

    ``steps`` are (run id, step) pairs of ``runs`` (others are ignored: a run read later than
    its steps is not in ``runs`` yet). ``task`` must have been read before ``runs`` and steps.
    """
    out: list[TaskEvent] = [
        TaskEvent(Position(0, 0), "status", task, TaskStatus.QUEUED, task.created_at)
    ]
    by_run: dict[uuid.UUID, list[Step]] = {r.id: [] for r in runs}
    for run_id, st in steps:
        if run_id in by_run:
            by_run[run_id].append(st)
    ordered = sorted(runs, key=lambda r: r.attempt)
    for run in ordered:
        k = run.attempt
        out.append(
            TaskEvent(Position(k, 0), "status", task, TaskStatus.RUNNING, run.started_at, run)
        )
        ended = run.status != TaskStatus.RUNNING.value
        for st in sorted(by_run[run.id], key=lambda s: s.step):
            # A tool call journaled as started is shown once it finished, or once its run
            # ended without it (lost in flight): never twice, never before an earlier step.
            if st.status != "finished" and not ended:
                break
            kind: Kind = "inbox" if st.kind in INBOX_KINDS else "step"
            out.append(
                TaskEvent(Position(k, st.step), kind, task, at=st.started_at, run=run, step=st)
            )
        if run.status in _PAUSED:  # the run let go of its task: lost, handed back, waiting
            out.append(
                TaskEvent(
                    Position(k, END, SUB_INTERRUPTED),
                    "status",
                    task,
                    TaskStatus(run.status),
                    run.finished_at,
                    run,
                    error=run.error,
                )
            )
    if task.status.terminal:
        last = ordered[-1] if ordered else None
        k = last.attempt if last is not None else 0
        if task.status == TaskStatus.SUCCEEDED and task.reply is not None:
            out.append(TaskEvent(Position(k, END, SUB_REPLY), "reply", task, run=last))
        out.append(
            TaskEvent(
                Position(k, END, SUB_FINAL),
                "status",
                task,
                task.status,
                task.finished_at,
                last,
                error=task.error,
            )
        )
        out.append(TaskEvent(Position(k, END, SUB_END), "end", task, task.status, task.finished_at))
    out.sort(key=lambda e: e.position)
    if after is None:
        return out
    return [e for e in out if e.position > after]


def ended(events: Sequence[TaskEvent]) -> bool:
    """Was the stream's last event sent (nothing follows it)?"""
    return bool(events) and events[-1].kind == "end"
