"""What the runner is handed: its journal (steps, inbox, stop requests), its delegation port
and its settings.

The runner never touches the store: the dispatcher binds these ports to it
(``fleet.dispatch.journal.StoreJournal``, ``fleet.dispatch.delegation.RunDelegation``); tests
use ``MemoryJournal``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from fleet.agents import telemetry
from fleet.agents.tokens import Tokenizer
from fleet.agents.tools.base import Tool
from fleet.domain.delegation import Delegated, Finished, Signalled
from fleet.domain.followups import Followup
from fleet.domain.runs import InboxItem, Signals, TraceRow
from fleet.domain.waits import Decision


class Journal(Protocol):
    """Where a run's steps go, and what an earlier attempt of its task left."""

    def replay(self) -> Sequence[TraceRow]:
        """The steps the task's previous attempt journaled, in order (empty on a first run)."""
        ...

    def commit(self, rows: Sequence[TraceRow], *, take_inbox_as: int | None = None) -> Signals:
        """Store ``rows`` fenced and say what the run must know (cancel, interrupt, inbox);
        with ``take_inbox_as`` also take the waiting inbox messages, journaled as that step.
        Raises LeaseLost."""
        ...


@dataclass
class MemoryJournal:
    """A journal kept in memory (tests): scripted cancel, interrupt and inbox messages.

    ``cancel_at`` / ``interrupt_at``: from that commit (1-based) on the flag is set;
    ``inbox``: commit number → messages that arrive just before it.
    """

    previous: Sequence[TraceRow] = ()
    cancel_at: int | None = None
    interrupt_at: int | None = None
    inbox: dict[int, list[str]] = field(default_factory=dict)
    commits: list[list[TraceRow]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    taken_at: list[int] = field(default_factory=list)

    def replay(self) -> Sequence[TraceRow]:
        return self.previous

    def commit(self, rows: Sequence[TraceRow], *, take_inbox_as: int | None = None) -> Signals:
        self.commits.append(list(rows))
        n = len(self.commits)
        self.waiting.extend(self.inbox.get(n, []))
        taken: tuple[InboxItem, ...] = ()
        if take_inbox_as is not None and self.waiting:
            taken = tuple(InboxItem(i, "steer", text) for i, text in enumerate(self.waiting, 1))
            self.waiting = []
            self.taken_at.append(take_inbox_as)
            records = [{"id": i.id, "source": i.source, "text": i.text} for i in taken]
            self.commits[-1].append(
                TraceRow(
                    take_inbox_as, "inbox", "inbox", None, records, None, {}, datetime.now(UTC), 0.0
                )
            )
        return Signals(
            cancel=self.cancel_at is not None and n >= self.cancel_at,
            interrupt=self.interrupt_at is not None and n >= self.interrupt_at,
            taken=taken,
            waiting=len(self.waiting),
        )


class Deltas(Protocol):
    """Where a run's model text goes as the model writes it (token streaming): to the task's
    watchers, redacted, never to the store. ``step`` is the number the model step will be
    journaled as."""

    #: False: nobody can watch (the runner does not stream into it).
    live: bool

    def text(self, step: int, chunk: str) -> None:
        """More of step ``step``'s text."""
        ...

    def reset(self, step: int) -> None:
        """Step ``step``'s text so far is void (the call starts over)."""
        ...

    def end(self, step: int) -> None:
        """Step ``step``'s call ended: send what was held back (redaction)."""
        ...


class NoDeltas:
    """Nobody watches: model text is not streamed anywhere."""

    live = False

    def text(self, step: int, chunk: str) -> None:
        return None

    def reset(self, step: int) -> None:
        return None

    def end(self, step: int) -> None:
        return None


NO_DELTAS = NoDeltas()


class Waits(Protocol):
    """What a run's waits came to (a person's approvals): the run never waits in place; it
    stops with what it needs (``Outcome.waits``) and, resumed, asks here."""

    #: Seconds an approval waits for its decision (the agent's ``approval_timeout``).
    approval_timeout_s: float

    def decision(self, call_id: str) -> Decision | None:
        """How the wait for this tool call ended; None when none was asked for yet or it is
        still pending (a pending one past its deadline is ``expired``)."""
        ...


@dataclass
class MemoryWaits:
    """Decisions kept in memory (tests): call id → decision."""

    decided: dict[str, Decision] = field(default_factory=dict)
    approval_timeout_s: float = 60.0
    asked: list[str] = field(default_factory=list)

    def decision(self, call_id: str) -> Decision | None:
        self.asked.append(call_id)
        return self.decided.get(call_id)


class Followups(Protocol):
    """Where ``schedule_followup`` stores the run's follow-ups."""

    def schedule(self, after_s: float, input: str, *, call_id: str) -> Followup:
        """Store a follow-up of the run's conversation due in ``after_s``, once per
        ``call_id`` (a retried run gets the same one back). Raises Conflict when the
        conversation has too many pending."""
        ...


class Delegation(Protocol):
    """How a run hands work to other deployments (``call_agent``, ``start_agent``) and
    messages to their running tasks (``signal_agent``)."""

    #: The deployments the agent may delegate to (its ``delegates``).
    delegates: Sequence[str]

    def delegate(self, deployment: str, input: str, *, call_id: str, wait: bool) -> Delegated:
        """Admit a task in a new conversation of ``deployment``, once per ``call_id`` (a retried
        run gets the same task back). ``wait``: the caller will wait for it; otherwise its
        result comes back as a task of the caller's conversation. Raises Refused (not a
        delegate, too deep, a deadlock) or InputError (bad input)."""
        ...

    def poll(self, task_id: str) -> Finished | None:
        """How the delegated task ended, or None while it is unfinished (embedded mode also
        runs it here, when no one else does)."""
        ...

    def cancel(self, task_id: str) -> None:
        """The caller stopped waiting (cancelled, timed out): cancel the delegated task."""
        ...

    #: ``call_agent`` waits without a worker: its run stops (``Park``) until the delegated task
    #: ends or ``timeout_s`` passes. False (embedded): it waits in place (and runs it there).
    parks: bool
    #: Seconds a ``call_agent`` waits for its delegate (the agent's ``delegate_timeout``).
    timeout_s: float

    def waited(self, call_id: str) -> str | None:
        """How this call's earlier wait ended (``done``, ``expired``), or None (none yet, or
        still pending)."""
        ...

    def signal(self, task_id: str, message: str, *, call_id: str) -> Signalled:
        """Put ``message`` into the inbox of running task ``task_id``, once per ``call_id`` (a
        retried run finds it there and puts none). Raises Refused (no such task, its deployment
        is not a delegate, the run's own task) or InputError (bad input)."""
        ...


@dataclass(frozen=True)
class RunPorts:
    journal: Journal
    #: Polled while a tool runs: must the run stop now (cancel or interrupt, lease lost)?
    watch: Callable[[], bool] = lambda: False
    #: Seconds a call of this tool may take.
    timeout_of: Callable[[Tool], float] = lambda tool: tool.timeout or 60.0
    #: The agent's ``context_tokens``: what is sent each step is cut to fit it (None: no cut).
    context_tokens: int | None = None
    #: Counts tokens for ``context_tokens`` (default: the process's tokenizer).
    tokenizer: Tokenizer | None = None
    #: Spans for model and tool calls (OpenTelemetry when tracing is on; no-op by default).
    tracer: telemetry.Tracer = telemetry.NOOP
    #: An interrupted run gets one last model turn (no tools) to report what it has.
    report_on_interrupt: bool = True
    #: Messages already wait in the inbox when the run starts (a retry): take them first.
    inbox_waiting: bool = False
    #: The agent may delegate (``delegates`` set): the call_agent, start_agent and
    #: signal_agent tools use it.
    delegation: Delegation | None = None
    #: ``[prices]``: ``provider:model`` → (input, output) per million tokens; a priced model
    #: step records its cost (micros) with its usage.
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: Asked before each model call: why the run must end now (its tenant's token budget is
    #: spent), or None to go on.
    budget: Callable[[], str | None] = lambda: None
    #: Decisions on the run's waits (tool approvals); None: no tool of the run may wait (a
    #: tool that needs an approval is refused).
    waits: Waits | None = None
    #: Where model text goes as it is written (token streaming); nowhere by default.
    deltas: Deltas = NO_DELTAS
    #: ``on_stop(fn)``: call ``fn`` (from another thread) once the run must stop, at once if it
    #: must already; returns how to take it back. A model call in flight hangs up through it.
    on_stop: Callable[[Callable[[], None]], Callable[[], None]] = lambda fn: lambda: None
