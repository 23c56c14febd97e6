"""The agent loop with the echo model and fake tools: replies, tools, limits, cancel, errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, ToolSpec
from fleet.agents.models.echo import EchoModel
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import Tool, ToolContext, ToolError
from fleet.domain.runs import TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import ModelError

CTX = ToolContext(task_id="task-1", run_id="run-1", labels={"team": "search"})


class Recorder:
    """A fake tool that records its calls and answers with a fixed text (or raises)."""

    def __init__(
        self,
        name: str,
        answer: str = "42",
        raises: Exception | None = None,
        retry: str = "safe",
    ) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = answer
        self.raises = raises
        self.tool = Tool(
            name=name, description=f"fake {name}", parameters={}, fn=self._fn, retry=retry
        )

    def _fn(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(args)
        assert ctx.task_id == CTX.task_id
        if self.raises is not None:
            raise self.raises
        return self.answer


def Boundary(cancel_at: int | None = None) -> MemoryJournal:
    """A journal that records its commits; asks to cancel from the ``cancel_at``-th on."""
    return MemoryJournal(cancel_at=cancel_at)


class SpyModel:
    """Wraps a model, keeping every message list it was called with."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[list[ChatMessage]] = []

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        self.seen.append(list(messages))
        return self.inner.complete(messages, tools)


class Scripted:
    """A model that plays back responses; an exception in the script is raised."""

    def __init__(self, name: str, script: list[ChatMessage | Exception]) -> None:
        self.name = name
        self.script = list(script)
        self.calls = 0

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return ModelResponse(message=step, model=self.name)


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)]


def kinds(steps: Sequence[TraceRow]) -> list[tuple[int, str, str]]:
    return [(s.step, s.kind, s.name) for s in steps]


def run(
    model: Any,
    tools: dict[str, Tool],
    text: str | list[ChatMessage],
    boundary: MemoryJournal,
    max_steps: int = 4,
    **ports: Any,
):
    messages = user(text) if isinstance(text, str) else text
    return run_agent(
        model,
        tools,
        messages,
        max_steps=max_steps,
        ctx=CTX,
        ports=RunPorts(journal=boundary, **ports),
    )


def test_plain_reply():
    b = Boundary()
    out = run(EchoModel(), {}, "hello", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert out.reply == "echo: hello [history: 0]"
    assert out.error is None
    assert kinds(out.traces) == [(1, "model", "echo")]
    trace = out.traces[0]
    assert trace.input == {"messages": 2}
    assert trace.output == {"content": "echo: hello [history: 0]", "finish_reason": "stop"}
    assert trace.error is None
    assert trace.usage == {"prompt_tokens": 3, "completion_tokens": 4}
    assert trace.duration_ms >= 0
    assert out.usage == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "steps": 1}
    assert out.details == {}
    assert b.commits == []  # nothing to store before the first model call; the settle stores it


def test_tool_then_reply_stores_each_step_before_the_next():
    clock = Recorder("clock", answer="noon")
    b = Boundary()
    model = SpyModel(EchoModel())
    out = run(model, {"clock": clock.tool}, '/tool clock {"tz": "UTC"}', b)

    assert out.status == TaskStatus.SUCCEEDED
    assert out.reply == 'echo: /tool clock {"tz": "UTC"} [history: 0]'
    assert clock.calls == [{"tz": "UTC"}]
    # the model step is stored before the tool runs, the tool's result before the next model call
    assert [kinds(c) for c in b.commits] == [[(1, "model", "echo")], [(2, "tool", "clock")]]
    assert kinds(out.traces) == [(3, "model", "echo")]
    assert out.usage["steps"] == 3

    (call_trace,), (tool_trace,) = b.commits
    assert call_trace.output == {
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "clock", "arguments": {"tz": "UTC"}}],
        "finish_reason": "tool_calls",
    }
    assert (tool_trace.output, tool_trace.error, tool_trace.call_id) == ("noon", None, "call_1")
    assert tool_trace.status == "finished"
    second = model.seen[1]
    assert [m.role for m in second] == ["system", "user", "assistant", "tool"]
    assert second[3] == ChatMessage(
        role="tool", content="noon", tool_call_id="call_1", name="clock"
    )
    assert out.traces[0].input == {"messages": 4}


