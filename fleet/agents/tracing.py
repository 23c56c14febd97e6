"""The tracing port: what the runner and the dispatcher say about a run (:class:`Tracer`,
:class:`Span`), and :data:`NOOP`, the tracer that does nothing when tracing is off.

Its OpenTelemetry implementation is :mod:`fleet.agents.otel`; which one a process uses is
:mod:`fleet.agents.telemetry`'s decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from fleet.agents.models.base import ChatMessage, Model, ModelResponse, ToolCall
from fleet.domain.runs import Outcome, TraceRow

if TYPE_CHECKING:
    from fleet.agents.tools.executor import CallResult
    from fleet.config import AgentConfig
    from fleet.domain.redaction import Redactor
    from fleet.domain.values import Task


class Span(Protocol):
    """What the runner and dispatcher may say about an open span."""

    def response(self, resp: ModelResponse) -> None:
        """A model call's answer: response model, finish reasons, token usage."""
        ...

    def result(self, res: CallResult) -> None:
        """A tool call's result; an error result marks the span failed."""
        ...

    def outcome(self, outcome: Outcome) -> None:
        """How a run ended: status, token totals, steps; a failed run marks the span failed."""
        ...

    def fail(self, error_type: str, message: str) -> None:
        """The operation failed without an exception (``error_type`` is low-cardinality)."""
        ...

    def error(self, exc: BaseException) -> None:
        """The operation failed with ``exc``."""
        ...


class Tracer(Protocol):
    """Opens the spans of a run; :data:`NOOP` when tracing is off."""

    enabled: bool

    def run(
        self, task: Task, run_id: UUID, agent: AgentConfig | None, redactor: Redactor | None = None
    ) -> AbstractContextManager[Span]:
        """The run's span (``invoke_agent``), current while it is open."""
        ...

    def chat(
        self, model: Model, messages: Sequence[ChatMessage], step: int
    ) -> AbstractContextManager[Span]:
        """A span for one model call (``chat``)."""
        ...

    def tool(self, call: ToolCall, step: int) -> AbstractContextManager[Span]:
        """A span for one tool call (``execute_tool``)."""
        ...

    def replayed(self, row: TraceRow) -> None:
        """A step taken from an earlier attempt's journal: an event on the run span."""
        ...

    def unknown(self, call: ToolCall, step: int) -> None:
        """A tool call whose outcome was lost with its worker: an event on the run span."""
        ...


# -- off: shared objects that do nothing -----------------------------------------------------------


class _NoopSpan:
    __slots__ = ()

    def response(self, resp: ModelResponse) -> None:
        pass

    def result(self, res: CallResult) -> None:
        pass

    def outcome(self, outcome: Outcome) -> None:
        pass

    def fail(self, error_type: str, message: str) -> None:
        pass

    def error(self, exc: BaseException) -> None:
        pass


_NOOP_SPAN = _NoopSpan()


class _NoopScope:
    __slots__ = ()

    def __enter__(self) -> Span:
        return _NOOP_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NOOP_SCOPE = _NoopScope()


class NoopTracer:
    """Tracing off: every call returns at once and creates nothing."""

    __slots__ = ()
    enabled = False

    def run(
        self, task: Task, run_id: UUID, agent: AgentConfig | None, redactor: Redactor | None = None
    ) -> AbstractContextManager[Span]:
        return _NOOP_SCOPE

    def chat(
        self, model: Model, messages: Sequence[ChatMessage], step: int
    ) -> AbstractContextManager[Span]:
        return _NOOP_SCOPE

    def tool(self, call: ToolCall, step: int) -> AbstractContextManager[Span]:
        return _NOOP_SCOPE

    def replayed(self, row: TraceRow) -> None:
        pass

    def unknown(self, call: ToolCall, step: int) -> None:
        pass


NOOP: Tracer = NoopTracer()
