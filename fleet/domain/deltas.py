"""A model step's text as it is written: deltas, their wire form, and what a stream sends.

A worker tells each piece of a model step's reply text (after redaction) as a :class:`Delta` at
position ``(k, n, DELTA, s)``: run *k*, the step *n* it will be journaled as, sequence number
*s* from 1 in that step. A ``reset`` delta says the text sent before it in that step is void (the
call is retried or falls back, or a later run of the task starts the step over); its own text
starts the new text. The deltas of a step joined, from its last reset on, are the step's text so
far; once the step is journaled, its ``step`` event stands for them.

Deltas reach a stream two ways: live, as they are published, and from a bounded buffer of the
task's recent deltas, read when a stream joins in the middle of a step or sees a gap in the
sequence (a live message lost). :class:`Cursor` decides, for one stream, which delta to send,
which to drop (already sent, or of a step whose start the buffer lost: that step's event will
carry its text) and when to read the store and the buffer again first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleet.domain.events import Position
from fleet.errors import InputError

#: What a stream does with a live delta.
Verdict = Literal["send", "drop", "sync"]


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of a model step's text."""

    position: Position
    #: The run it belongs to.
    run_id: str
    text: str
    #: The step's text sent before this one is void.
    reset: bool = False

    kind = "delta"

    @property
    def id(self) -> str:
        return str(self.position)

    @property
    def step_key(self) -> tuple[int, int]:
        return self.position.attempt, self.position.step


def encode(deltas: Iterable[Delta]) -> str:
    """Deltas on the wire: ``[[id, run, text, reset], ...]`` (reset 0 or 1)."""
    return json.dumps(
        [[d.id, d.run_id, d.text, int(d.reset)] for d in deltas],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode(raw: str | bytes) -> list[Delta]:
    """The deltas of a wire message; entries it cannot read are left out (a later release's
    fields after the fourth are ignored)."""
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    out: list[Delta] = []
    for item in items if isinstance(items, list) else ():
        delta = _entry(item)
        if delta is not None:
            out.append(delta)
    return out


def _entry(item: Any) -> Delta | None:
    if not isinstance(item, list) or len(item) < 4:
        return None
    pid, run, text, reset = item[:4]
    if not (isinstance(pid, str) and isinstance(run, str) and isinstance(text, str)):
        return None
    try:
        position = Position.parse(pid)
    except InputError:
        return None
    if not position.is_delta or position.seq < 1:
        return None
    return Delta(position, run, text, bool(reset))


def joined(deltas: Iterable[Delta]) -> str:
    """The text the deltas of one step make: from the last reset on."""
    text: list[str] = []
    for d in deltas:
        if d.reset:
            text = []
        text.append(d.text)
    return "".join(text)


class Cursor:
    """One stream's place in the deltas: the step it follows and the last sequence number it
    sent of it (or that it skips the step: the buffer had lost its start)."""

    __slots__ = ("seq", "skipping", "step")

    def __init__(self) -> None:
        self.step: tuple[int, int] | None = None
        self.seq = 0
        self.skipping = False

    def verdict(self, delta: Delta, after: Position | None) -> Verdict:
        """What to do with a live delta, the stream having sent everything up to ``after``."""
        if after is not None and delta.position <= after:
            return "drop"
        if delta.step_key != self.step:
            if delta.position.seq == 1 and after == _before(delta.position):
                return "send"  # the step's first delta, right after the event before it
            return "sync"  # a new step: its earlier events must be read (and sent) first
        if self.skipping:
            return "drop"
        if delta.position.seq != self.seq + 1:
            return "sync" if delta.position.seq > self.seq else "drop"
        return "send"

    def sent(self, delta: Delta) -> None:
        self.step, self.seq, self.skipping = delta.step_key, delta.position.seq, False

    def skip(self, delta: Delta) -> None:
        """Skip ``delta``'s step (the buffer did not have its start): its event carries it."""
        self.step, self.seq, self.skipping = delta.step_key, delta.position.seq, True

    def catch_up(self, buffer: Sequence[Delta], after: Position | None) -> list[Delta]:
        """What to send of the buffered deltas (in publishing order), ``after`` being what the
        stream sent last (the store's events read just before): for each step after it, its
        text from where the stream is, or from the step's start or last reset — or nothing
        when the buffer lost that part (the step is skipped until its event comes)."""
        steps: dict[tuple[int, int], list[Delta]] = {}
        for d in buffer:
            if after is None or d.position > after:
                steps.setdefault(d.step_key, []).append(d)
        out: list[Delta] = []
        for key in sorted(steps):
            group = sorted(steps[key], key=lambda d: d.position.seq)
            mine = after is not None and after.is_delta and (after.attempt, after.step) == key
            start = _start(group, after.seq + 1 if mine and after is not None else None)
            self.step, self.skipping = key, start is None
            self.seq = after.seq if mine and after is not None else 0
            if start is None:
                continue
            self.seq = group[start].position.seq - 1
            for d in group[start:]:
                if d.position.seq != self.seq + 1:  # a hole: the rest comes with the step
                    self.skipping = True
                    break
                out.append(d)
                self.seq = d.position.seq
        return out


def _before(position: Position) -> Position:
    """The event right before a delta's step: step *n - 1*'s own event (for step 1 its run's
    start). Nothing lies between them and the step's first delta, so a stream that sent it
    sends that delta as it comes, without reading the store and the buffer first."""
    return Position(position.attempt, position.step - 1)


def _start(group: Sequence[Delta], need: int | None) -> int | None:
    """Where in a step's buffered deltas a stream starts: at sequence number ``need`` (it sent
    the ones before), else at the last reset or the first delta; None when that is gone."""
    if need is not None:
        for i, d in enumerate(group):
            if d.position.seq == need:
                return i
        return None
    for i in range(len(group) - 1, -1, -1):
        if group[i].reset:
            return i
    return 0 if group and group[0].position.seq == 1 else None
