"""AnthropicModel (official anthropic SDK) against a real loopback Messages API server."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.agents import models
from fleet.agents.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
from fleet.agents.models.base import UNPARSED_ARGUMENTS, ChatMessage, ToolCall, ToolSpec, Usage
from fleet.config import ModelConfig, Settings, load_config
from fleet.errors import ConfigError, ModelError
from tests.support.anthropic_server import FakeAnthropic, error_body, event, message, tool_use

API_KEY = "sk-ant-test-very-secret-4242"

MakeModel = Callable[..., AnthropicModel]

LOOKUP = ToolSpec(
    name="lookup_order",
    description="Find an order by number",
    parameters={"type": "object", "properties": {"number": {"type": "integer"}}},
)


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as srv:
        yield srv


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The SDK's waits between attempts, recorded instead of slept (so tests stay fast)."""
    recorded: list[float] = []
    monkeypatch.setattr(time, "sleep", recorded.append)
    return recorded


@pytest.fixture
def make_model(server: FakeAnthropic, waits: list[float]) -> Iterator[MakeModel]:
    made: list[AnthropicModel] = []

    def make(**kw: Any) -> AnthropicModel:
        opts: dict[str, Any] = {
            "model": "claude-test",
            "base_url": server.base_url,
            "timeout_s": 2.0,
        }
        opts.update(kw)
        m = AnthropicModel(**opts)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)]


def attempts(server: FakeAnthropic) -> list[str]:
    return [r.headers.get("x-stainless-retry-count", "?") for r in server.requests]


def test_plain_reply_system_and_usage(server: FakeAnthropic, make_model: MakeModel) -> None:
    body = message("Paris.", model="claude-test-20250101", input_tokens=17, output_tokens=3)
    body["usage"]["cache_read_input_tokens"] = 100
    server.enqueue(body=body)
    model = make_model()
    history = [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="system", content="Answer in English."),
        ChatMessage(role="user", content="Capital of France?"),
    ]

    resp = model.complete(history)

    assert model.name == "anthropic:claude-test"
    assert model.provider == "anthropic"
    assert resp.message == ChatMessage(role="assistant", content="Paris.")
    assert resp.usage == Usage(prompt_tokens=117, completion_tokens=3)
    assert resp.model == "claude-test-20250101"
    assert resp.finish_reason == "stop"
    assert resp.provider == "anthropic"
    [req] = server.requests
    assert req.path == "/v1/messages"
    assert req.body == {
        "model": "claude-test",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "system": "You are terse.\n\nAnswer in English.",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "stream": True,
    }
    assert "anthropic-version" in req.headers
    assert "authorization" not in req.headers  # no key configured: none sent
    assert "x-api-key" not in req.headers


def test_max_tokens_from_config(server: FakeAnthropic, make_model: MakeModel) -> None:
    make_model(max_tokens=256).complete(user("hi"))
    assert server.bodies()[0]["max_tokens"] == 256


def test_tool_use_round_trip(server: FakeAnthropic, make_model: MakeModel) -> None:
    server.enqueue(body=tool_use("lookup_order", {"number": 1234}, "toolu_01", text="Checking."))
    server.enqueue(body=message("Order 1234 shipped yesterday."))
    model = make_model()
    history = user("Where is order 1234?")

    first = model.complete(history, tools=[LOOKUP])

    assert first.finish_reason == "tool_calls"
    assert first.message.content == "Checking."
    assert first.message.tool_calls == (
        ToolCall(id="toolu_01", name="lookup_order", arguments={"number": 1234}),
    )
    history += [
        first.message,
        ChatMessage(role="tool", tool_call_id="toolu_01", name="lookup_order", content="shipped"),
    ]
    final = model.complete(history, tools=[LOOKUP])

    assert final.message == ChatMessage(role="assistant", content="Order 1234 shipped yesterday.")
    first_req, second_req = server.bodies()
    assert first_req["tools"] == [
        {
            "name": "lookup_order",
            "description": "Find an order by number",
            "input_schema": {"type": "object", "properties": {"number": {"type": "integer"}}},
        }
    ]
    assert second_req["system"] == "be brief"
    assert second_req["messages"] == [
        {"role": "user", "content": "Where is order 1234?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "lookup_order",
                    "input": {"number": 1234},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "shipped"}],
        },
    ]


