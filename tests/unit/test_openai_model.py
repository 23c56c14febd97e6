"""OpenAIModel against a real loopback OpenAI-compatible server (no httpx mocking)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.agents.models.base import ChatMessage, ToolCall, ToolSpec, Usage
from fleet.agents.models.openai import OpenAIModel
from fleet.errors import ModelError
from tests.support.openai_server import FakeOpenAI, error_body, reply, tool_call

API_KEY = "sk-test-very-secret-4242"

MakeModel = Callable[..., OpenAIModel]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_model(server: FakeOpenAI, sleeps: list[float]) -> Iterator[MakeModel]:
    made: list[OpenAIModel] = []

    def make(**kw: Any) -> OpenAIModel:
        opts: dict[str, Any] = {
            "model": "gpt-test",
            "base_url": server.base_url,
            "timeout_s": 2.0,
            "sleep": sleeps.append,
        }
        opts.update(kw)
        m = OpenAIModel(**opts)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)]


def test_plain_reply_with_usage(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(
        body=reply("Paris.", model="gpt-test-0613", prompt_tokens=17, completion_tokens=3)
    )
    model = make_model(temperature=0.25)

    resp = model.complete(user("Capital of France?"))

    assert model.name == "openai:gpt-test"
    assert resp.message == ChatMessage(role="assistant", content="Paris.")
    assert resp.usage == Usage(prompt_tokens=17, completion_tokens=3)
    assert resp.model == "gpt-test-0613"
    assert resp.finish_reason == "stop"
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Capital of France?"},
        ],
        "temperature": 0.25,
    }
    assert "authorization" not in req.headers


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
    spec = ToolSpec(
        name="get_weather",
        description="Current weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    server.enqueue(body=tool_call("get_weather", {"city": "Oslo"}, "call_abc"))
    server.enqueue(body=reply("It is 3 °C in Oslo."))
    model = make_model()
    history = user("Weather in Oslo?")

    first = model.complete(history, tools=[spec])

    assert first.finish_reason == "tool_calls"
    assert first.message.content == ""
    assert first.message.tool_calls == (
        ToolCall(id="call_abc", name="get_weather", arguments={"city": "Oslo"}),
    )
    history += [
        first.message,
        ChatMessage(role="tool", tool_call_id="call_abc", name="get_weather", content="3 °C"),
    ]
    final = model.complete(history, tools=[spec])

    assert final.message.content == "It is 3 °C in Oslo."
    assert final.message.tool_calls == ()
    first_req, second_req = (r.body for r in server.requests)
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


def test_no_tools_key_when_no_tools(server: FakeOpenAI, make_model: MakeModel) -> None:
    make_model().complete(user("hi"), tools=())
    assert "tools" not in server.requests[0].body


def test_429_then_200_retries_once_honouring_retry_after(
    server: FakeOpenAI, make_model: MakeModel, sleeps: list[float]
) -> None:
    server.enqueue(
        status=429, body=error_body("Rate limit reached"), headers={"Retry-After": "1.5"}
    )
    server.enqueue(body=reply("done"))

    resp = make_model().complete(user("hi"))

    assert resp.message.content == "done"
    assert len(server.requests) == 2
    assert sleeps == [1.5]


def test_retry_after_is_capped_by_backoff_max(
    server: FakeOpenAI, make_model: MakeModel, sleeps: list[float]
) -> None:
    server.enqueue(status=429, headers={"Retry-After": "120"})
    make_model(backoff_max_s=2.0).complete(user("hi"))
    assert sleeps == [2.0]


def test_503_exhausts_retries(
    server: FakeOpenAI, make_model: MakeModel, sleeps: list[float]
) -> None:
    for _ in range(3):
        server.enqueue(status=503, body=error_body("The server is overloaded", "server_error"))
    server.enqueue(body=reply("too late"))  # must not be reached

    with pytest.raises(ModelError) as info:
        make_model(max_retries=2, backoff_base_s=0.5, backoff_max_s=8.0).complete(user("hi"))

    err = info.value
    msg = str(err)
    assert "HTTP 503" in msg
    assert "3 attempts" in msg
    assert "The server is overloaded" in msg
    assert f"{server.base_url}/chat/completions" in msg
    assert err.retryable is True
    assert err.status_code == 503
    assert len(server.requests) == 3
    assert server.pending() == 1
    # exponential backoff with jitter: attempt n waits in [base*2^(n-1)/2, base*2^(n-1)]
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5
    assert 0.5 <= sleeps[1] <= 1.0


def test_timeout_reports_timed_out(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body=reply("slow"), delay_s=5.0)

    with pytest.raises(ModelError) as info:
        make_model(timeout_s=0.2, max_retries=0).complete(user("hi"))

    assert "timed out after 0.2 s" in str(info.value)
    assert "1 attempt" in str(info.value)
    assert info.value.retryable is True
    assert info.value.status_code is None


def test_timeout_then_success_is_retried(
    server: FakeOpenAI, make_model: MakeModel, sleeps: list[float]
) -> None:
    server.enqueue(body=reply("slow"), delay_s=5.0)
    server.enqueue(body=reply("fast"))

    resp = make_model(timeout_s=0.2, max_retries=1).complete(user("hi"))

    assert resp.message.content == "fast"
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_connection_refused_is_retried_then_reported(sleeps: list[float]) -> None:
    with FakeOpenAI() as dead:
        url = dead.base_url
    model = OpenAIModel(model="m", base_url=url, max_retries=1, sleep=sleeps.append)
    try:
        with pytest.raises(ModelError) as info:
            model.complete(user("hi"))
    finally:
        model.close()
    assert "ConnectError" in str(info.value)
    assert "2 attempts" in str(info.value)
    assert len(sleeps) == 1


def test_400_is_not_retried(server: FakeOpenAI, make_model: MakeModel, sleeps: list[float]) -> None:
    server.enqueue(status=400, body=error_body("'messages' must contain at least one message"))

    with pytest.raises(ModelError) as info:
        make_model().complete(user("hi"))

    assert "HTTP 400" in str(info.value)
    assert "'messages' must contain at least one message" in str(info.value)
    assert info.value.retryable is False
    assert info.value.status_code == 400
    assert len(server.requests) == 1
    assert sleeps == []


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
    assert "Incorrect API key provided" in str(unauthorized.value)
    assert "check the API key" in str(unauthorized.value)
    assert "upstream saw key" in str(unavailable.value)
    for err in (unauthorized.value, unavailable.value):
        assert API_KEY not in str(err)
        assert API_KEY not in repr(err)
        assert API_KEY not in err.message


def test_invalid_tool_arguments_json(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body=tool_call("search", '{"query": "unterminated', "call_1"))

    with pytest.raises(ModelError) as info:
        make_model().complete(user("hi"), tools=[ToolSpec(name="search")])

    assert "'search'" in str(info.value)
    assert "invalid JSON arguments" in str(info.value)


def test_non_chat_completion_body(server: FakeOpenAI, make_model: MakeModel) -> None:
    server.enqueue(body={"object": "list", "data": []})
    with pytest.raises(ModelError, match="not a chat completion"):
        make_model().complete(user("hi"))
