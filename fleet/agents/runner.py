"""The agent loop: model call, tool calls, repeat until a reply or the step limit.

Between steps (never inside one) the loop calls ``boundary``: it stores the finished steps,
renews nothing itself, and tells whether the run must stop (cancel requested, lease lost).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fleet.agents.models.base import ChatMessage, Model, ToolCall, Usage
from fleet.agents.tools import Tool, ToolContext, ToolError
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import ModelError

#: ``boundary(finished_steps) -> cancel_requested``; raises LeaseLost when the run lost its task.
Boundary = Callable[[Sequence[TraceRow]], bool]


class _Steps:
    def __init__(self) -> None:
        self.pending: list[TraceRow] = []
        self.count = 0
        self.usage = Usage()

    def record(
        self,
        kind: str,
        name: str,
        started: datetime,
        t0: float,
        *,
        input: Any = None,
        output: Any = None,
        error: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        self.count += 1
        u = usage or Usage()
        self.usage = self.usage + u
        self.pending.append(
            TraceRow(
                step=self.count,
                kind=kind,
                name=name,
                input=input,
                output=output,
                error=error,
                usage={"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens},
                started_at=started,
                duration_ms=round((time.perf_counter() - t0) * 1000, 3),
            )
        )

    def outcome(
        self, status: TaskStatus, *, reply: str | None = None, error: str | None = None
    ) -> Outcome:
        usage = {
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "total_tokens": self.usage.total_tokens,
            "steps": self.count,
        }
        return Outcome(status=status, reply=reply, error=error, usage=usage, traces=self.pending)


def run_agent(
    model: Model,
    tools: Mapping[str, Tool],
    messages: Sequence[ChatMessage],
    *,
    max_steps: int,
    ctx: ToolContext,
    boundary: Boundary,
) -> Outcome:
    """Run to a reply; model errors, tool crashes and the step limit end it as ``failed``."""
    convo = list(messages)
    specs = [t.spec for t in tools.values()]
    steps = _Steps()
    model_calls = 0
    while True:
        if model_calls >= max_steps:
            return steps.outcome(
                TaskStatus.FAILED,
                error=f"step limit reached: {max_steps} model steps without a final reply "
                "(raise max_steps in the agent's config if the task needs more)",
            )
        if model_calls > 0 or steps.pending:
            if boundary(steps.pending):
                steps.pending = []
                return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
            steps.pending = []
        started, t0 = datetime.now(UTC), time.perf_counter()
        model_calls += 1
        try:
            resp = model.complete(convo, specs)
        except ModelError as exc:
            steps.record(
                "model", model.name, started, t0, input={"messages": len(convo)}, error=exc.message
            )
            return steps.outcome(
                TaskStatus.FAILED, error=f"model {model.name} failed: {exc.message}"
            )
        msg = resp.message
        steps.record(
            "model",
            resp.model or model.name,
            started,
            t0,
            input={"messages": len(convo)},
            output=_dump(msg),
            usage=resp.usage,
        )
        if not msg.tool_calls:
            return steps.outcome(TaskStatus.SUCCEEDED, reply=msg.content)
        convo.append(msg)
        for call in msg.tool_calls:
            result = _call_tool(tools, call, ctx, steps)
            if result is None:
                crashed = steps.pending[-1].error
                return steps.outcome(
                    TaskStatus.FAILED, error=f"tool {call.name} crashed: {crashed}"
                )
            convo.append(
                ChatMessage(role="tool", content=result, tool_call_id=call.id, name=call.name)
            )


def _call_tool(
    tools: Mapping[str, Tool], call: ToolCall, ctx: ToolContext, steps: _Steps
) -> str | None:
    """The tool's result text; a ToolError becomes an error result; None when the tool crashed."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    args = {**call.arguments, "_meta": {"labels": dict(ctx.labels), "task": ctx.task_id}}
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        text = f"error: no tool named {call.name!r} (available: {known})"
        steps.record("tool", call.name, started, t0, input=args, output=text, error=text)
        return text
    try:
        text = tool(dict(call.arguments), ctx)
    except ToolError as exc:
        text = f"error: {exc}"
        steps.record("tool", call.name, started, t0, input=args, output=text, error=str(exc))
        return text
    except Exception as exc:
        steps.record(
            "tool", call.name, started, t0, input=args, error=f"{type(exc).__name__}: {exc}"
        )
        return None
    steps.record("tool", call.name, started, t0, input=args, output=text)
    return text


def _dump(msg: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": json.loads(json.dumps(c.arguments))}
            for c in msg.tool_calls
        ]
    return out
