"""The agent loop: model call, tool calls, repeat until a reply or the step limit.

The runner gets its ports handed in and never touches the store: a ``Journal`` that stores
finished steps (fenced) before the next step begins and hands back an earlier attempt's steps to
replay, and a ``watch`` that says, while a tool runs, whether the run must stop. Every step
boundary (before a model call or a tool call, once there is something unstored) is a journal
commit, which also says whether a cancel was requested. A ``tracer`` (a no-op unless tracing is
on) gets a span around each model call and each tool call.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from fleet.agents import telemetry, tokens
from fleet.agents.budget import fit as budget_fit
from fleet.agents.models.base import ChatMessage, Model, ToolCall, Usage
from fleet.agents.tokens import Tokenizer
from fleet.agents.tools import executor
from fleet.agents.tools.base import Tool, ToolContext
from fleet.domain import journal
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import ModelError


class Journal(Protocol):
    """Where a run's steps go, and what an earlier attempt of its task left."""

    def replay(self) -> Sequence[TraceRow]:
        """The steps the task's previous attempt journaled, in order (empty on a first run)."""
        ...

    def commit(self, rows: Sequence[TraceRow]) -> bool:
        """Store ``rows`` fenced; True if a cancel was requested. Raises LeaseLost."""
        ...


@dataclass
class MemoryJournal:
    """A journal kept in memory (tests, and runs that need no durability)."""

    previous: Sequence[TraceRow] = ()
    cancel_at: int | None = None
    commits: list[list[TraceRow]] = field(default_factory=list)

    def replay(self) -> Sequence[TraceRow]:
        return self.previous

    def commit(self, rows: Sequence[TraceRow]) -> bool:
        self.commits.append(list(rows))
        return self.cancel_at is not None and len(self.commits) >= self.cancel_at


@dataclass(frozen=True)
class RunPorts:
    journal: Journal
    #: Polled while a tool runs: must the run stop now (cancel requested, lease lost)?
    watch: Callable[[], bool] = lambda: False
    #: Seconds a call of this tool may take.
    timeout_of: Callable[[Tool], float] = lambda tool: tool.timeout or 60.0
    #: The agent's ``context_tokens``: what is sent each step is cut to fit it (None: no cut).
    context_tokens: int | None = None
    #: Counts tokens for ``context_tokens`` (default: the process's tokenizer).
    tokenizer: Tokenizer | None = None
    #: Spans for model and tool calls (OpenTelemetry when tracing is on; no-op by default).
    tracer: telemetry.Tracer = telemetry.NOOP


