"""The Tracer port on OpenTelemetry: GenAI semantic-convention spans for runs, models and tools.

Imported only when tracing is on (``fleet.agents.telemetry`` decides). Names and kinds:
``invoke_agent {agent}`` (INTERNAL) for a run, ``chat {model}`` (CLIENT; INTERNAL for the
in-process echo model) for a model call, ``execute_tool {tool}`` (INTERNAL) for a tool call;
steps that ran nothing (replayed from the journal, outcome lost with a worker) are events on the
run span. Contents only with capture on, always through the store's Redactor.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from fleet.agents.models.base import ChatMessage, Model, ModelResponse, ToolCall, provider_of
from fleet.agents.tracing import Span
from fleet.domain import redaction
from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import Task, TaskStatus

if TYPE_CHECKING:
    from fleet.agents.tools.executor import CallResult
    from fleet.config import AgentConfig

#: Longest span status description (an error message); longer ones are cut.
MAX_DESCRIPTION = 512
#: Providers whose model runs in this process: their chat spans are INTERNAL, others CLIENT.
IN_PROCESS_PROVIDERS = frozenset({"echo"})


@dataclass(frozen=True, slots=True)
class _RunState:
    """What the spans inside a run share: its span, conversation and redactor."""

    span: trace.Span
    conversation_id: str
    redactor: Redactor


_run_state: contextvars.ContextVar[_RunState | None] = contextvars.ContextVar(
    "fleet_run_span", default=None
)


def request_model_of(model: Model) -> str:
    """``gen_ai.request.model``: the provider's model name (``gpt-4o-mini``), ``echo`` for echo."""
    named = getattr(model, "model", None)
    if isinstance(named, str) and named:
        return named
    return model.name.partition(":")[2] or model.name


#: A failed run's ``error.type``, by how its error text begins (the runner's and dispatcher's).
_RUN_ERRORS = (
    ("step limit reached", "step_limit"),
    ("model ", "model_error"),
    ("internal error:", "internal_error"),
    ("deployment ", "config_error"),
    ("agent ", "tool_load_error"),
)


def run_error_type(error: str | None) -> str:
    """The low-cardinality ``error.type`` of a failed run, from its error text."""
    text = error or ""
    for prefix, kind in _RUN_ERRORS:
        if text.startswith(prefix):
            return kind
    return "_OTHER"


def tool_error_type(res: CallResult) -> str:
    """The low-cardinality ``error.type`` of a failed tool call."""
    if res.stopped:
        return "cancelled"
    if res.text.startswith("error: the tool timed out"):
        return "timeout"
    if res.text.startswith("error: the tool raised "):
        name = (res.error or "").partition(":")[0]
        return name if name.isidentifier() else "_OTHER"
    return "tool_error"  # ToolError: invalid arguments, or the tool refused


def exception_type(exc: BaseException) -> str:
    """A provider's status code when the exception carries one, else the exception's name."""
    code = getattr(exc, "status_code", None)
    return str(code) if isinstance(code, int) else type(exc).__qualname__


def _parts(msg: ChatMessage) -> list[dict[str, Any]]:
    """One message's parts in the GenAI input/output messages shape."""
    if msg.role == "tool":
        return [{"type": "tool_call_response", "id": msg.tool_call_id, "result": msg.content}]
    parts: list[dict[str, Any]] = [{"type": "text", "content": msg.content}] if msg.content else []
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in msg.tool_calls
    )
    return parts


