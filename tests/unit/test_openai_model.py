"""OpenAIModel (official openai SDK) against a real loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.agents import models
from fleet.agents.models.base import UNPARSED_ARGUMENTS, ChatMessage, ToolCall, ToolSpec, Usage
from fleet.agents.models.openai import OpenAIModel
from fleet.config import ModelConfig, Settings
from fleet.errors import ModelError
from tests.support.openai_server import FakeOpenAI, error_body, reply, tool_call

API_KEY = "sk-test-very-secret-4242"

MakeModel = Callable[..., OpenAIModel]

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's waits between attempts, recorded instead of slept (so tests stay fast)."""
    recorded: list[float] = []
    monkeypatch.setattr(time, "sleep", recorded.append)
    return recorded


@pytest.fixture
def make_model(server: FakeOpenAI, waits: list[float]) -> Iterator[MakeModel]:
    made: list[OpenAIModel] = []

    def make(**kw: Any) -> OpenAIModel:
        opts: dict[str, Any] = {"model": "gpt-test", "base_url": server.base_url, "timeout_s": 2.0}
        opts.update(kw)
        m = OpenAIModel(**opts)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)]


def attempts(server: FakeOpenAI) -> list[str]:
    """The SDK's retry counter of each request the server received."""
    return [r.headers.get("x-stainless-retry-count", "?") for r in server.requests]


def test_plain_reply_with_usage(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(
        body=reply("Paris.", model="gpt-test-0613", prompt_tokens=17, completion_tokens=3)
    )
    model = make_model(temperature=0.25, max_tokens=64)

    resp = model.complete(user("Capital of France?"))

    assert model.name == "openai:gpt-test"
    assert model.provider == "openai"
    assert resp.message == ChatMessage(role="assistant", content="Paris.")
    assert resp.usage == Usage(prompt_tokens=17, completion_tokens=3)
    assert resp.model == "gpt-test-0613"
    assert resp.finish_reason == "stop"
    assert resp.provider == "openai"
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Capital of France?"},
        ],
        "temperature": 0.25,
        "max_completion_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "authorization" not in req.headers  # no key configured: none sent


def test_missing_usage_counts_as_zero(server: FakeOpenAI, make_model: MakeModel) -> None:
    body = reply("ok")
    del body["usage"]
    server.enqueue(body=body)
    assert make_model().complete(user("hi")).usage == Usage(prompt_tokens=0, completion_tokens=0)


def test_empty_script_echoes_last_user_message(server: FakeOpenAI, make_model: MakeModel) -> None:
    resp = make_model().complete(user("hello there"))
    assert resp.message.content == "echo: hello there"
    assert resp.model == "gpt-test"
    assert resp.usage.completion_tokens == 3


def test_tool_call_round_trip(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body=tool_call("get_weather", {"city": "Oslo"}, "call_abc"))
    server.enqueue(body=reply("It is 3 °C in Oslo."))
    model = make_model()
    history = user("Weather in Oslo?")

    first = model.complete(history, tools=[WEATHER])

    assert first.finish_reason == "tool_calls"
    assert first.message.content == ""
    assert first.message.tool_calls == (
        ToolCall(id="call_abc", name="get_weather", arguments={"city": "Oslo"}),
    )
    history += [
        first.message,
        ChatMessage(role="tool", tool_call_id="call_abc", name="get_weather", content="3 °C"),
    ]
    final = model.complete(history, tools=[WEATHER])

    assert final.message.content == "It is 3 °C in Oslo."
    assert final.message.tool_calls == ()
    first_req, second_req = server.bodies()
    assert first_req["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert first_req["tool_choice"] == "auto"
    assert second_req["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": "3 °C"},
    ]


