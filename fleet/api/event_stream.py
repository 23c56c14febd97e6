"""A task's event stream: ``follow`` (and ``updates`` under it) reads a task's events as the
hub (``fleet.api.event_hub``) says they changed, with the text deltas it pushes, and keep-alives
between; ``snapshot`` is the task and its newest position, for a stream's first answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal, overload

from starlette.concurrency import run_in_threadpool

from fleet.domain.deltas import Cursor, Delta
from fleet.domain.events import Position, TaskEvent
from fleet.domain.values import Task

if TYPE_CHECKING:
    pass

from fleet.api.event_hub import EventHub, Follower, on_grid

log = logging.getLogger(__name__)

#: Keep-alives fall due on a grid of this many steps per keep-alive interval.
BEAT_STEPS = 32


async def updates(
    hub: EventHub,
    task_id: uuid.UUID,
    after: Position | None,
    *,
    max_s: float | None = None,
    beat_s: float | None = None,
    follower: Follower | None = None,
    deltas: bool = True,
) -> AsyncIterator[TaskEvent | Delta | None]:
    """The task's events after ``after`` as they are stored, and (``deltas``, when the hub has
    a source of them) its model text as it is written, until its end (or ``max_s``, or
    ``follower`` closed); ``None`` after about ``beat_s / 2`` to ``beat_s`` quiet seconds (a
    keep-alive; see ``_next_beat``).

    A delta is sent only after every stored event before it: the first delta of a step the
    stream has not seen sends the store's events first, then the buffered deltas from the step's
    start (or from ``after`` within it): a stream that joins mid-step gets the text so far. (A
    step's first delta right after the event before that step, the stream sent already, goes
    at once: nothing can lie between them.) Deltas that came before a read of the store go
    before what it finds: they are older, and the step's event after them would void them.

    Raises NotFound at once for a missing task; a task deleted later ends the stream.
    """
    from fleet.errors import NotFound

    loop = asyncio.get_running_loop()
    deadline = None if max_s is None else loop.time() + max_s
    first = True
    cursor = Cursor()
    sync = deltas and hub.deltas is not None  # read the buffer after the first store read
    #: The delta a sync was made for: still out of sequence after it, its step is skipped.
    synced_for: Delta | None = None

    def next_beat() -> float | None:
        return None if beat_s is None else _next_beat(loop.time(), beat_s)

    async with hub.watch(task_id, follower) as f:
        beat = next_beat()
        while True:
            if f.deltas and not sync:
                # Before a read of the store: text that came before the read is older than
                # what the read finds (its step's event would make it late, and dropped).
                pending, f.deltas = f.deltas, []
                send, rest = _live(cursor, pending, after, synced_for)
                for d in send:
                    after = d.position
                    yield d
                if rest:  # again once the store and the buffer were read
                    f.deltas[:0] = rest
                    sync, synced_for = True, rest[0]
                beat = next_beat()
                continue
            if f.changed or sync:
                f.changed = False  # before the read: a change during it reads again
                try:
                    found, ended = await _read(hub, task_id, after, cursor if sync else None)
                except NotFound:
                    if first:
                        raise
                    return
                first = sync = False
                found.reverse()  # an idle stream holds its position only, not what it read
                if found:
                    beat = next_beat()
                while found:
                    after = found[-1].position
                    yield found.pop()
                if ended:  # its ``end`` was sent (now or before this stream)
                    return
                continue  # (deltas that came during the read: next)
            if f.closed:
                return
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            if beat is not None and now >= beat:
                yield None
                beat = next_beat()
                continue
            until = min((t for t in (deadline, beat) if t is not None), default=None)
            await f.wait(until=until, alarms=hub.alarms)


async def _read(
    hub: EventHub, task_id: uuid.UUID, after: Position | None, cursor: Cursor | None
) -> tuple[list[TaskEvent | Delta], bool]:
    """The task's stored events after ``after``, then (``cursor`` given) the buffered deltas
    after them, and whether the task has ended. Raises NotFound."""
    task, events = await run_in_threadpool(hub.store.task_events, task_id, after)
    found: list[TaskEvent | Delta] = list(events)
    if task.status.terminal or cursor is None or hub.deltas is None:
        return found, task.status.terminal
    if events:
        after = events[-1].position
    found.extend(cursor.catch_up(await hub.deltas.read(task_id), after))
    return found, False


def _live(
    cursor: Cursor, pending: list[Delta], after: Position | None, synced_for: Delta | None
) -> tuple[list[Delta], list[Delta]]:
    """Of the deltas pushed to a stream: those to send now, and from the first that needs the
    store and the buffer read first, the rest (``synced_for``: the delta a sync was made for
    already; still out of sequence, its step is skipped: the buffer lost its start)."""
    send: list[Delta] = []
    for i, d in enumerate(pending):
        verdict = cursor.verdict(d, after)
        if verdict == "send":
            cursor.sent(d)
            after = d.position
            send.append(d)
        elif verdict == "sync":
            if d is synced_for:
                cursor.skip(d)
                continue
            return send, pending[i:]
    return send, []


def _next_beat(now: float, beat_s: float) -> float:
    """When a stream quiet since ``now`` sends its next keep-alive: at random between half of
    ``beat_s`` and all of it (streams opened together do not all write at once), rounded down
    to a step of ``beat_s / BEAT_STEPS`` on the loop's clock, so the keep-alives of many
    streams share the loop's wake-ups (one per 0.47 s at most with ``beat_s`` 15 s)."""
    return on_grid(now + beat_s * random.uniform(0.5, 1.0), beat_s / BEAT_STEPS)


@overload
def follow(
    hub: EventHub,
    task_id: uuid.UUID,
    after: Position | None,
    *,
    max_s: float | None = None,
    deltas: Literal[False] = False,
) -> AsyncIterator[TaskEvent]: ...


@overload
def follow(
    hub: EventHub,
    task_id: uuid.UUID,
    after: Position | None,
    *,
    max_s: float | None = None,
    deltas: Literal[True],
) -> AsyncIterator[TaskEvent | Delta]: ...


async def follow(
    hub: EventHub,
    task_id: uuid.UUID,
    after: Position | None,
    *,
    max_s: float | None = None,
    deltas: bool = False,
) -> AsyncIterator[TaskEvent | Delta]:
    """The task's events after ``after`` as they are stored (and, with ``deltas``, its model
    text as it is written), until its end (or ``max_s``).

    Raises NotFound at once for a missing task; a task deleted later ends the stream.
    """
    async for ev in updates(hub, task_id, after, max_s=max_s, deltas=deltas):
        if ev is not None:
            yield ev


async def snapshot(hub: EventHub, task_id: uuid.UUID) -> tuple[Task, Position | None]:
    """The task now and the position of its newest event (to follow from)."""
    task, events = await run_in_threadpool(hub.store.task_events, task_id, None)
    return task, events[-1].position if events else None