class _Handle:
    """A live span with the GenAI attribute mapping; contents only when capture is on."""

    __slots__ = ("_capture", "_redactor", "span")

    def __init__(self, span: trace.Span, redactor: Redactor, capture: bool) -> None:
        self.span = span
        self._redactor = redactor
        self._capture = capture

    def _content(self, value: Any) -> str:
        return json.dumps(self._redactor.json(value), ensure_ascii=False, default=str)

    def response(self, resp: ModelResponse) -> None:
        span = self.span
        span.set_attribute("gen_ai.response.model", resp.model)
        if resp.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [resp.finish_reason])
        span.set_attribute("gen_ai.usage.input_tokens", resp.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", resp.usage.completion_tokens)
        if resp.answered_by is not None:  # a managed call: which configured model answered
            span.set_attribute("fleet.model.answered_by", resp.answered_by)
            span.set_attribute("fleet.model.fallback", resp.fallback)
            if resp.provider:
                span.set_attribute("gen_ai.provider.name", resp.provider)
            if resp.waited_s:
                span.set_attribute("fleet.model.waited_s", resp.waited_s)
        if self._capture:
            out = {
                "role": "assistant",
                "parts": _parts(resp.message),
                "finish_reason": resp.finish_reason or "stop",
            }
            span.set_attribute("gen_ai.output.messages", self._content([out]))

    def result(self, res: CallResult) -> None:
        if res.error is not None or res.stopped:
            self.fail(tool_error_type(res), res.error or "stopped")
        elif self._capture:
            self.span.set_attribute("gen_ai.tool.call.result", self._content(res.text))

    def outcome(self, outcome: Outcome) -> None:
        span = self.span
        usage = outcome.usage
        span.set_attribute("fleet.run.status", outcome.status.value)
        span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
        span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0)))
        span.set_attribute("fleet.run.steps", int(usage.get("steps", 0)))
        if "replayed_steps" in usage:
            span.set_attribute("fleet.run.replayed_steps", int(usage["replayed_steps"]))
        if outcome.status == TaskStatus.FAILED:
            self.fail(run_error_type(outcome.error), outcome.error or "failed")

    def fail(self, error_type: str, message: str) -> None:
        self.span.set_attribute("error.type", error_type)
        text = self._redactor.text(message)[:MAX_DESCRIPTION]
        self.span.set_status(Status(StatusCode.ERROR, text))

    def error(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.fail(exception_type(exc), str(exc) or type(exc).__name__)


class OtelTracer:
    """Spans through an OpenTelemetry tracer (the process's provider, or a test's)."""

    enabled = True

    def __init__(self, tracer: trace.Tracer, *, capture_content: bool = False) -> None:
        self._tracer = tracer
        self.capture_content = capture_content

    @classmethod
    def of(cls, provider: trace.TracerProvider, *, capture_content: bool = False) -> OtelTracer:
        """The tracer of ``provider`` under fleet's name and version."""
        from fleet.version import __version__

        return cls(provider.get_tracer("fleet", __version__), capture_content=capture_content)

    @contextmanager
    def _span(
        self, name: str, kind: SpanKind, attributes: dict[str, Any], redactor: Redactor
    ) -> Iterator[_Handle]:
        with self._tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            handle = _Handle(span, redactor, self.capture_content)
            try:
                yield handle
            except BaseException as exc:
                handle.error(exc)
                raise

    @contextmanager
    def run(
        self, task: Task, run_id: UUID, agent: AgentConfig | None, redactor: Redactor | None = None
    ) -> Iterator[Span]:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": str(task.conversation_id),
            "fleet.task.id": str(task.id),
            "fleet.run.id": str(run_id),
            "fleet.run.attempt": task.attempts,
            "fleet.conversation.id": str(task.conversation_id),
            "fleet.deployment": task.deployment,
        }
        if agent is not None:
            attrs["gen_ai.agent.name"] = agent.name
            attrs["gen_ai.provider.name"] = agent.model.provider
            attrs["gen_ai.request.model"] = agent.model.name or agent.model.provider
        else:
            attrs["gen_ai.provider.name"] = "_OTHER"
        for key, value in task.labels.items():
            attrs[f"fleet.label.{key}"] = value
        name = f"invoke_agent {agent.name}" if agent is not None else "invoke_agent"
        red = redactor or redaction.DEFAULT
        with self._span(name, SpanKind.INTERNAL, attrs, red) as handle:
            token = _run_state.set(_RunState(handle.span, str(task.conversation_id), red))
            try:
                yield handle
            finally:
                _run_state.reset(token)

    def chat(
        self, model: Model, messages: Sequence[ChatMessage], step: int
    ) -> AbstractContextManager[Span]:
        state = _run_state.get()
        provider = provider_of(model)
        request_model = request_model_of(model)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": request_model,
            "fleet.step": step,
        }
        if state is not None:
            attrs["gen_ai.conversation.id"] = state.conversation_id
        red = state.redactor if state is not None else redaction.DEFAULT
        if self.capture_content:
            attrs["gen_ai.input.messages"] = json.dumps(
                red.json([{"role": m.role, "parts": _parts(m)} for m in messages]),
                ensure_ascii=False,
                default=str,
            )
        kind = SpanKind.INTERNAL if provider in IN_PROCESS_PROVIDERS else SpanKind.CLIENT
        return self._span(f"chat {request_model}", kind, attrs, red)

    def tool(self, call: ToolCall, step: int) -> AbstractContextManager[Span]:
        state = _run_state.get()
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "fleet.step": step,
        }
        red = state.redactor if state is not None else redaction.DEFAULT
        if self.capture_content:
            attrs["gen_ai.tool.call.arguments"] = json.dumps(
                red.json(call.arguments), ensure_ascii=False, default=str
            )
        return self._span(f"execute_tool {call.name}", SpanKind.INTERNAL, attrs, red)

    def _event(self, name: str, attrs: dict[str, Any]) -> None:
        state = _run_state.get()
        span = state.span if state is not None else trace.get_current_span()
        span.add_event(name, attrs)

    def replayed(self, row: TraceRow) -> None:
        attrs: dict[str, Any] = {"fleet.step": row.step, "fleet.step.replayed": True}
        if row.kind == "model":
            attrs["gen_ai.operation.name"] = "chat"
            attrs["gen_ai.response.model"] = row.name
        else:
            attrs["gen_ai.operation.name"] = "execute_tool"
            attrs["gen_ai.tool.name"] = row.name
            if row.call_id:
                attrs["gen_ai.tool.call.id"] = row.call_id
        self._event("fleet.step.replayed", attrs)

    def unknown(self, call: ToolCall, step: int) -> None:
        self._event(
            "fleet.step.outcome_unknown",
            {
                "fleet.step": step,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
            },
        )
