"""A run's steps as the runner keeps them: numbering, usage, what is not stored yet, and the
outcome it hands the settle."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fleet.agents.models.base import Usage
from fleet.agents.ports import RunPorts
from fleet.domain.runs import InboxItem, Outcome, Signals, TraceRow
from fleet.domain.values import TaskStatus, render_stored
from fleet.domain.waits import Request


class Steps:
    """The run's steps so far: numbering, usage, and the rows not yet committed."""

    def __init__(self, ports: RunPorts) -> None:
        self.ports = ports
        self.pending: list[TraceRow] = []
        self.count = 0
        self.usage = Usage()
        self.replayed: list[int] = []
        #: Tool results cut to fit the token budget, by call id: first step it was cut at.
        self.shortened: dict[str, dict[str, Any]] = {}
        #: Inbox messages delivered into the run (taken, or replayed from the journal), in order.
        self.delivered: list[str] = []
        #: Messages wait in the inbox: the next model boundary commits to take them.
        self.waiting = ports.inbox_waiting
        #: What the run's priced model steps cost, in micros (None: none was priced).
        self.cost_micros: int | None = None
        #: Managed model calls by the configured model that answered: calls and tokens.
        self.models: dict[str, dict[str, int]] = {}
        #: The run's last model call reports after an interrupt: a stop request does not end it.
        self.reporting = False

    def next_step(self) -> int:
        self.count += 1
        return self.count

    def add(self, row: TraceRow) -> None:
        self.count = max(self.count, row.step)
        self.pending.append(row)

    def replay(self, entry: TraceRow) -> None:
        self.replayed.append(entry.step)
        self.ports.tracer.replayed(entry)
        self.add(replayed(entry))

    def record(
        self,
        kind: str,
        name: str,
        started: datetime,
        t0: float,
        *,
        step: int | None = None,
        input: Any = None,
        output: Any = None,
        error: str | None = None,
        usage: Usage | None = None,
        call_id: str | None = None,
        cost_micros: int | None = None,
        duration_s: float | None = None,
    ) -> None:
        """A finished step, lasting since ``t0`` (``perf_counter``) or ``duration_s``."""
        u = usage or Usage()
        self.usage = self.usage + u
        counted = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
        if cost_micros is not None:
            counted["cost_micros"] = cost_micros
            self.cost_micros = (self.cost_micros or 0) + cost_micros
        self.add(
            TraceRow(
                step=step if step is not None else self.next_step(),
                kind=kind,
                name=name,
                input=input,
                output=output,
                error=error,
                usage=counted,
                started_at=started,
                duration_ms=round(
                    (time.perf_counter() - t0 if duration_s is None else duration_s) * 1000, 3
                ),
                call_id=call_id,
            )
        )

    def answered(self, name: str, usage: Usage, *, fallback: bool) -> None:
        """A managed call was answered by ``name`` (the agent's model or a fallback)."""
        seen = self.models.setdefault(
            name, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "fallback": 0}
        )
        seen["calls"] += 1
        seen["prompt_tokens"] += usage.prompt_tokens
        seen["completion_tokens"] += usage.completion_tokens
        seen["fallback"] = int(fallback)

    def commit(self, extra: Sequence[TraceRow] = (), *, take_inbox: bool = False) -> Signals:
        """Store what is pending (and ``extra``) before the next step; with ``take_inbox``, take
        the inbox's messages too (a model boundary). Nothing to store or take: no round trip."""
        rows = [*self.pending, *extra]
        if not rows and not (take_inbox and self.waiting):
            return Signals()
        self.pending = []
        step = self.count + 1 if take_inbox else None
        signals = self.ports.journal.commit(rows, take_inbox_as=step)
        if signals.taken:
            self.count = max(self.count, step or 0)
            self.delivered.extend(item.text for item in signals.taken)
        self.waiting = signals.waiting > 0
        return signals

    def outcome(
        self,
        status: TaskStatus,
        *,
        reply: str | None = None,
        error: str | None = None,
        waits: tuple[Request, ...] = (),
        error_class: str | None = None,
    ) -> Outcome:
        usage = {
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "total_tokens": self.usage.total_tokens,
            "steps": self.count,
        }
        details: dict[str, Any] = {}
        if self.cost_micros is not None:
            usage["cost_micros"] = self.cost_micros
        if self.replayed:
            usage["replayed_steps"] = len(self.replayed)
            details["replayed"] = self.replayed
        if self.shortened:
            details["shortened"] = list(self.shortened.values())
        if self.delivered:
            details["inbox"] = len(self.delivered)
        if self.models:
            details["models"] = self.models
        return Outcome(
            status=status,
            reply=reply,
            error=error,
            usage=usage,
            traces=self.pending,
            details=details,
            inbox=tuple(self.delivered),
            waits=waits,
            error_class=error_class,
        )


def replayed(entry: TraceRow) -> TraceRow:
    """A journal entry as the retry's own record of it (marked replayed)."""
    return TraceRow(
        step=entry.step,
        kind=entry.kind,
        name=entry.name,
        input=entry.input,
        output=entry.output,
        error=entry.error,
        usage=entry.usage,
        started_at=entry.started_at,
        duration_ms=entry.duration_ms,
        status=entry.status,
        call_id=entry.call_id,
        replayed=True,
    )


def inbox_texts(output: Any) -> list[str]:
    """The messages a journaled ``inbox`` step delivered (``text``, or stored input parts)."""
    return [
        str(r["text"]) if "text" in r else render_stored(r.get("input"))
        for r in output or ()
        if isinstance(r, dict)
    ]


__all__ = ["InboxItem", "Steps", "inbox_texts", "replayed"]