def test_consecutive_tool_results_are_one_user_message(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    asked = ChatMessage(
        role="assistant",
        tool_calls=(
            ToolCall(id="toolu_a", name="lookup_order", arguments={"number": 1}),
            ToolCall(id="toolu_b", name="lookup_order", arguments={"number": 2}),
        ),
    )
    history = [
        *user("Orders 1 and 2?"),
        asked,
        ChatMessage(role="tool", tool_call_id="toolu_a", content="shipped"),
        ChatMessage(role="tool", tool_call_id="toolu_b", content="lost"),
        ChatMessage(role="user", content="And now?"),
    ]

    make_model().complete(history, tools=[LOOKUP])

    sent = server.bodies()[0]["messages"]
    assert sent[1]["content"] == [  # no empty text block before the calls
        {"type": "tool_use", "id": "toolu_a", "name": "lookup_order", "input": {"number": 1}},
        {"type": "tool_use", "id": "toolu_b", "name": "lookup_order", "input": {"number": 2}},
    ]
    assert sent[2:] == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "shipped"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "lost"},
            ],
        },
        {"role": "user", "content": "And now?"},
    ]


def test_an_empty_assistant_reply_is_left_out(server: FakeAnthropic, make_model: MakeModel) -> None:
    history = [*user("hi"), ChatMessage(role="assistant", content=""), *user("again")[1:]]
    make_model().complete(history)
    assert server.bodies()[0]["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "again"},
    ]


def test_a_missing_tool_result_is_the_servers_400(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    asked = ChatMessage(role="assistant", tool_calls=(ToolCall(id="toolu_x", name="f"),))

    with pytest.raises(ModelError) as info:
        make_model().complete([*user("hi"), asked, ChatMessage(role="user", content="?")])

    assert "rejected with HTTP 400" in str(info.value)
    assert "toolu_x" in str(info.value)
    assert info.value.retryable is False


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),  # no port word for it: passed through
    ],
)
def test_stop_reason_maps_to_finish_reason(
    server: FakeAnthropic, make_model: MakeModel, stop_reason: str, finish_reason: str
) -> None:
    server.enqueue(body=message("x", stop_reason=stop_reason))
    assert make_model().complete(user("hi")).finish_reason == finish_reason