class _Steps:
    """The run's steps so far: numbering, usage, and the rows not yet committed."""

    def __init__(self, ports: RunPorts) -> None:
        self.ports = ports
        self.pending: list[TraceRow] = []
        self.count = 0
        self.usage = Usage()
        self.replayed: list[int] = []
        #: Tool results cut to fit the token budget, by call id: first step it was cut at.
        self.shortened: dict[str, dict[str, Any]] = {}

    def next_step(self) -> int:
        self.count += 1
        return self.count

    def add(self, row: TraceRow) -> None:
        self.count = max(self.count, row.step)
        self.pending.append(row)

    def replay(self, entry: TraceRow) -> None:
        self.replayed.append(entry.step)
        self.ports.tracer.replayed(entry)
        self.add(_replayed(entry))

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
    ) -> None:
        u = usage or Usage()
        self.usage = self.usage + u
        self.add(
            TraceRow(
                step=step if step is not None else self.next_step(),
                kind=kind,
                name=name,
                input=input,
                output=output,
                error=error,
                usage={"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens},
                started_at=started,
                duration_ms=round((time.perf_counter() - t0) * 1000, 3),
                call_id=call_id,
            )
        )

    def commit(self, extra: Sequence[TraceRow] = ()) -> bool:
        """Store what is pending (and ``extra``) before the next step; True if cancelled."""
        rows = [*self.pending, *extra]
        self.pending = []
        return bool(rows) and self.ports.journal.commit(rows)

    def outcome(
        self, status: TaskStatus, *, reply: str | None = None, error: str | None = None
    ) -> Outcome:
        usage = {
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "total_tokens": self.usage.total_tokens,
            "steps": self.count,
        }
        details: dict[str, Any] = {}
        if self.replayed:
            usage["replayed_steps"] = len(self.replayed)
            details["replayed"] = self.replayed
        if self.shortened:
            details["shortened"] = list(self.shortened.values())
        return Outcome(
            status=status,
            reply=reply,
            error=error,
            usage=usage,
            traces=self.pending,
            details=details,
        )


def run_agent(
    model: Model,
    tools: Mapping[str, Tool],
    messages: Sequence[ChatMessage],
    *,
    max_steps: int,
    ctx: ToolContext,
    ports: RunPorts,
) -> Outcome:
    """Run to a reply; model errors and the step limit end it as ``failed``, a cancel as
    ``cancelled``; tool failures are results the model sees. Raises LeaseLost (from commits)."""
    convo = list(messages)
    specs = [t.spec for t in tools.values()]
    steps = _Steps(ports)
    replay = journal.Replay(ports.journal.replay())
    model_calls = 0
    while True:
        if model_calls >= max_steps:
            return steps.outcome(
                TaskStatus.FAILED,
                error=f"step limit reached: {max_steps} model steps without a final reply "
                "(raise max_steps in the agent's config if the task needs more)",
            )
        if steps.commit():
            return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
        model_calls += 1
        entry = replay.model()
        if entry is not None:
            msg = _message_of(entry.output)
            steps.replay(entry)
        else:
            msg_or_error = _call_model(model, convo, specs, steps)
            if isinstance(msg_or_error, str):
                return steps.outcome(
                    TaskStatus.FAILED, error=f"model {model.name} failed: {msg_or_error}"
                )
            msg = msg_or_error
        if not msg.tool_calls:
            return steps.outcome(TaskStatus.SUCCEEDED, reply=msg.content)
        convo.append(msg)
        for call in msg.tool_calls:
            text = _tool_step(tools, call, ctx, steps, replay)
            if text is None:
                return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
            convo.append(
                ChatMessage(role="tool", content=text, tool_call_id=call.id, name=call.name)
            )


def _to_send(convo: list[ChatMessage], steps: _Steps) -> tuple[list[ChatMessage], dict[str, Any]]:
    """What this model step sends: the conversation, cut to the token budget if it has one."""
    budget = steps.ports.context_tokens
    if budget is None:
        return convo, {"messages": len(convo)}
    tok = steps.ports.tokenizer or tokens.tokenizer()
    sent, total, cut = budget_fit(convo, budget, tok)
    step = steps.count + 1
    for record in cut:
        steps.shortened.setdefault(str(record["call_id"]), {**record, "step": step})
    return sent, {"messages": len(sent), "tokens": total, "shortened": len(cut)}


def _call_model(
    model: Model, convo: list[ChatMessage], specs: list[Any], steps: _Steps
) -> ChatMessage | str:
    """One model step, recorded; the message, or the error text if the call failed."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    sent, seen = _to_send(convo, steps)
    with steps.ports.tracer.chat(model, sent, steps.count + 1) as span:
        try:
            resp = model.complete(sent, specs)
        except ModelError as exc:
            span.error(exc)
            steps.record("model", model.name, started, t0, input=seen, error=exc.message)
            return exc.message
        span.response(resp)
    out = _dump(resp.message)
    if resp.finish_reason:
        out["finish_reason"] = resp.finish_reason
    steps.record(
        "model",
        resp.model or model.name,
        started,
        t0,
        input=seen,
        output=out,
        usage=resp.usage,
    )
    return resp.message


def _tool_step(
    tools: Mapping[str, Tool],
    call: ToolCall,
    ctx: ToolContext,
    steps: _Steps,
    replay: journal.Replay,
) -> str | None:
    """The result text of one tool call (replayed, reported or run); None: the run must stop."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    args = {**call.arguments, "_meta": {"labels": dict(ctx.labels), "task": ctx.task_id}}
    tool = tools.get(call.name)
    entry = replay.tool(call.id)
    action = journal.tool_action(entry, tool.retry if tool is not None else "safe")
    if action == "replay":
        assert entry is not None
        steps.replay(entry)
        return _as_text(entry.output)
    step = entry.step if entry is not None else steps.next_step()
    if action == "unknown":
        steps.ports.tracer.unknown(call, step)
        steps.record(
            "tool",
            call.name,
            started,
            t0,
            step=step,
            input=args,
            output=journal.UNKNOWN_RESULT,
            error="in flight when its worker was lost",
            call_id=call.id,
        )
        return journal.UNKNOWN_RESULT
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        text = f"error: no tool named {call.name!r} (available: {known})"
        with steps.ports.tracer.tool(call, step) as span:
            span.fail("tool_not_found", text)
        steps.record(
            "tool",
            call.name,
            started,
            t0,
            step=step,
            input=args,
            output=text,
            error=text,
            call_id=call.id,
        )
        return text
    # Finished steps are stored before this one begins; an unsafe call is journaled as
    # started first, so a retry knows it may have had its effect.
    marker = (
        [TraceRow(step, "tool", call.name, args, None, None, {}, started, 0.0, "started", call.id)]
        if tool.retry == "unsafe"
        else []
    )
    if steps.commit(marker):
        return None
    t0 = time.perf_counter()
    with steps.ports.tracer.tool(call, step) as span:
        result = executor.call(
            tool,
            dict(call.arguments),
            dataclasses.replace(ctx, call_id=call.id),
            timeout_s=steps.ports.timeout_of(tool),
            watch=steps.ports.watch,
        )
        span.result(result)
    steps.record(
        "tool",
        call.name,
        started,
        t0,
        step=step,
        input=args,
        output=result.text,
        error=result.error,
        call_id=call.id,
    )
    return None if result.stopped else result.text


def _replayed(entry: TraceRow) -> TraceRow:
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


def _message_of(output: Any) -> ChatMessage:
    """The assistant message a journaled model step produced."""
    out = output if isinstance(output, dict) else {}
    calls = tuple(
        ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=c.get("arguments") or {})
        for c in out.get("tool_calls") or ()
    )
    return ChatMessage(role="assistant", content=out.get("content") or "", tool_calls=calls)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _dump(msg: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": json.loads(json.dumps(c.arguments))}
            for c in msg.tool_calls
        ]
    return out
