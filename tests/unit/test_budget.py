"""Token budgets inside a run: the oldest tool results are cut in what is sent, never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.agents import tokens
from fleet.agents.budget import fit
from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import Tool, ToolContext
from fleet.constants import SHORTENED_RESULT_TOKENS
from fleet.domain.budget import Item, to_shorten

EST = tokens.estimate()


@pytest.mark.parametrize(
    ("items", "budget", "chosen"),
    [
        ([], 10, []),
        ([Item(False, 5, 5), Item(True, 5, 2)], 10, []),  # fits: nothing cut
        ([Item(False, 5, 5), Item(True, 50, 10), Item(True, 50, 10)], 70, [1]),
        ([Item(False, 5, 5), Item(True, 50, 10), Item(True, 50, 10)], 30, [1, 2]),
        # not enough even with every result cut: cut them all, drop nothing
        ([Item(False, 500, 500), Item(True, 50, 10)], 30, [1]),
        # a result too short to cut is passed over
        ([Item(True, 8, 8), Item(True, 50, 10)], 20, [1]),
        # only tool results are cut, oldest first
        ([Item(False, 100, 100), Item(True, 40, 10), Item(False, 100, 100)], 215, [1]),
    ],
)
def test_to_shorten(items, budget, chosen):
    assert to_shorten(items, budget) == chosen


def conversation(*results: str) -> list[ChatMessage]:
    msgs = [ChatMessage(role="user", content="go")]
    for i, text in enumerate(results):
        call = ToolCall(id=f"c{i}", name="big")
        msgs.append(ChatMessage(role="assistant", tool_calls=(call,)))
        msgs.append(ChatMessage(role="tool", content=text, tool_call_id=f"c{i}", name="big"))
    return msgs


def test_fit_cuts_the_oldest_result_and_keeps_every_message():
    convo = conversation("a" * 2000, "b" * 2000)
    sent, total, cut = fit(convo, 700, EST)
    assert len(sent) == len(convo)
    assert [m.role for m in sent] == [m.role for m in convo]
    assert sent[2].content.startswith("a" * (SHORTENED_RESULT_TOKENS * 4))
    assert "shortened by fleet" in sent[2].content and sent[4].content == "b" * 2000
    assert cut == [{"call_id": "c0", "tool": "big", "tokens": 500, "kept": SHORTENED_RESULT_TOKENS}]
    assert total <= 700
    assert convo[2].content == "a" * 2000  # the caller's list is untouched


def test_a_long_run_cuts_what_it_sends_and_the_journal_keeps_results_whole():
    big = Tool(name="big", description="", parameters={}, fn=lambda a, c: "r" * 4000, retry="safe")

    class Asker:
        name = "m"

        def __init__(self) -> None:
            self.sent: list[list[ChatMessage]] = []

        def complete(self, messages, tools=()) -> ModelResponse:
            self.sent.append(list(messages))
            n = len(self.sent)
            if n <= 3:
                call = ToolCall(id=f"c{n}", name="big")
                return ModelResponse(
                    message=ChatMessage(role="assistant", tool_calls=(call,)), model="m"
                )
            return ModelResponse(message=ChatMessage(role="assistant", content="done"), model="m")

    model = Asker()
    journal = MemoryJournal()
    out = run_agent(
        model,
        {"big": big},
        [ChatMessage(role="user", content="go")],
        max_steps=8,
        ctx=ToolContext(task_id="t", run_id="r"),
        ports=RunPorts(journal=journal, context_tokens=1500, tokenizer=EST),
    )
    assert out.reply == "done"
    # step 3 sends two 1000-token results: over 1500, the older one is cut
    third = model.sent[2]
    assert "shortened by fleet" in third[2].content and third[4].content == "r" * 4000
    last = model.sent[3]
    assert sum("shortened by fleet" in m.content for m in last if m.role == "tool") == 2
    assert [m.role for m in last] == ["user"] + ["assistant", "tool"] * 3
    stored = [r for c in journal.commits for r in c if r.kind == "tool"]
    assert [r.output for r in stored] == ["r" * 4000] * 3
    assert out.details["shortened"] == [
        {"call_id": "c1", "tool": "big", "tokens": 1000, "kept": 64, "step": 5},
        {"call_id": "c2", "tool": "big", "tokens": 1000, "kept": 64, "step": 7},
    ]
    model_steps: list[Any] = [r for c in journal.commits for r in c if r.kind == "model"]
    assert model_steps[2].input["shortened"] == 1