def test_an_unsafe_tool_is_journaled_as_started_before_it_runs():
    seen_commits: list[int] = []
    b = Boundary()

    def refund(args: dict[str, Any], ctx: ToolContext) -> str:
        seen_commits.append(len(b.commits))
        return "refunded"

    tool = Tool(name="refund", description="", parameters={}, fn=refund, retry="unsafe")
    out = run(EchoModel(), {"refund": tool}, "/tool refund {}", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert seen_commits == [1]  # the marker was stored before the call began
    model_step, marker = b.commits[0]
    assert (model_step.kind, marker.kind, marker.status, marker.step) == (
        "model",
        "tool",
        "started",
        2,
    )
    assert marker.call_id == "call_1" and marker.output is None
    (result,) = b.commits[1]
    assert (result.step, result.status, result.output) == (2, "finished", "refunded")


def test_labels_and_task_in_tool_trace_meta():
    clock = Recorder("clock")
    b = Boundary()
    run(EchoModel(), {"clock": clock.tool}, '/tool clock {"a": 1}', b)
    tool_trace = b.commits[1][0]
    assert tool_trace.input == {"a": 1, "_meta": {"labels": {"team": "search"}, "task": "task-1"}}
    assert clock.calls == [{"a": 1}]  # the tool itself never sees _meta


@pytest.mark.parametrize("max_steps", [1, 2, 3])
def test_loop_hits_step_limit(max_steps):
    clock = Recorder("clock")
    b = Boundary()
    model = SpyModel(EchoModel())
    out = run(model, {"clock": clock.tool}, "/loop clock", b, max_steps=max_steps)
    assert out.status == TaskStatus.FAILED
    assert out.reply is None
    assert out.error is not None
    assert out.error.startswith(f"step limit reached: {max_steps} model steps")
    assert "max_steps" in out.error
    assert len(model.seen) == max_steps
    assert len(clock.calls) == max_steps
    assert out.usage["steps"] == 2 * max_steps
    # the last tool's result is not yet stored: the outcome carries it to the settle
    assert kinds(out.traces) == [(2 * max_steps, "tool", "clock")]
    stored = [row for c in b.commits for row in c]
    assert [r.step for r in stored] == list(range(1, 2 * max_steps))


def test_cancel_seen_at_a_boundary_stops_before_the_next_step():
    clock = Recorder("clock")
    b = Boundary(cancel_at=2)
    model = SpyModel(EchoModel())
    out = run(model, {"clock": clock.tool}, "/loop clock", b)
    assert out.status == TaskStatus.CANCELLED
    assert out.reply is None
    assert out.error == "cancelled by request"
    assert len(model.seen) == 1  # the second model call never happened
    assert len(clock.calls) == 1
    assert [kinds(c) for c in b.commits] == [[(1, "model", "echo")], [(2, "tool", "clock")]]
    assert out.traces == []  # already stored
    assert out.usage["steps"] == 2


def test_cancel_before_a_tool_call_means_it_never_runs():
    clock = Recorder("clock")
    b = Boundary(cancel_at=1)
    out = run(EchoModel(), {"clock": clock.tool}, "/tool clock", b)
    assert out.status == TaskStatus.CANCELLED
    assert clock.calls == []


def test_tool_error_is_fed_back_and_run_succeeds():
    bad = Recorder("lookup", raises=ToolError("order 7 not found"))
    b = Boundary()
    model = SpyModel(EchoModel())
    out = run(model, {"lookup": bad.tool}, '/tool lookup {"order": 7}', b)
    assert out.status == TaskStatus.SUCCEEDED
    assert out.reply == 'echo: /tool lookup {"order": 7} [history: 0]'
    tool_trace = b.commits[1][0]
    assert tool_trace.kind == "tool"
    assert tool_trace.error == "order 7 not found"
    assert tool_trace.output == "error: order 7 not found"
    assert model.seen[1][-1].content == "error: order 7 not found"
    assert model.seen[1][-1].role == "tool"


def test_a_tool_that_raises_gives_the_model_an_error_and_the_run_goes_on():
    broken = Recorder("lookup", raises=RuntimeError("disk on fire"))
    b = Boundary()
    model = SpyModel(EchoModel())
    out = run(model, {"lookup": broken.tool}, "/tool lookup", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert len(model.seen) == 2
    (tool_trace,) = b.commits[1]
    assert tool_trace.error == "RuntimeError: disk on fire"
    assert tool_trace.output == "error: the tool raised RuntimeError: disk on fire"
    assert model.seen[1][-1].content == tool_trace.output


def test_a_tool_that_returns_no_text_is_an_error_result():
    tool = Tool(name="n", description="", parameters={}, fn=lambda a, c: 42, retry="safe")  # type: ignore[arg-type,return-value]
    b = Boundary()
    out = run(EchoModel(), {"n": tool}, "/tool n", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert "must return text" in b.commits[1][0].output


@pytest.mark.parametrize("step", [0, 1])
def test_model_error_fails_naming_the_model(step):
    call = ChatMessage(role="assistant", tool_calls=(ToolCall(id="c1", name="clock"),))
    script: list[ChatMessage | Exception] = [call] if step else []
    script.append(ModelError("HTTP 503 from upstream", retryable=True))
    model = Scripted("flaky-model", script)
    clock = Recorder("clock")
    b = Boundary()
    out = run(model, {"clock": clock.tool}, "hi", b)
    assert out.status == TaskStatus.FAILED
    assert out.error == "model flaky-model failed: HTTP 503 from upstream"
    assert model.calls == step + 1
    failed = out.traces[-1]
    assert (failed.kind, failed.name, failed.error) == (
        "model",
        "flaky-model",
        "HTTP 503 from upstream",
    )
    assert failed.output is None


def test_unknown_tool_is_fed_back():
    ghost = ChatMessage(role="assistant", tool_calls=(ToolCall(id="c1", name="ghost"),))
    model = Scripted("scripted", [ghost, ChatMessage(role="assistant", content="sorry")])
    spy = SpyModel(model)
    clock = Recorder("clock")
    b = Boundary()
    out = run(spy, {"clock": clock.tool}, "hi", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert out.reply == "sorry"
    expected = "error: no tool named 'ghost' (available: clock)"
    # nothing ran, so nothing needed storing in between: model step and answer go together
    (_, tool_trace) = b.commits[0]
    assert (tool_trace.kind, tool_trace.name) == ("tool", "ghost")
    assert tool_trace.output == expected
    assert tool_trace.error == expected
    assert spy.seen[1][-1] == ChatMessage(
        role="tool", content=expected, tool_call_id="c1", name="ghost"
    )
    assert clock.calls == []


def test_unknown_tool_with_no_tools():
    ghost = ChatMessage(role="assistant", tool_calls=(ToolCall(id="c1", name="ghost"),))
    model = Scripted("scripted", [ghost, ChatMessage(role="assistant", content="ok")])
    b = Boundary()
    out = run(model, {}, "hi", b)
    assert out.status == TaskStatus.SUCCEEDED
    assert b.commits[0][1].output == "error: no tool named 'ghost' (available: none)"


def test_several_calls_in_one_step_all_run_in_order():
    both = ChatMessage(
        role="assistant",
        tool_calls=(ToolCall(id="c1", name="a", arguments={"n": 1}), ToolCall(id="c2", name="b")),
    )
    model = SpyModel(Scripted("scripted", [both, ChatMessage(role="assistant", content="done")]))
    a, b_tool = Recorder("a", "A"), Recorder("b", "B")
    b = Boundary()
    out = run(model, {"a": a.tool, "b": b_tool.tool}, "hi", b)
    assert out.reply == "done"
    assert [kinds(c) for c in b.commits] == [
        [(1, "model", "scripted")],
        [(2, "tool", "a")],
        [(3, "tool", "b")],
    ]
    assert [(m.tool_call_id, m.content) for m in model.seen[1][-2:]] == [("c1", "A"), ("c2", "B")]


def test_history_reaches_the_model():
    messages = [
        ChatMessage(role="user", content="a"),
        ChatMessage(role="assistant", content="echo: a [history: 0]"),
        ChatMessage(role="user", content="b"),
    ]
    out = run(EchoModel(), {}, messages, Boundary())
    assert out.reply == "echo: b [history: 2]"


def test_every_model_step_is_counted_by_its_outcome() -> None:
    from prometheus_client import REGISTRY

    def count(outcome: str) -> float:
        found = REGISTRY.get_sample_value(
            "fleet_model_calls_total", {"model": "counted-model", "outcome": outcome}
        )
        return found or 0.0

    before = {o: count(o) for o in ("ok", "provider_error", "rate_limit")}
    call = ChatMessage(role="assistant", tool_calls=(ToolCall(id="c1", name="clock"),))
    failure = ModelError("HTTP 429 from upstream", status_code=429, retryable=True)
    model = Scripted("counted-model", [call, failure])
    out = run(model, {"clock": Recorder("clock").tool}, "hi", Boundary())
    assert out.status == TaskStatus.FAILED
    assert count("ok") - before["ok"] == 1  # the step that called the tool
    assert count("rate_limit") - before["rate_limit"] == 1
    assert count("provider_error") == before["provider_error"]