def test_parallel_tool_calls_each_answered(server: FakeOpenAI, make_model: MakeModel) -> None:
    body = tool_call("get_weather", {"city": "Oslo"}, "call_1")
    second = {**body["choices"][0]["message"]["tool_calls"][0], "id": "call_2"}
    second["function"] = {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    body["choices"][0]["message"]["tool_calls"].append(second)
    body["choices"][0]["message"]["content"] = "Looking both up."
    server.enqueue(body=body)
    model = make_model()

    first = model.complete(user("Oslo and Rome?"), tools=[WEATHER])
    assert [c.arguments for c in first.message.tool_calls] == [{"city": "Oslo"}, {"city": "Rome"}]
    answers = [
        ChatMessage(role="tool", tool_call_id=c.id, name=c.name, content=f"{i} °C")
        for i, c in enumerate(first.message.tool_calls)
    ]
    model.complete([*user("Oslo and Rome?"), first.message, *answers], tools=[WEATHER])

    sent = server.bodies()[1]["messages"][2:]
    assert sent[0]["content"] == "Looking both up."
    assert [c["id"] for c in sent[0]["tool_calls"]] == ["call_1", "call_2"]
    assert sent[1:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "0 °C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "1 °C"},
    ]


def test_an_unanswered_tool_call_is_the_servers_400(
    server: FakeOpenAI, make_model: MakeModel
) -> None:
    server.enqueue(body=tool_call("get_weather", {"city": "Oslo"}, "call_abc"))
    model = make_model()
    first = model.complete(user("Weather?"), tools=[WEATHER])

    with pytest.raises(ModelError) as info:
        model.complete([*user("Weather?"), first.message, *user("and?")], tools=[WEATHER])

    assert "HTTP 400" in str(info.value)
    assert "call_abc" in str(info.value)
    assert info.value.retryable is False


def test_no_tools_key_when_no_tools(server: FakeOpenAI, make_model: MakeModel) -> None:
    make_model().complete(user("hi"), tools=())
    assert "tools" not in server.bodies()[0]
    assert "tool_choice" not in server.bodies()[0]


def test_429_then_200_retries_once_honouring_retry_after(
    server: FakeOpenAI, make_model: MakeModel, waits: list[float]
) -> None:
    server.enqueue(
        status=429, body=error_body("Rate limit reached"), headers={"Retry-After": "1.5"}
    )
    server.enqueue(body=reply("done"))

    resp = make_model().complete(user("hi"))

    assert resp.message.content == "done"
    assert attempts(server) == ["0", "1"]
    assert waits == [1.5]


def test_retry_after_ms_is_preferred(
    server: FakeOpenAI, make_model: MakeModel, waits: list[float]
) -> None:
    server.enqueue(status=500, headers={"retry-after-ms": "250", "Retry-After": "9"})
    server.enqueue(status=502, headers={"retry-after-ms": "5"})

    assert make_model().complete(user("hi")).message.content == "echo: hi"
    assert attempts(server) == ["0", "1", "2"]
    assert waits == [0.25, 0.005]


def test_503_exhausts_retries(
    server: FakeOpenAI, make_model: MakeModel, waits: list[float]
) -> None:
    for _ in range(3):
        server.enqueue(status=503, body=error_body("The server is overloaded", "server_error"))
    server.enqueue(body=reply("too late"))  # must not be reached

    with pytest.raises(ModelError) as info:
        make_model(max_retries=2).complete(user("hi"))

    err = info.value
    msg = str(err)
    assert "HTTP 503" in msg
    assert "after 3 attempts" in msg
    assert "The server is overloaded" in msg
    assert f"POST {server.base_url}/chat/completions" in msg
    assert "raise model.max_retries" in msg
    assert err.retryable is True
    assert err.status_code == 503
    assert attempts(server) == ["0", "1", "2"]
    assert server.pending() == 1
    assert len(waits) == 2  # no Retry-After: the SDK's own backoff between the three attempts


def test_timeout_reports_timed_out(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.hang()

    with pytest.raises(ModelError) as info:
        make_model(timeout_s=0.2, max_retries=0).complete(user("hi"))

    assert "timed out after 0.2 s (after 1 attempt)" in str(info.value)
    assert "raise model.timeout" in str(info.value)
    assert info.value.retryable is True
    assert info.value.status_code is None
    assert len(server.requests) == 1


def test_timeout_then_success_is_retried(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.hang()
    server.enqueue(body=reply("fast"))

    resp = make_model(timeout_s=0.2, max_retries=1).complete(user("hi"))

    assert resp.message.content == "fast"
    assert attempts(server) == ["0", "1"]


def test_connection_refused_is_retried_then_reported(waits: list[float]) -> None:
    with FakeOpenAI() as dead:
        url = dead.base_url.replace("://", "://bob:hunter2@")
    model = OpenAIModel(model="m", base_url=url, max_retries=1)
    try:
        with pytest.raises(ModelError) as info:
            model.complete(user("hi"))
    finally:
        model.close()
    assert "ConnectError" in str(info.value)
    assert "after 2 attempts" in str(info.value)
    assert "check base_url" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert len(waits) == 1


def test_400_is_not_retried(server: FakeOpenAI, make_model: MakeModel, waits: list[float]) -> None:
    server.enqueue(status=400, body=error_body("'messages' must contain at least one message"))

    with pytest.raises(ModelError) as info:
        make_model().complete(user("hi"))

    assert "rejected with HTTP 400" in str(info.value)
    assert "'messages' must contain at least one message" in str(info.value)
    assert "retrying will not help" in str(info.value)
    assert info.value.retryable is False
    assert info.value.status_code == 400
    assert len(server.requests) == 1
    assert waits == []


def test_non_json_error_body_is_excerpted(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(status=502, body="<html>Bad Gateway from upstream proxy</html>" + "x" * 500)
    with pytest.raises(ModelError) as info:
        make_model(max_retries=0).complete(user("hi"))
    msg = str(info.value)
    assert "HTTP 502: <html>Bad Gateway from upstream proxy</html>" in msg
    assert "x" * 300 not in msg


def test_api_key_sent_as_bearer_and_never_in_errors(
    server: FakeOpenAI, make_model: MakeModel
) -> None:
    server.enqueue(body=reply("ok"))
    server.enqueue(status=401, body=error_body(f"Incorrect API key provided: {API_KEY}."))
    server.enqueue(status=503, body=f"upstream saw key {API_KEY}")
    model = make_model(api_key=API_KEY, max_retries=0)

    model.complete(user("hi"))
    with pytest.raises(ModelError) as unauthorized:
        model.complete(user("hi"))
    with pytest.raises(ModelError) as unavailable:
        model.complete(user("hi"))

    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert "HTTP 401: Incorrect API key provided" in str(unauthorized.value)
    assert "check the API key (FLEET_OPENAI_API_KEY)" in str(unauthorized.value)
    assert unauthorized.value.status_code == 401
    assert "upstream saw key" in str(unavailable.value)
    for err in (unauthorized.value, unavailable.value):
        assert API_KEY not in str(err)
        assert API_KEY not in repr(err)
        assert API_KEY not in err.message
        assert err.__cause__ is None  # the SDK's exception (which holds the body) is not chained


@pytest.mark.parametrize("raw", ['{"query": "unterminated', "[1, 2]", '"just text"'])
def test_arguments_that_are_not_a_json_object_stay_unparsed(
    server: FakeOpenAI, make_model: MakeModel, raw: str
) -> None:
    server.enqueue(body=tool_call("search", raw, "call_1"))
    model = make_model()

    resp = model.complete(user("hi"), tools=[ToolSpec(name="search")])

    [call] = resp.message.tool_calls
    assert call.arguments == {UNPARSED_ARGUMENTS: raw}
    assert call.unparsed == raw
    # the runner answers the call (the arguments fail validation); the model sees its own text
    answer = ChatMessage(role="tool", tool_call_id="call_1", content="invalid arguments")
    model.complete([*user("hi"), resp.message, answer], tools=[ToolSpec(name="search")])
    sent = server.bodies()[1]["messages"][2]["tool_calls"][0]["function"]
    assert sent == {"name": "search", "arguments": raw}


def test_empty_arguments_are_an_empty_object(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body=tool_call("current_time", "", "call_1"))
    resp = make_model().complete(user("now?"), tools=[ToolSpec(name="current_time")])
    [call] = resp.message.tool_calls
    assert call.arguments == {}
    assert call.unparsed is None


def test_non_chat_completion_body(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body={"object": "list", "data": []})
    with pytest.raises(ModelError, match="not a chat completion"):
        make_model().complete(user("hi"))


def test_tool_message_without_call_id_is_refused_before_sending(
    server: FakeOpenAI, make_model: MakeModel
) -> None:
    orphan = ChatMessage(role="tool", name="search", content="x")
    with pytest.raises(ModelError, match="'search' has no tool_call_id"):
        make_model().complete([*user("hi"), orphan])
    assert server.requests == []


def test_build_uses_the_settings_key_and_base_url(server: FakeOpenAI, waits: list[float]) -> None:
    settings = Settings(openai_base_url=server.base_url, openai_api_key=API_KEY)
    cfg = ModelConfig(provider="openai", name="gpt-test", max_retries=0, timeout="5s")

    model = models.build(cfg, settings)

    assert isinstance(model, OpenAIModel)
    assert models.provider_of(model) == "openai"
    model.complete(user("hi"))
    model.close()
    [req] = server.requests
    assert req.headers["authorization"] == f"Bearer {API_KEY}"
    assert json.loads(req.headers["x-stainless-read-timeout"]) == 5


def test_namespaced_tool_names_are_sent_in_the_apis_alphabet(
    server: FakeOpenAI, make_model: MakeModel
) -> None:
    spec = ToolSpec(name="github.search", description="Search", parameters={"type": "object"})
    server.enqueue(body=tool_call("github__search", {"q": "x"}, "call_9"))
    server.enqueue(body=reply("done"))
    model = make_model()
    first = model.complete(user("find"), tools=[spec])
    assert first.message.tool_calls[0].name == "github.search"  # fleet's name comes back
    history = [
        *user("find"),
        first.message,
        ChatMessage(role="tool", tool_call_id="call_9", name="github.search", content="1 hit"),
    ]
    model.complete(history, tools=[spec])
    first_req, second_req = server.bodies()
    assert first_req["tools"][0]["function"]["name"] == "github__search"
    assert second_req["messages"][2]["tool_calls"][0]["function"]["name"] == "github__search"