def test_input_that_is_not_an_object_stays_unparsed(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    server.enqueue(body=tool_use("lookup_order", [1, 2], "toolu_1"))
    [call] = make_model().complete(user("hi"), tools=[LOOKUP]).message.tool_calls
    assert call.arguments == {UNPARSED_ARGUMENTS: "[1, 2]"}
    assert call.unparsed == "[1, 2]"


def test_429_then_200_honours_retry_after(
    server: FakeAnthropic, make_model: MakeModel, waits: list[float]
) -> None:
    server.enqueue(status=429, headers={"retry-after": "2"})
    server.enqueue(body=message("done"))

    assert make_model().complete(user("hi")).message.content == "done"
    assert attempts(server) == ["0", "1"]
    assert waits == [2.0]


def test_overloaded_529_is_retried(
    server: FakeAnthropic, make_model: MakeModel, waits: list[float]
) -> None:
    server.enqueue(status=529, headers={"retry-after-ms": "40"})
    server.enqueue(status=529, headers={"retry-after-ms": "40"})

    assert make_model().complete(user("hi")).message.content == "echo: hi"
    assert attempts(server) == ["0", "1", "2"]
    assert waits == [0.04, 0.04]


def test_overloaded_until_retries_run_out(
    server: FakeAnthropic, make_model: MakeModel, waits: list[float]
) -> None:
    for _ in range(2):
        server.enqueue(status=529, body=error_body("Overloaded", "overloaded_error"))

    with pytest.raises(ModelError) as info:
        make_model(max_retries=1).complete(user("hi"))

    msg = str(info.value)
    assert msg.startswith("anthropic:claude-test: POST ")
    assert "/v1/messages failed after 2 attempts: HTTP 529: Overloaded" in msg
    assert info.value.retryable is True
    assert info.value.status_code == 529
    assert len(server.requests) == 2


def test_timeout_is_readable(server: FakeAnthropic, make_model: MakeModel) -> None:
    server.hang()
    server.hang()

    with pytest.raises(ModelError) as info:
        make_model(timeout_s=0.2, max_retries=1).complete(user("hi"))

    assert "timed out after 0.2 s (after 2 attempts)" in str(info.value)
    assert info.value.retryable is True
    assert len(server.requests) == 2


def test_401_is_readable_and_never_shows_the_key(
    server: FakeAnthropic, make_model: MakeModel, waits: list[float]
) -> None:
    server.enqueue(
        status=401, body=error_body(f"invalid x-api-key {API_KEY}", "authentication_error")
    )

    with pytest.raises(ModelError) as info:
        make_model(api_key=API_KEY).complete(user("hi"))

    err = info.value
    assert "rejected with HTTP 401: invalid x-api-key ***" in str(err)
    assert "check the API key (FLEET_ANTHROPIC_API_KEY)" in str(err)
    assert err.status_code == 401
    assert err.retryable is False
    assert API_KEY not in repr(err)
    assert err.__cause__ is None
    assert waits == []
    sent = server.requests[0].headers
    assert API_KEY in sent.get("x-api-key", "") + sent.get("authorization", "")


def test_an_event_without_its_fields_is_unreadable(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    server.stream([event({"type": "content_block_start", "index": 0})])  # no content_block
    with pytest.raises(ModelError, match="not a Messages API stream event") as info:
        make_model().complete(user("hi"))
    assert info.value.retryable is False


def test_a_stream_of_something_else_is_cut_short(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    server.enqueue(body={"type": "something_else"})  # an event type fleet passes over
    with pytest.raises(ModelError, match="the stream ended before the model finished") as info:
        make_model(max_retries=0).complete(user("hi"))
    assert info.value.retryable is True


# -- config and build --------------------------------------------------------------------


def test_build_uses_the_anthropic_settings(server: FakeAnthropic, waits: list[float]) -> None:
    settings = Settings(anthropic_base_url=server.base_url, anthropic_api_key=API_KEY)
    cfg = ModelConfig(provider="anthropic", name="claude-test", max_tokens=100, max_retries=0)

    model = models.build(cfg, settings)

    assert isinstance(model, AnthropicModel)
    assert models.provider_of(model) == "anthropic"
    assert model.complete(user("hi")).message.content == "echo: hi"
    model.close()
    assert server.bodies()[0]["max_tokens"] == 100
    assert API_KEY in settings.secrets()


def test_settings_read_the_anthropic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("FLEET_ANTHROPIC_BASE_URL", "http://proxy.internal:4000")
    settings = Settings()
    assert settings.anthropic_base_url == "http://proxy.internal:4000"
    assert API_KEY in settings.secrets()
    assert API_KEY not in repr(settings)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({}, "provider 'anthropic' needs name"),
        ({"name": "claude", "temperature": 0.2}, "'anthropic' takes none"),
        ({"name": "claude", "max_tokens": 0}, "greater than or equal to 1"),
    ],
)
def test_model_config_refuses(fields: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ModelConfig(provider="anthropic", **fields)


def _agent(root: Path, body: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    path = root / "agents" / "claude.toml"
    path.write_text(body)
    return path


def test_anthropic_without_the_package_fails_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _agent(tmp_path, '[model]\nprovider = "anthropic"\nname = "claude-test"\n')
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if not installed

    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)

    assert info.value.file == str(path)
    assert info.value.key == "model.provider"
    assert "pip install 'fleet[anthropic]'" in info.value.reason


def test_anthropic_agent_loads_with_the_package(tmp_path: Path) -> None:
    _agent(tmp_path, 'model = "anthropic"\n')
    with pytest.raises(ConfigError, match="needs name"):
        load_config(tmp_path)
    (tmp_path / "agents" / "claude.toml").write_text(
        '[model]\nprovider = "anthropic"\nname = "claude-test"\nmax_tokens = 2048\n'
    )
    agent = load_config(tmp_path).agents["claude"]
    assert (agent.model.provider, agent.model.max_tokens) == ("anthropic", 2048)


def test_namespaced_tool_names_are_sent_in_the_apis_alphabet(
    server: FakeAnthropic, make_model: MakeModel
) -> None:
    spec = ToolSpec(name="github.search", description="Search", parameters={"type": "object"})
    server.enqueue(body=tool_use("github__search", {"q": "x"}, "toolu_9"))
    server.enqueue(body=message("done"))
    model = make_model()
    first = model.complete([ChatMessage(role="user", content="find")], tools=[spec])
    assert first.message.tool_calls[0].name == "github.search"
    history = [
        ChatMessage(role="user", content="find"),
        first.message,
        ChatMessage(role="tool", tool_call_id="toolu_9", name="github.search", content="1 hit"),
    ]
    model.complete(history, tools=[spec])
    first_req, second_req = server.bodies()
    assert first_req["tools"][0]["name"] == "github__search"
    assert second_req["messages"][1]["content"][0]["name"] == "github__search"
