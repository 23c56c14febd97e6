"""The runner and its inbox: messages at step boundaries, skipped calls, interrupts, replay."""

from __future__ import annotations

from typing import Any

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, ToolSpec
from fleet.agents.runner import (
    INTERRUPT_NOTE,
    SKIPPED_FOR_INBOX,
    SKIPPED_FOR_INTERRUPT,
    MemoryJournal,
    RunPorts,
    run_agent,
)
from fleet.agents.tools import Tool, ToolContext
from fleet.domain.values import TaskStatus


class Script:
    """A model that plays back messages and keeps what it was sent."""

    name = "m"

    def __init__(self, *script: ChatMessage) -> None:
        self.script = list(script)
        self.sent: list[list[ChatMessage]] = []
        self.tools: list[list[str]] = []

    def complete(self, messages, tools=()) -> ModelResponse:
        self.sent.append(list(messages))
        self.tools.append([t.name for t in tools])
        return ModelResponse(message=self.script.pop(0), model=self.name)


def calls(*names: str) -> ChatMessage:
    return ChatMessage(
        role="assistant",
        tool_calls=tuple(ToolCall(id=f"c{i}", name=n) for i, n in enumerate(names, 1)),
    )


def say(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


class Counter:
    def __init__(self) -> None:
        self.runs: list[str] = []

    def tool(self, name: str) -> Tool:
        def fn(args: dict[str, Any], ctx: ToolContext) -> str:
            self.runs.append(name)
            return f"{name} done"

        return Tool(name=name, description="", parameters={}, fn=fn, retry="safe")


def run(model: Script, journal: MemoryJournal, tools: dict[str, Tool] | None = None, **kw):
    return run_agent(
        model,
        tools or {},
        [ChatMessage(role="user", content="start")],
        max_steps=6,
        ctx=ToolContext(task_id="t", run_id="r"),
        ports=RunPorts(journal=journal, **kw),
    )


def test_a_message_waiting_at_a_model_boundary_joins_the_conversation():
    counter = Counter()
    model = Script(calls("a"), say("done"))
    # the message arrives before the commit that precedes the second model call (commit 2)
    journal = MemoryJournal(inbox={2: ["also: use metric units"]})
    out = run(model, journal, {"a": counter.tool("a")})
    assert out.reply == "done"
    second = model.sent[1]
    assert [m.role for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1].content == "also: use metric units"
    assert out.inbox == ("also: use metric units",)
    assert out.details["inbox"] == 1
    # journaled as a step of its own, numbered after the tool's
    inbox_rows = [r for c in journal.commits for r in c if r.kind == "inbox"]
    assert [(r.step, r.output[0]["text"]) for r in inbox_rows] == [(3, "also: use metric units")]
    assert out.traces[0].step == 4  # the final model step comes after it


def test_calls_not_started_when_a_message_arrives_are_skipped():
    counter = Counter()
    model = Script(calls("a", "b", "c"), say("ok"))
    # commit 1 precedes call a; the message arrives before commit 2 (which precedes call b)
    journal = MemoryJournal(inbox={2: ["stop, wrong order"]})
    out = run(model, journal, {n: counter.tool(n) for n in "abc"})
    assert counter.runs == ["a"]
    second = model.sent[1]
    results = [(m.tool_call_id, m.content) for m in second if m.role == "tool"]
    assert results == [("c1", "a done"), ("c2", SKIPPED_FOR_INBOX), ("c3", SKIPPED_FOR_INBOX)]
    assert second[-1] == ChatMessage(role="user", content="stop, wrong order")
    assert out.reply == "ok"


def test_without_a_boundary_the_message_stays_for_the_settle():
    model = Script(say("quick"))
    journal = MemoryJournal(inbox={1: ["too late"]})
    out = run(model, journal)
    assert out.reply == "quick" and out.inbox == ()
    assert journal.commits == []  # no step boundary: the settle requeues it as a task


def test_an_interrupt_gets_one_last_turn_without_tools_then_supersedes():
    counter = Counter()
    model = Script(calls("a", "b"), say("partial: found order 1234"))
    journal = MemoryJournal(interrupt_at=2)  # seen before call b
    out = run(model, journal, {n: counter.tool(n) for n in "ab"})
    assert out.status == TaskStatus.SUPERSEDED
    assert out.reply == "partial: found order 1234"
    assert out.error == "interrupted by a newer message"
    assert counter.runs == ["a"]
    last = model.sent[-1]
    assert model.tools[-1] == []  # no tools offered in the report turn
    assert last[-1] == ChatMessage(role="user", content=INTERRUPT_NOTE, name="fleet_interrupt")
    assert [m.content for m in last if m.role == "tool"] == ["a done", SKIPPED_FOR_INTERRUPT]


def test_an_interrupt_without_the_report_turn():
    model = Script(calls("a"), say("never"))
    journal = MemoryJournal(interrupt_at=1)
    out = run(model, journal, {"a": Counter().tool("a")}, report_on_interrupt=False)
    assert out.status == TaskStatus.SUPERSEDED and out.reply is None
    assert len(model.sent) == 1


def test_a_retry_replays_the_inbox_delivery_in_place():
    counter = Counter()
    first_model = Script(calls("a"), say("first attempt reply"))
    journal = MemoryJournal(inbox={2: ["steered"]})
    run(first_model, journal, {"a": counter.tool("a")})
    stored = [r for c in journal.commits for r in c]
    # a worker loss after the inbox was delivered: the retry replays up to it
    retry_model = Script(say("second attempt reply"))
    again = MemoryJournal(previous=stored)
    out = run(retry_model, again, {"a": counter.tool("a")})
    assert counter.runs == ["a"]  # not run again
    (sent,) = retry_model.sent
    assert [m.content for m in sent if m.role == "user"] == ["start", "steered"]
    assert out.inbox == ("steered",)
    assert out.reply == "second attempt reply"


def test_echo_specs_are_unchanged_by_the_inbox():
    # tool specs are offered as before at ordinary steps
    model = Script(say("hi"))
    spec_tool = Counter().tool("x")
    run(model, MemoryJournal(), {"x": spec_tool})
    assert model.tools == [["x"]]
    assert isinstance(spec_tool.spec, ToolSpec)
