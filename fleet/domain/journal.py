"""Replaying a run's step journal after its worker was lost (pure).

A retry walks the journal of the attempt before it: a model step found there is replayed (its
stored output, no model call), a tool call found finished is replayed (its stored result), a tool
call found ``started`` was in flight when the worker died: it runs again only if its tool is
safe to retry, otherwise the model is told the outcome is unknown. The first step not in the
journal, and everything after it, runs for real.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fleet.domain import shutdown
from fleet.domain.runs import TraceRow

#: Journal kinds that record a wait (for model capacity), not a step's work.
WAIT_KINDS = frozenset({"wait"})
#: What a retry does with one tool call the replayed model step asked for.
ToolAction = Literal["run", "replay", "rerun", "unknown"]

#: The result a model gets for an unsafe tool call that was in flight when its worker was lost.
UNKNOWN_RESULT = (
    "unknown: the worker running this call was lost; the call may or may not have taken "
    "effect (check before calling it again)"
)


def tool_action(entry: TraceRow | None, retry: Literal["safe", "unsafe"]) -> ToolAction:
    """Replay a finished call, re-run or report an in-flight one, run a call never started."""
    if entry is None:
        return "run"
    if entry.status == "finished":
        return "replay"
    return "rerun" if retry == "safe" else "unknown"


def handed_back(status: str, error: str | None) -> bool:
    """Did a run with this ``status`` and ``error`` end handed back at a step boundary (at
    worker shutdown, nothing in flight), as 0.2.0 on store it?"""
    return status == "interrupted" and error == shutdown.HANDED_BACK


def never_begun(entries: Sequence[TraceRow]) -> list[TraceRow]:
    """``entries`` without the ``started`` marks of calls that never began.

    An unsafe call is journaled as started in the commit just before it runs; a run handed back
    at that step boundary (``shutdown.HANDED_BACK``) stops there, before the call. Its mark
    would tell the retry that the call may have had its effect (``UNKNOWN_RESULT``) when it had
    none: without it, the retry makes the call. A run stored this way by 0.2.0, which kept the
    mark, is read so too (``Store.journal``).
    """
    return [e for e in entries if e.status != "started"]


class Replay:
    """A cursor over the journal an attempt inherits, consumed step by step in order.

    The journal is a prefix of the run: once a step is not found where expected, nothing after
    it is replayed (the run has diverged from what was recorded).
    """

    def __init__(self, entries: Sequence[TraceRow]) -> None:
        # a wait for model capacity is no step to replay: the retry waits again if it must
        waits = WAIT_KINDS
        self._entries = sorted((e for e in entries if e.kind not in waits), key=lambda e: e.step)
        self._at = 0

    def _peek(self) -> TraceRow | None:
        return self._entries[self._at] if self._at < len(self._entries) else None

    def inbox(self) -> TraceRow | None:
        """The next journaled inbox delivery, if the journal goes on with one (else nothing is
        consumed: the journal may go on with a model step)."""
        entry = self._peek()
        if entry is None or entry.kind != "inbox":
            return None
        self._at += 1
        return entry

    def model(self) -> TraceRow | None:
        """The next journaled model step, if the journal goes on with one that finished."""
        entry = self._peek()
        if entry is None or entry.kind != "model" or entry.status != "finished":
            self._at = len(self._entries)
            return None
        self._at += 1
        return entry

    def tool(self, call_id: str) -> TraceRow | None:
        """The journaled record of this tool call (finished or started), if it comes next."""
        entry = self._peek()
        if entry is None or entry.kind != "tool" or entry.call_id != call_id:
            self._at = len(self._entries)
            return None
        self._at += 1
        return entry

    @property
    def done(self) -> bool:
        return self._at >= len(self._entries)
