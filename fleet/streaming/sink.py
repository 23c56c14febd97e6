"""The runner's ``Deltas`` port: one run's model text, numbered, redacted, handed to a channel."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from fleet.agents.ports import NO_DELTAS, Deltas
from fleet.domain.deltas import Delta
from fleet.domain.events import Position
from fleet.domain.values import Task


class Channel(Protocol):
    """Where deltas go (Redis in a fleet, this process embedded)."""

    def publish(self, task_id: uuid.UUID, delta: Delta) -> None:
        """Send ``delta`` of ``task_id`` to its watchers and its buffer (off the caller's
        thread where that costs a round trip)."""
        ...

    # A channel that sends off the caller's thread also has ``barrier()``: it returns once
    # what was published before was sent (``RunDeltas.end`` calls it before the step is
    # journaled, so no delta reaches watchers after its step's event).


class Redacting(Protocol):
    """A streaming redactor: ``feed`` what comes, what is safe to show now out."""

    def feed(self, chunk: str) -> str: ...

    def flush(self) -> str: ...

    def reset(self) -> None: ...


class RunDeltas:
    """One run's deltas: sequence numbers per step, the redactor's hold-back, and a reset first
    in a later run of the task (its earlier run may have streamed text of a step it re-runs)."""

    live = True

    def __init__(
        self,
        channel: Channel,
        task_id: uuid.UUID,
        run_id: uuid.UUID,
        attempt: int,
        redactor: Callable[[], Redacting],
    ) -> None:
        self._channel, self._task, self._run = channel, task_id, str(run_id)
        self._attempt = attempt
        self._redactor = redactor
        self._step = 0
        self._seq = 0
        self._redacting = redactor()
        #: The next delta voids what came before (a retry; a later run's first delta).
        self._reset = attempt > 1

    def text(self, step: int, chunk: str) -> None:
        self._at(step)
        self._send(self._redacting.feed(chunk))

    def reset(self, step: int) -> None:
        self._at(step)
        self._redacting.reset()
        if self._seq:  # something was shown: watchers drop it with the next delta
            self._reset = True

    def end(self, step: int) -> None:
        self._at(step)
        self._send(self._redacting.flush())
        if self._reset and self._seq:  # reset, then nothing new: an empty delta says so
            self._publish("")
        barrier = getattr(self._channel, "barrier", None)
        if self._seq and barrier is not None:  # the text is out before its step is journaled
            barrier()

    def _at(self, step: int) -> None:
        if step != self._step:
            self._step, self._seq = step, 0
            self._redacting = self._redactor()

    def _send(self, text: str) -> None:
        if text:
            self._publish(text)

    def _publish(self, text: str) -> None:
        self._seq += 1
        position = Position.delta(self._attempt, self._step, self._seq)
        self._channel.publish(self._task, Delta(position, self._run, text, self._reset))
        self._reset = False


#: A task's deltas after a position, waiting up to some seconds for one when there are none.
Tail = Callable[[Position | None, float], list[Delta]]


def follow(tail: Tail, ended: Callable[[], bool], *, idle_s: float = 0.25) -> Iterator[Delta]:
    """A task's deltas in order as they are written, until ``ended()`` says the task ended
    (asked whenever ``idle_s`` passed without one)."""
    after: Position | None = None
    while True:
        found = tail(after, idle_s)
        for d in found:
            after = d.position
            yield d
        if not found and ended():
            for d in tail(after, 0):  # what came in between
                yield d
            return


class Passthrough:
    """No redaction (tests of the plumbing)."""

    def feed(self, chunk: str) -> str:
        return chunk

    def flush(self) -> str:
        return ""

    def reset(self) -> None:
        return None


class Streaming:
    """The dispatcher's token streaming: each run's ``Deltas`` port, onto ``channel`` (None:
    streaming off, or nobody could watch)."""

    def __init__(
        self, channel: Channel | None = None, redactor: Callable[[], Redacting] = Passthrough
    ) -> None:
        self.channel = channel
        self.redactor = redactor

    def run(self, task: Task, run_id: uuid.UUID) -> Deltas:
        if self.channel is None:
            return NO_DELTAS
        return RunDeltas(self.channel, task.id, run_id, task.attempts, self.redactor)

    def forget(self, task_ids: Sequence[uuid.UUID]) -> int:
        """Delete the buffered deltas of these tasks (an erasure); how many buffers went."""
        forget = getattr(self.channel, "forget", None)
        return 0 if forget is None or not task_ids else int(forget(task_ids))

    def tail(self, task_id: uuid.UUID) -> Tail | None:
        """How to read ``task_id``'s deltas in order in this process (None: not streamed)."""
        channel = self.channel
        tail = getattr(channel, "tail", None)
        if tail is None or channel is None:
            return None
        return tail(task_id)  # type: ignore[no-any-return]
