"""The offline echo model: deterministic replies, history made visible, scripted tool calls."""

from __future__ import annotations

import pytest

from fleet.agents.models.base import ChatMessage, ToolCall, ToolSpec
from fleet.agents.models.echo import EchoModel

TOOLS = (ToolSpec(name="clock"), ToolSpec(name="lookup"))


def S(text: str) -> ChatMessage:
    return ChatMessage(role="system", content=text)


def U(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def A(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def CALL(name: str, id: str = "call_1", **args) -> ChatMessage:
    return ChatMessage(role="assistant", tool_calls=(ToolCall(id=id, name=name, arguments=args),))


def RESULT(name: str, text: str, id: str = "call_1") -> ChatMessage:
    return ChatMessage(role="tool", content=text, tool_call_id=id, name=name)


@pytest.mark.parametrize(
    "messages,reply",
    [
        ([U("hi")], "echo: hi [history: 0]"),
        ([S("be brief"), U("hi")], "echo: hi [history: 0]"),
        ([U("a"), A("echo: a"), U("b")], "echo: b [history: 2]"),
        ([S("sys"), U("a"), A("x"), U("b"), A("y"), U("c")], "echo: c [history: 4]"),
        # two user messages in a row: the earlier one counts
        ([U("a"), U("b")], "echo: b [history: 1]"),
        # messages after the last user message do not count
        ([U("a"), A("x")], "echo: a [history: 0]"),
        # a system message in the middle is not counted
        ([U("a"), S("note"), U("b")], "echo: b [history: 1]"),
        # tool traffic before the last user message is not counted
        (
            [U("a"), CALL("clock"), RESULT("clock", "noon"), A("it is noon"), U("b")],
            "echo: b [history: 2]",
        ),
        # no user message at all
        ([S("only system")], "echo:  [history: 0]"),
        ([], "echo:  [history: 0]"),
        ([U("")], "echo:  [history: 0]"),
        ([U("multi\nline  text")], "echo: multi\nline  text [history: 0]"),
    ],
)
def test_reply(messages, reply):
    resp = EchoModel().complete(messages, TOOLS)
    assert resp.message.role == "assistant"
    assert resp.message.content == reply
    assert resp.message.tool_calls == ()
    assert resp.model == "echo"
    assert resp.finish_reason == "stop"


@pytest.mark.parametrize(
    "messages,call",
    [
        ([U("/tool clock")], ToolCall(id="call_1", name="clock", arguments={})),
        ([U("/tool clock   ")], ToolCall(id="call_1", name="clock", arguments={})),
        (
            [U('/tool lookup {"order": 42, "deep": {"a": [1]}}')],
            ToolCall(id="call_1", name="lookup", arguments={"order": 42, "deep": {"a": [1]}}),
        ),
        # arguments that are not JSON are passed as raw text
        (
            [U("/tool lookup order 42")],
            ToolCall(id="call_1", name="lookup", arguments={"raw": "order 42"}),
        ),
        # history before the command does not matter
        ([U("a"), A("b"), U("/tool clock")], ToolCall(id="call_1", name="clock", arguments={})),
        # /loop keeps calling, numbering its calls since the last user message
        ([U("/loop clock")], ToolCall(id="call_1", name="clock", arguments={})),
        (
            [U("/loop clock"), CALL("clock"), RESULT("clock", "t")],
            ToolCall(id="call_2", name="clock", arguments={}),
        ),
        (
            [
                U("/loop clock"),
                CALL("clock"),
                RESULT("clock", "t"),
                CALL("clock", "call_2"),
                RESULT("clock", "t", "call_2"),
            ],
            ToolCall(id="call_3", name="clock", arguments={}),
        ),
        # calls made for an earlier user message do not count for this one
        (
            [U("/tool clock"), CALL("clock"), RESULT("clock", "t"), A("done"), U("/tool clock")],
            ToolCall(id="call_1", name="clock", arguments={}),
        ),
    ],
)
def test_tool_call(messages, call):
    resp = EchoModel().complete(messages, TOOLS)
    assert resp.message.tool_calls == (call,)
    assert resp.message.content == ""
    assert resp.finish_reason == "tool_calls"
    assert resp.model == "echo"


@pytest.mark.parametrize(
    "messages,tools,reply",
    [
        # /tool calls once, then replies (tool traffic not counted as history)
        (
            [U("/tool clock"), CALL("clock"), RESULT("clock", "noon")],
            TOOLS,
            "echo: /tool clock [history: 0]",
        ),
        # a tool the model was not given is never called
        ([U("/tool shell")], TOOLS, "echo: /tool shell [history: 0]"),
        ([U("/tool clock")], (), "echo: /tool clock [history: 0]"),
        ([U("/loop clock")], (), "echo: /loop clock [history: 0]"),
        # only the exact command words start a tool call
        ([U("/tools clock")], TOOLS, "echo: /tools clock [history: 0]"),
        ([U("please /tool clock")], TOOLS, "echo: please /tool clock [history: 0]"),
        ([U("/tool")], TOOLS, "echo: /tool [history: 0]"),
    ],
)
def test_no_tool_call(messages, tools, reply):
    resp = EchoModel().complete(messages, tools)
    assert resp.message.tool_calls == ()
    assert resp.message.content == reply
    assert resp.finish_reason == "stop"


def test_command_in_an_earlier_message_is_ignored():
    resp = EchoModel().complete([U("/loop clock"), A("x"), U("stop")], TOOLS)
    assert resp.message.content == "echo: stop [history: 2]"


def test_usage_counts_words():
    resp = EchoModel().complete([S("be brief"), U("hello there world")], TOOLS)
    assert resp.usage.prompt_tokens == 5
    assert resp.usage.completion_tokens == 3 + 3
    assert resp.usage.total_tokens == 11


@pytest.mark.parametrize("delay", [0, (0, 0)])
def test_zero_delay_is_deterministic(delay):
    model = EchoModel(delay, seed=1)
    first = model.complete([U("a"), A("b"), U("c")])
    second = model.complete([U("a"), A("b"), U("c")])
    assert first == second
    assert first.message.content == "echo: c [history: 2]"


def test_messages_are_not_modified():
    messages = [U("/tool clock")]
    EchoModel().complete(messages, TOOLS)
    assert messages == [U("/tool clock")]


def test_several_tool_lines_are_one_step_with_several_calls():

    tools = [ToolSpec(name="a"), ToolSpec(name="srv.b")]
    text = '/tool a {"x": 1}\n/tool srv.b'
    resp = EchoModel().complete([ChatMessage(role="user", content=text)], tools)
    assert [(c.id, c.name, c.arguments) for c in resp.message.tool_calls] == [
        ("call_1", "a", {"x": 1}),
        ("call_2", "srv.b", {}),
    ]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        # issue 33: one other line and it only echoed; now the /tool lines are called wherever
        # they stand, other lines (and a tool it was not given) are text
        ('/tool a {"x": 1}\nhello', [("a", {"x": 1})]),
        ('Look this up:\n/tool a {"x": 1}\nthanks', [("a", {"x": 1})]),
        ("first\n/tool a\nsecond\n  /tool srv.b {}  \nthird", [("a", {}), ("srv.b", {})]),
        ("/tool shell\n/tool a", [("a", {})]),
        ("please /tool a", []),  # a command starts its line
        ("just text\nmore", []),
        ("/loop a\nwhy not", [("a", {})]),
        ("/loop a\n/tool srv.b", []),  # a /loop is the only command of its text
    ],
)
def test_tool_lines_are_called_wherever_they_stand(text, calls):
    tools = [ToolSpec(name="a"), ToolSpec(name="srv.b")]
    resp = EchoModel().complete([ChatMessage(role="user", content=text)], tools)
    assert [(c.name, c.arguments) for c in resp.message.tool_calls] == calls
    if not calls:
        assert resp.message.content == f"echo: {text} [history: 0]"


def test_after_the_calls_it_replies_with_the_whole_text():
    text = "Look this up:\n/tool a"
    messages = [ChatMessage(role="user", content=text), CALL("a"), RESULT("a", "found")]
    resp = EchoModel().complete(messages, [ToolSpec(name="a")])
    assert resp.message.content == f"echo: {text} [history: 0]"
