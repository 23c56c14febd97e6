"""A run's frozen prompt: instructions, bounded history oldest first, input last, explained."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID

import pytest

from fleet.agents import tokens
from fleet.agents.models.base import ChatMessage
from fleet.agents.models.echo import EchoModel
from fleet.agents.prompt import DROPPED_SHOWN, assemble, messages
from fleet.config import AgentConfig, HistoryConfig
from fleet.domain.context import Record
from fleet.domain.values import DataPart, Task, TaskStatus, TextPart

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def task(*parts: TextPart | DataPart, seq: int = 3, submissions: int = 1) -> Task:
    return Task(
        id=UUID("00000000-0000-0000-0000-0000000000aa"),
        deployment="support",
        conversation_id=UUID("00000000-0000-0000-0000-0000000000bb"),
        scope="api",
        key="ticket-4711",
        seq=seq,
        status=TaskStatus.LEASED,
        input=parts or (TextPart(text="where is my order?"),),
        submissions=submissions,
        not_before=T0,
        max_attempts=3,
        created_at=T0,
    )


def agent(
    instructions: str = "Be brief.", max_items: int = 20, max_bytes: int = 32768
) -> AgentConfig:
    return AgentConfig(
        name="support",
        instructions=instructions,
        history=HistoryConfig(max_items=max_items, max_bytes=max_bytes),
    )


HISTORY_NEWEST_FIRST = (
    Record(4, "assistant", "echo: second [history: 2]"),
    Record(3, "user", "second"),
    Record(2, "assistant", "echo: first [history: 0]"),
    Record(1, "user", "first"),
)


def test_assemble_orders_system_history_input():
    frozen = assemble(agent(), task(), HISTORY_NEWEST_FIRST, more_history=False)
    assert frozen["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "echo: first [history: 0]"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "echo: second [history: 2]"},
        {"role": "user", "content": "where is my order?"},
    ]
    assert frozen["task_seq"] == 3
    assert frozen["submissions"] == 1
    assert frozen["limits"] == {"max_items": 20, "max_bytes": 32768}
    assert [r["id"] for r in frozen["injected"]] == [1, 2, 3, 4]
    assert frozen["injected_bytes"] == sum(r.size for r in HISTORY_NEWEST_FIRST)
    assert frozen["dropped"] == []
    assert frozen["older_unseen"] is False


def test_assemble_without_instructions_has_no_system_message():
    frozen = assemble(agent(instructions=""), task(), (), more_history=False)
    assert frozen["messages"] == [{"role": "user", "content": "where is my order?"}]
    assert frozen["injected"] == []
    assert frozen["injected_bytes"] == 0


def test_assemble_records_what_it_dropped_and_why():
    history = (Record(5, "user", "x" * 50), *HISTORY_NEWEST_FIRST)
    frozen = assemble(agent(max_items=2, max_bytes=40), task(), history, more_history=True)
    # 50 bytes exceed the whole budget: oversized; then records 4 and 3 fit the item limit (2)
    assert [m["content"] for m in frozen["messages"]] == [
        "Be brief.",
        "second",
        "echo: second [history: 2]",
        "where is my order?",
    ]
    assert frozen["limits"] == {"max_items": 2, "max_bytes": 40}
    assert [r["id"] for r in frozen["injected"]] == [3, 4]
    assert [(r["id"], r["reason"]) for r in frozen["dropped"]] == [
        (5, "oversized"),
        (2, "item_limit"),
        (1, "item_limit"),
    ]
    assert frozen["older_unseen"] is True


def test_assemble_renders_parts_one_per_line():
    t = task(
        TextPart(text="first line"),
        DataPart(data={"b": 2, "a": 1}),
        TextPart(text="last"),
        submissions=3,
    )
    frozen = assemble(agent(), t, (), more_history=False)
    assert frozen["messages"][-1] == {
        "role": "user",
        "content": 'first line\n{"a": 1, "b": 2}\nlast',
    }
    assert frozen["submissions"] == 3


def test_frozen_context_survives_json():
    frozen = assemble(agent(), task(), HISTORY_NEWEST_FIRST, more_history=True)
    assert json.loads(json.dumps(frozen)) == frozen


def test_messages_of_frozen_context():
    frozen = assemble(agent(), task(), HISTORY_NEWEST_FIRST[:2], more_history=False)
    assert messages(frozen) == [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="second"),
        ChatMessage(role="assistant", content="echo: second [history: 2]"),
        ChatMessage(role="user", content="where is my order?"),
    ]


@pytest.mark.parametrize("n", [0, 1, 4])
def test_echo_sees_the_injected_history(n):
    frozen = assemble(agent(), task(), HISTORY_NEWEST_FIRST[:n], more_history=False)
    resp = EchoModel().complete(messages(frozen))
    assert resp.message.content == f"echo: where is my order? [history: {n}]"


def token_agent(context_tokens: int, instructions: str = "Be brief.") -> AgentConfig:
    return AgentConfig(name="support", instructions=instructions, context_tokens=context_tokens)


def test_history_fits_the_token_budget_left_by_instructions_and_input():
    est = tokens.estimate()
    # estimate: ceil(bytes / 4) + 4 per message. Instructions 9 bytes -> 3+4, input 18 -> 5+4
    history = (
        Record(3, "user", "z" * 40, seq=2),  # 10 + 4 = 14 (a turn without a reply)
        Record(2, "assistant", "y" * 40, seq=1),  # 14
        Record(1, "user", "x" * 40, seq=1),  # 14
    )
    agent = token_agent(256)
    frozen = assemble(agent, task(), history, more_history=False, tokenizer=est)
    assert [r["id"] for r in frozen["injected"]] == [1, 2, 3]
    assert frozen["limits"]["context_tokens"] == 256
    assert frozen["limits"]["history_tokens"] == 256 - 7 - 9
    assert frozen["injected_tokens"] == 42
    assert frozen["tokenizer"] == "estimate:4-bytes-per-token"
    assert [r["tokens"] for r in frozen["injected"]] == [14, 14, 14]

    # 240 history tokens: 204 + 14 fit; the turn of 2 and 1 (28) does not, and goes whole:
    # never the reply without its question (token_limit)
    tight = AgentConfig(name="s", instructions="Be brief.", context_tokens=256)
    big = (Record(4, "user", "w" * 800, seq=3), *history)  # 200 + 4 = 204 tokens: fits alone
    frozen = assemble(tight, task(), big, more_history=False, tokenizer=est)
    assert [r["id"] for r in frozen["injected"]] == [3, 4]
    assert [(r["id"], r["reason"]) for r in frozen["dropped"]] == [
        (2, "token_limit"),
        (1, "token_limit"),
    ]
    huge = (Record(5, "user", "v" * 2000, seq=4), *history)  # larger than the whole budget
    frozen = assemble(tight, task(), huge, more_history=False, tokenizer=est)
    assert [(r["id"], r["reason"]) for r in frozen["dropped"]] == [(5, "oversized")]
    assert [r["id"] for r in frozen["injected"]] == [1, 2, 3]


def test_without_a_token_budget_nothing_is_counted():
    frozen = assemble(agent(), task(), HISTORY_NEWEST_FIRST, more_history=False)
    assert "tokenizer" not in frozen and "tokens" not in frozen["injected"][0]


def test_the_real_tokenizer_is_used_when_installed():
    tok = tokens.tokenizer()
    assert tok.name == "tiktoken:cl100k_base"
    assert tok.count("hello world, how are you?") == 7
    assert tok.head("hello world, how are you?", 2) == "hello world"


def test_item_limit_drops_are_listed_up_to_a_bound():
    many = tuple(Record(i, "user", f"m{i}", seq=i) for i in range(60, 0, -1))  # newest first
    frozen = assemble(agent(max_items=5), task(), many, more_history=True)
    assert [r["id"] for r in frozen["injected"]] == [56, 57, 58, 59, 60]
    dropped = [(r["id"], r["reason"]) for r in frozen["dropped"]]
    assert dropped == [(i, "item_limit") for i in range(55, 55 - DROPPED_SHOWN, -1)]
    assert frozen["older_unseen"] is True
