"""Replaying a run's step journal: the pure rules (tables) and the runner resuming from them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall
from fleet.agents.models.echo import EchoModel
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import Tool, ToolContext
from fleet.domain import journal
from fleet.domain.runs import TraceRow
from fleet.domain.values import TaskStatus

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def row(
    step: int,
    kind: str,
    *,
    status: str = "finished",
    call_id: str | None = None,
    output: Any = None,
    name: str = "x",
) -> TraceRow:
    return TraceRow(step, kind, name, None, output, None, {}, T0, 1.0, status, call_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entry", "retry", "action"),
    [
        (None, "safe", "run"),
        (None, "unsafe", "run"),
        (row(2, "tool", call_id="c1"), "safe", "replay"),
        (row(2, "tool", call_id="c1"), "unsafe", "replay"),
        (row(2, "tool", status="started", call_id="c1"), "safe", "rerun"),
        (row(2, "tool", status="started", call_id="c1"), "unsafe", "unknown"),
    ],
)
def test_tool_action(entry, retry, action):
    assert journal.tool_action(entry, retry) == action


def test_replay_walks_the_journal_in_step_order():
    entries = [row(2, "tool", call_id="a"), row(1, "model"), row(3, "tool", call_id="b")]
    r = journal.Replay(entries)
    assert r.model().step == 1
    assert r.tool("a").step == 2
    assert r.tool("b").step == 3
    assert r.model() is None
    assert r.done


@pytest.mark.parametrize(
    "entries",
    [
        [row(1, "tool", call_id="a")],  # starts with a tool: nothing to replay
        [row(1, "model", status="started")],
    ],
)
def test_replay_without_a_finished_model_step_replays_nothing(entries):
    r = journal.Replay(entries)
    assert r.model() is None
    assert r.done


def test_replay_stops_at_the_first_step_that_does_not_match():
    r = journal.Replay([row(1, "model"), row(2, "tool", call_id="a"), row(3, "tool", call_id="b")])
    r.model()
    assert r.tool("zzz") is None  # a different call: the run has diverged
    assert r.tool("a") is None
    assert r.done


# -- the runner resuming ------------------------------------------------------------------------


class Counting:
    """A tool with a side effect the test counts."""

    def __init__(self, name: str, retry: str) -> None:
        self.calls = 0
        self.tool = Tool(name=name, description="", parameters={}, fn=self._fn, retry=retry)  # type: ignore[arg-type]

    def _fn(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.calls += 1
        return f"done #{self.calls}"


class NoModel:
    """Fails the test if the model is asked for a step the journal holds."""

    name = "echo"

    def __init__(self) -> None:
        self.inner = EchoModel()
        self.calls = 0

    def complete(self, messages, tools=()) -> ModelResponse:
        self.calls += 1
        return self.inner.complete(messages, tools)


def first_attempt(tool: Counting, *, crash_after: int) -> list[TraceRow]:
    """Run until the ``crash_after``-th commit, then 'lose the worker': the journal it left."""
    stored: list[TraceRow] = []

    class Crash(Exception):
        pass

    class Dying(MemoryJournal):
        def commit(self, rows, **kw):
            stored.extend(rows)
            if len(self.commits) + 1 >= crash_after:
                raise Crash
            return super().commit(rows, **kw)

    with pytest.raises(Crash):
        run_agent(
            EchoModel(),
            {tool.tool.name: tool.tool},
            [ChatMessage(role="user", content=f"/tool {tool.tool.name} {{}}")],
            max_steps=4,
            ctx=ToolContext(task_id="t", run_id="r1"),
            ports=RunPorts(journal=Dying()),
        )
    # the store keeps one row per step: a later write of a step replaces its marker
    by_step: dict[int, TraceRow] = {}
    for r in stored:
        by_step[r.step] = r
    return [by_step[k] for k in sorted(by_step)]


def resume(tool: Counting, previous: list[TraceRow]) -> tuple[Any, NoModel, MemoryJournal]:
    model = NoModel()
    j = MemoryJournal(previous=previous)
    out = run_agent(
        model,
        {tool.tool.name: tool.tool},
        [ChatMessage(role="user", content=f"/tool {tool.tool.name} {{}}")],
        max_steps=4,
        ctx=ToolContext(task_id="t", run_id="r2"),
        ports=RunPorts(journal=j),
    )
    return out, model, j


@pytest.mark.parametrize("retry", ["safe", "unsafe"])
def test_a_finished_tool_call_is_replayed_not_run_again(retry):
    tool = Counting("charge", retry)
    # crash at the commit that follows the tool's result (before the next model call)
    previous = first_attempt(tool, crash_after=2)
    assert tool.calls == 1
    out, model, j = resume(tool, previous)
    assert out.status == TaskStatus.SUCCEEDED
    assert tool.calls == 1, "the finished call ran again"
    assert model.calls == 1  # only the final step: the first one came from the journal
    replayed = [r for c in j.commits for r in c if r.replayed]
    assert [(r.step, r.kind) for r in replayed] == [(1, "model"), (2, "tool")]
    assert out.details == {"replayed": [1, 2]}
    assert out.usage["replayed_steps"] == 2


def test_an_unsafe_call_in_flight_is_reported_unknown():
    tool = Counting("charge", "unsafe")
    # the marker commit succeeds; the worker dies while the tool runs (before its result)
    previous = [
        row(
            1,
            "model",
            name="echo",
            output={
                "content": "",
                "tool_calls": [{"id": "call_1", "name": "charge", "arguments": {}}],
            },
        ),
        row(2, "tool", status="started", call_id="call_1", name="charge"),
    ]
    out, model, j = resume(tool, previous)
    assert out.status == TaskStatus.SUCCEEDED
    assert tool.calls == 0, "an unsafe call that was in flight ran again"
    (result,) = [r for c in j.commits for r in c if r.kind == "tool"]
    assert result.output == journal.UNKNOWN_RESULT
    assert (result.step, result.status, result.replayed) == (2, "finished", False)
    assert model.calls == 1


def test_a_safe_call_in_flight_runs_again():
    tool = Counting("lookup", "safe")
    previous = [
        row(
            1,
            "model",
            name="echo",
            output={
                "content": "",
                "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": {}}],
            },
        ),
        row(2, "tool", status="started", call_id="call_1", name="lookup"),
    ]
    out, _, j = resume(tool, previous)
    assert out.status == TaskStatus.SUCCEEDED
    assert tool.calls == 1
    (result,) = [r for c in j.commits for r in c if r.kind == "tool"]
    assert (result.output, result.replayed) == ("done #1", False)


def test_a_crash_before_the_first_commit_replays_nothing():
    tool = Counting("charge", "unsafe")
    out, model, _ = resume(tool, [])
    assert out.status == TaskStatus.SUCCEEDED
    assert tool.calls == 1
    assert model.calls == 2


def test_replayed_model_output_with_several_calls_resumes_at_the_missing_one():
    a, b = Counting("a", "unsafe"), Counting("b", "unsafe")
    step1 = {
        "content": "",
        "tool_calls": [
            {"id": "c1", "name": "a", "arguments": {}},
            {"id": "c2", "name": "b", "arguments": {}},
        ],
    }
    previous = [
        row(1, "model", name="m", output=step1),
        row(2, "tool", call_id="c1", output="A-result", name="a"),
    ]

    class Final:
        name = "m"

        def __init__(self) -> None:
            self.seen: list[list[ChatMessage]] = []

        def complete(self, messages, tools=()) -> ModelResponse:
            self.seen.append(list(messages))
            return ModelResponse(message=ChatMessage(role="assistant", content="ok"), model="m")

    model = Final()
    out = run_agent(
        model,
        {"a": a.tool, "b": b.tool},
        [ChatMessage(role="user", content="go")],
        max_steps=4,
        ctx=ToolContext(task_id="t", run_id="r2"),
        ports=RunPorts(journal=MemoryJournal(previous=previous)),
    )
    assert out.reply == "ok"
    assert (a.calls, b.calls) == (0, 1)
    (seen,) = model.seen
    assert seen[1] == ChatMessage(
        role="assistant",
        tool_calls=(ToolCall(id="c1", name="a"), ToolCall(id="c2", name="b")),
    )
    assert [(m.tool_call_id, m.content) for m in seen[2:]] == [
        ("c1", "A-result"),
        ("c2", "done #1"),
    ]
