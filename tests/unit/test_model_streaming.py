"""Streaming model calls: the OpenAI and Anthropic adapters against loopback servers that stream
server-sent events, the echo model, and a managed model's listener through retries and
fallbacks. The text told to a listener always joins into the reply; a listener that raises
ends the call at once; a stream that breaks off returns nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.agents import models
from fleet.agents.capacity import LocalCapacity
from fleet.agents.models.anthropic import AnthropicModel
from fleet.agents.models.base import (
    ChatMessage,
    ModelResponse,
    Stopped,
    ToolCall,
    ToolSpec,
    Usage,
    streams,
)
from fleet.agents.models.echo import EchoModel, words
from fleet.agents.models.openai import OpenAIModel
from fleet.agents.models.traffic import Candidate, ManagedModel
from fleet.config import ModelConfig, Settings
from fleet.errors import ModelError
from tests.support.anthropic_server import FakeAnthropic, event, message, tool_use
from tests.support.fleet import wait_for
from tests.support.openai_server import DONE, FakeOpenAI, chunk, reply, sse

HELLO = [ChatMessage(role="user", content="hello")]
WEATHER = ToolSpec(name="get_weather", parameters={"type": "object"})
SEARCH = ToolSpec(name="github.search", parameters={"type": "object"})


class Interrupted(Exception):
    """What a listener raises when the run must stop."""


class Heard:
    """A listener that records what it is told; raises Interrupted at text number ``stop_at``
    (1 = the first), or ``error`` when given."""

    def __init__(self, stop_at: int | None = None, error: Exception | None = None) -> None:
        self.told: list[tuple[str, str]] = []
        self._stop_at = stop_at
        self._error = error

    def text(self, chunk: str) -> None:
        self.told.append(("text", chunk))
        if self._stop_at is not None and len(self.texts) >= self._stop_at:
            raise self._error or Interrupted("the run must stop")

    def reset(self) -> None:
        self.told.append(("reset", ""))

    @property
    def texts(self) -> list[str]:
        return [c for kind, c in self.told if kind == "text"]

    @property
    def resets(self) -> int:
        return sum(1 for kind, _ in self.told if kind == "reset")

    def since_reset(self) -> str:
        """The text told after the last reset."""
        last = max((i for i, (kind, _) in enumerate(self.told) if kind == "reset"), default=-1)
        return "".join(c for kind, c in self.told[last + 1 :] if kind == "text")


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """Closes what a test made (the SDK clients) after it."""
    made: list[Any] = []

    def close_later(thing: Any) -> Any:
        made.append(thing)
        return thing

    yield close_later
    for thing in made:
        thing.close()


@pytest.fixture
def gpt(openai_server: FakeOpenAI, closing: Callable[[Any], Any]) -> Callable[..., OpenAIModel]:
    def make(**kw: Any) -> OpenAIModel:
        opts: dict[str, Any] = {
            "model": "gpt-test",
            "base_url": openai_server.base_url,
            "timeout_s": 2.0,
            "max_retries": 0,
        }
        return closing(OpenAIModel(**{**opts, **kw}))

    return make


@pytest.fixture
def claude(
    anthropic_server: FakeAnthropic, closing: Callable[[Any], Any]
) -> Callable[..., AnthropicModel]:
    def make(**kw: Any) -> AnthropicModel:
        opts: dict[str, Any] = {
            "model": "claude-test",
            "base_url": anthropic_server.base_url,
            "timeout_s": 2.0,
            "max_retries": 0,
        }
        return closing(AnthropicModel(**{**opts, **kw}))

    return make


def failure(call: Callable[[], ModelResponse]) -> ModelError:
    with pytest.raises(ModelError) as caught:
        call()
    return caught.value


def test_every_adapter_streams() -> None:
    assert streams(EchoModel(stream_ms=1)) and not streams(EchoModel()), "instant echo: whole"
    assert OpenAIModel.streams is True and AnthropicModel.streams is True
    assert not streams(object())


# -- OpenAI --------------------------------------------------------------------------------


def test_openai_text_comes_in_chunks_that_join_into_the_reply(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.enqueue(
        body=reply("The capital of France is Paris.", prompt_tokens=17, completion_tokens=7)
    )
    heard = Heard()

    resp = gpt().complete(HELLO, listen=heard)

    assert len(heard.texts) == 6
    assert "".join(heard.texts) == resp.message.content == "The capital of France is Paris."
    assert heard.resets == 0
    assert resp.usage == Usage(prompt_tokens=17, completion_tokens=7)
    assert (resp.finish_reason, resp.model, resp.provider) == ("stop", "fake-model", "openai")
    body = openai_server.bodies()[0]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


def test_openai_without_a_listener_returns_the_same_reply(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.enqueue(body=reply("Paris, of course."))
    assert gpt().complete(HELLO).message.content == "Paris, of course."


def test_openai_a_stream_without_usage_counts_zero(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream(
        [sse(chunk({"role": "assistant", "content": "Hi"})), sse(chunk({}, "stop")), DONE]
    )
    resp = gpt().complete(HELLO)
    assert resp.usage == Usage(prompt_tokens=0, completion_tokens=0)
    assert resp.message.content == "Hi"


def test_openai_tool_calls_are_put_together_from_their_deltas(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    def call(index: int, **fields: Any) -> str:
        return sse(chunk({"tool_calls": [{"index": index, **fields}]}))

    start = {"type": "function", "function": {"name": "get_weather", "arguments": ""}}
    openai_server.stream(
        [
            sse(chunk({"role": "assistant", "content": None})),
            call(0, id="call_a", **start),
            call(0, function={"arguments": '{"ci'}),
            call(1, id="call_b", type="function", function={"name": "github__search"}),
            call(0, function={"arguments": 'ty": "Os'}),
            call(1, function={"arguments": '{"q": "fleet"}'}),
            call(0, function={"arguments": 'lo"}'}),
            sse(chunk({}, "tool_calls")),
            sse(chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42})),
            DONE,
        ]
    )
    heard = Heard()

    resp = gpt().complete(HELLO, tools=[WEATHER, SEARCH], listen=heard)

    assert resp.message.tool_calls == (
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(id="call_b", name="github.search", arguments={"q": "fleet"}),
    )
    assert resp.message.content == "" and heard.told == []  # no text: nothing told
    assert resp.finish_reason == "tool_calls"
    assert resp.usage == Usage(prompt_tokens=30, completion_tokens=12)


def test_openai_tool_call_deltas_without_an_index_follow_their_ids(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream(
        [
            sse(chunk({"tool_calls": [{"id": "c1", "function": {"name": "get_weather"}}]})),
            sse(chunk({"tool_calls": [{"function": {"arguments": '{"city": "Rome"}'}}]})),
            sse(chunk({"tool_calls": [{"id": "c2", "function": {"name": "get_weather"}}]})),
            sse(chunk({}, "tool_calls")),
        ]
    )
    calls = gpt().complete(HELLO, tools=[WEATHER]).message.tool_calls
    assert [(c.id, c.arguments) for c in calls] == [("c1", {"city": "Rome"}), ("c2", {})]


def test_openai_a_data_line_that_is_not_json_is_a_model_error(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream([sse(chunk({"content": "Hel"})), "data: {not json\n\n", DONE])
    heard = Heard()
    err = failure(lambda: gpt().complete(HELLO, listen=heard))
    assert "not JSON" in err.message and "{not json" in err.message
    assert err.message.startswith("openai:gpt-test: ")
    assert (err.retryable, err.action) == (False, "fail")
    assert heard.texts == ["Hel"]


def test_openai_a_chunk_without_choices_is_unreadable(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream([sse({"object": "list", "data": []}), DONE])
    err = failure(lambda: gpt().complete(HELLO))
    assert "not a chat completion chunk" in err.message
    assert err.action == "fail"


@pytest.mark.parametrize("done", [True, False], ids=["with-done", "without-done"])
def test_openai_a_stream_that_ends_before_the_finish_is_retryable(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel], done: bool
) -> None:
    frames = [
        sse(chunk({"role": "assistant", "content": "The capital"})),
        sse(chunk({"content": " is"})),
    ]
    openai_server.stream([*frames, DONE] if done else frames)
    heard = Heard()

    err = failure(lambda: gpt().complete(HELLO, listen=heard))

    assert "the stream ended before the model finished (no finish_reason)" in err.message
    assert f"POST {openai_server.base_url}/chat/completions" in err.message
    assert (err.retryable, err.action, err.status_code) == (True, "switch", None)
    assert heard.texts == ["The capital", " is"]


def test_openai_a_connection_dropped_mid_stream_is_a_connection_failure(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream(
        [sse(chunk({"content": "Hel"})), sse(chunk({"content": "lo"}))], ending="drop"
    )
    err = failure(lambda: gpt().complete(HELLO))
    assert "check base_url" in err.message  # as a refused connection: _send's words
    assert (err.retryable, err.action) == (True, "switch")


def test_openai_a_stream_that_stalls_times_out(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream([sse(chunk({"content": "Hel"})), sse(chunk({}, "stop"))], gap_s=2.0)
    t0 = time.monotonic()
    err = failure(lambda: gpt(timeout_s=0.3).complete(HELLO))
    assert time.monotonic() - t0 < 1.5
    assert "timed out after 0.3 s" in err.message
    assert (err.retryable, err.action) == (True, "switch")


def test_openai_an_error_event_mid_stream_is_sorted_by_its_type(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    failed = {"error": {"message": "The server had an error", "type": "server_error"}}
    openai_server.stream([sse(chunk({"content": "Hel"})), sse(failed)])
    err = failure(lambda: gpt().complete(HELLO))
    assert "broke off mid-stream: server_error: The server had an error" in err.message
    assert (err.retryable, err.action, err.status_code) == (True, "switch", 500)


def test_openai_a_listener_that_raises_ends_the_call_and_closes_the_connection(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    frames = [sse(chunk({"content": w})) for w in ("one ", "two ", "three ")]
    openai_server.stream(frames, ending="hold")  # never ends by itself
    heard = Heard(stop_at=2)
    model = gpt()

    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        model.complete(HELLO, listen=heard)

    assert time.monotonic() - t0 < 1.0
    assert heard.texts == ["one ", "two "]
    assert openai_server.wait_hangup(2.0)  # the HTTP response was closed
    openai_server.enqueue(body=reply("again"))
    assert model.complete(HELLO).message.content == "again"  # the client still works


# -- Anthropic -----------------------------------------------------------------------------


def test_anthropic_text_comes_in_chunks_that_join_into_the_reply(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    body = message("Paris is the capital.", input_tokens=17, output_tokens=6)
    body["usage"]["cache_read_input_tokens"] = 100
    anthropic_server.enqueue(body=body)
    heard = Heard()

    resp = claude().complete(HELLO, listen=heard)

    assert len(heard.texts) == 4
    assert "".join(heard.texts) == resp.message.content == "Paris is the capital."
    assert resp.usage == Usage(prompt_tokens=117, completion_tokens=6)
    assert (resp.finish_reason, resp.model, resp.provider) == ("stop", "claude-fake", "anthropic")
    assert anthropic_server.bodies()[0]["stream"] is True


def test_anthropic_tool_input_is_put_together_from_its_json_deltas(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    anthropic_server.enqueue(
        body=tool_use(
            "github__search", {"q": "fleet streaming", "n": 3}, "toolu_9", text="Looking."
        )
    )
    heard = Heard()

    resp = claude().complete(HELLO, tools=[SEARCH], listen=heard)

    assert resp.message.tool_calls == (
        ToolCall(id="toolu_9", name="github.search", arguments={"q": "fleet streaming", "n": 3}),
    )
    assert "".join(heard.texts) == resp.message.content == "Looking."
    assert resp.finish_reason == "tool_calls"


def test_anthropic_usage_of_message_delta_replaces_the_starts(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    start = {
        "type": "message_start",
        "message": {"model": "claude-x", "usage": {"input_tokens": 9, "output_tokens": 1}},
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens"},
        "usage": {"input_tokens": 12, "output_tokens": 40},
    }
    anthropic_server.stream([event(start), event(delta), event({"type": "message_stop"})])
    resp = claude().complete(HELLO)
    assert resp.usage == Usage(prompt_tokens=12, completion_tokens=40)
    assert (resp.finish_reason, resp.model, resp.message.content) == ("length", "claude-x", "")


def test_anthropic_a_data_line_that_is_not_json_is_a_model_error(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    anthropic_server.stream(["event: message_start\ndata: {not json\n\n"])
    err = failure(lambda: claude().complete(HELLO))
    assert "not JSON" in err.message and (err.retryable, err.action) == (False, "fail")


def test_anthropic_a_stream_without_message_stop_is_retryable(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    events = [
        e
        for e in anthropic_server.stream_events(message("Half a reply"), {})
        if "message_stop" not in e
    ]
    anthropic_server.stream(events)
    heard = Heard()
    err = failure(lambda: claude().complete(HELLO, listen=heard))
    assert "the stream ended before the model finished (no message_stop)" in err.message
    assert (err.retryable, err.action) == (True, "switch")
    assert "".join(heard.texts) == "Half a reply"


def test_anthropic_an_overloaded_error_event_waits_as_a_529(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = anthropic_server.stream_events(message("Hi there"), {})[:4]
    anthropic_server.stream([*events, event(overloaded)])
    err = failure(lambda: claude().complete(HELLO))
    assert "broke off mid-stream: overloaded_error: Overloaded" in err.message
    assert (err.retryable, err.action, err.status_code) == (True, "wait", 529)


def test_anthropic_a_connection_dropped_mid_stream_is_a_connection_failure(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    anthropic_server.stream(
        anthropic_server.stream_events(message("Hi there"), {})[:4], ending="drop"
    )
    err = failure(lambda: claude().complete(HELLO))
    assert (err.retryable, err.action) == (True, "switch")


def test_anthropic_a_listener_that_raises_ends_the_call_and_closes_the_connection(
    anthropic_server: FakeAnthropic, claude: Callable[..., AnthropicModel]
) -> None:
    events = anthropic_server.stream_events(message("one two three"), {})[:-2]
    anthropic_server.stream(events, ending="hold")
    heard = Heard(stop_at=1)
    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        claude().complete(HELLO, listen=heard)
    assert time.monotonic() - t0 < 1.0
    assert heard.texts == ["one "]
    assert anthropic_server.wait_hangup(2.0)


# -- echo ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["hello", "  two  spaces\nand a line ", ""])
def test_echo_streams_its_reply_word_by_word(text: str) -> None:
    heard = Heard()
    resp = EchoModel().complete([ChatMessage(role="user", content=text)], listen=heard)
    assert "".join(heard.texts) == resp.message.content
    assert heard.texts == words(resp.message.content)
    assert all(heard.texts) and len(heard.texts) >= 3


def test_echo_tool_calls_tell_nothing() -> None:
    heard = Heard()
    resp = EchoModel().complete(
        [ChatMessage(role="user", content="/tool clock {}")], [ToolSpec(name="clock")], listen=heard
    )
    assert resp.message.tool_calls and heard.told == []


def test_echo_paces_its_words_stream_ms_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    heard = Heard()
    EchoModel(stream_ms=30).complete(HELLO, listen=heard)
    assert slept == [0.03] * (len(heard.texts) - 1)
    slept.clear()
    EchoModel().complete(HELLO, listen=Heard())
    assert slept == []


def test_echo_lets_the_listeners_exception_through() -> None:
    heard = Heard(stop_at=1)
    with pytest.raises(Interrupted):
        EchoModel().complete(HELLO, listen=heard)
    assert heard.texts == ["echo: "]


def test_stream_ms_is_configured_for_echo(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    model = models.build(ModelConfig(provider="echo", stream_ms=5), Settings())
    model.complete(HELLO)
    assert slept and set(slept) == {0.005}
    with pytest.raises(ValueError, match="non-negative number of ms between streamed words"):
        ModelConfig(stream_ms=-1)


# -- a managed model -----------------------------------------------------------------------


def managed(*candidates: Any, max_retries: int = 1) -> ManagedModel:
    model = ManagedModel([Candidate(c, (), max_retries, 5.0) for c in candidates], LocalCapacity())
    model._sleep = lambda _: None  # no backoff
    return model


def test_a_managed_model_streams_as_its_first_candidate(
    gpt: Callable[..., OpenAIModel],
) -> None:
    assert managed(gpt(), EchoModel()).streams is True

    class Plain:
        name = "plain"

        def complete(self, messages: Any, tools: Any = ()) -> ModelResponse:
            raise AssertionError("not called")

    assert managed(Plain(), gpt()).streams is False


def test_text_of_a_failed_attempt_is_reset_before_the_retrys(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream(
        [sse(chunk({"role": "assistant", "content": "Half "})), sse(chunk({"content": "a"}))],
        ending="drop",
    )
    openai_server.enqueue(body=reply("The whole reply."))
    heard = Heard()

    resp = managed(gpt()).complete(HELLO, listen=heard)

    assert resp.message.content == "The whole reply."
    assert heard.told[:3] == [("text", "Half "), ("text", "a"), ("reset", "")]
    assert heard.resets == 1
    assert heard.since_reset() == resp.message.content
    assert len(openai_server.requests) == 2


@pytest.mark.parametrize("how", ["status", "stream"])
def test_no_reset_when_the_attempt_failed_before_any_text(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel], how: str
) -> None:
    if how == "status":
        openai_server.enqueue(503)
    else:
        openai_server.stream([sse(chunk({"role": "assistant", "content": ""}))], ending="drop")
    openai_server.enqueue(body=reply("Fine now."))
    heard = Heard()

    resp = managed(gpt()).complete(HELLO, listen=heard)

    assert heard.resets == 0
    assert "".join(heard.texts) == resp.message.content == "Fine now."


def test_a_fallback_after_text_starts_over(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream([sse(chunk({"content": "Half a"}))])  # no finish: cut short
    heard = Heard()

    resp = managed(gpt(), EchoModel(), max_retries=0).complete(HELLO, listen=heard)

    assert resp.fallback and resp.answered_by == "echo"
    assert heard.resets == 1
    assert heard.since_reset() == resp.message.content == "echo: hello [history: 0]"


def test_a_reset_owed_is_made_when_the_answer_has_no_text(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    openai_server.stream([sse(chunk({"content": "Let me"}))], ending="drop")
    openai_server.enqueue(
        body={
            "choices": [
                {
                    "message": {
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": "{}"},
                            }
                        ]
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
    )
    heard = Heard()

    resp = managed(gpt()).complete(HELLO, tools=[WEATHER], listen=heard)

    assert resp.message.tool_calls and heard.told == [("text", "Let me"), ("reset", "")]


def test_a_candidate_that_does_not_stream_tells_its_whole_reply(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel]
) -> None:
    class Plain:
        name = "plain"

        def complete(self, messages: Any, tools: Any = ()) -> ModelResponse:
            return ModelResponse(
                message=ChatMessage(role="assistant", content="All at once."), model="plain"
            )

    openai_server.stream([sse(chunk({"content": "Hal"}))], ending="drop")
    heard = Heard()
    resp = managed(gpt(), Plain(), max_retries=0).complete(HELLO, listen=heard)
    assert heard.told == [("text", "Hal"), ("reset", ""), ("text", "All at once.")]
    assert resp.answered_by == "plain"


@pytest.mark.parametrize(
    "error",
    [Interrupted("stop"), ModelError("the listener's own", retryable=True)],
    ids=["interrupted", "model-error"],
)
def test_what_the_listener_raises_is_no_model_failure(
    openai_server: FakeOpenAI, gpt: Callable[..., OpenAIModel], error: Exception
) -> None:
    openai_server.enqueue(body=reply("one two three"))
    limit_model = managed(gpt(), EchoModel(), max_retries=3)
    heard = Heard(stop_at=1, error=error)

    with pytest.raises(type(error)) as caught:
        limit_model.complete(HELLO, listen=heard)

    assert caught.value is error  # as the listener raised it: not retried, no fallback
    assert len(openai_server.requests) == 1
    assert heard.texts == ["one "]


class Hangs:
    """A listener told how to abort the call in flight; aborts it once asked to."""

    def __init__(self) -> None:
        self.abort: Callable[[], None] | None = None
        self.given = threading.Event()
        self.aborted = False

    def text(self, chunk: str) -> None:
        return None

    def reset(self) -> None:
        return None

    def opened(self, abort: Callable[[], None] | None) -> None:
        if abort is not None:
            self.abort = abort
            self.given.set()


def _calling(model: OpenAIModel, heard: Hangs) -> tuple[threading.Thread, dict[str, BaseException]]:
    """``model.complete`` on a thread of its own, told to ``heard``; what it raised, once over."""
    outcome: dict[str, BaseException] = {}

    def call() -> None:
        try:
            model.complete(HELLO, listen=heard)
        except BaseException as exc:
            outcome["raised"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    return thread, outcome


def test_a_call_waiting_for_its_first_token_is_hung_up_by_its_run(openai_server: Any) -> None:
    """The provider sent its headers and nothing since: the run's stop hangs the call up at
    once, and it ends as stopped, not as a failure to retry."""
    openai_server.stream([], ending="hold")
    model = OpenAIModel(model="m", base_url=openai_server.base_url, max_retries=0)
    heard = Hangs()
    thread, outcome = _calling(model, heard)
    assert heard.given.wait(10), "the adapter said how to abort it"
    wait_for(lambda: openai_server.requests, 10, what="the request to reach the provider")
    heard.aborted = True
    assert heard.abort is not None
    heard.abort()
    thread.join(10)
    assert not thread.is_alive(), "the call ended"
    assert isinstance(outcome.get("raised"), Stopped), outcome
    assert openai_server.wait_hangup(5), "the provider saw the connection go"
    model.close()


def test_a_call_waiting_for_its_response_to_begin_is_hung_up_without_a_retry(
    openai_server: Any,
) -> None:
    """The provider has the request and answers nothing, not even its headers: the run's stop
    still ends the call at once, as stopped; the SDK (three retries allowed) does not send it
    again."""
    openai_server.hang()
    model = OpenAIModel(model="m", base_url=openai_server.base_url, max_retries=3)
    heard = Hangs()
    thread, outcome = _calling(model, heard)
    wait_for(lambda: openai_server.requests, 10, what="the request to reach the provider")
    heard.aborted = True
    assert heard.abort is not None
    heard.abort()
    thread.join(5)
    assert not thread.is_alive(), "the call ended"
    assert isinstance(outcome.get("raised"), Stopped), outcome
    assert len(openai_server.requests) == 1, "the call was sent again"
    model.close()


def test_a_call_its_run_stopped_before_it_was_sent_is_never_sent(openai_server: Any) -> None:
    model = OpenAIModel(model="m", base_url=openai_server.base_url, max_retries=3)

    class Stopping(Hangs):
        def opened(self, abort: Callable[[], None] | None) -> None:
            if abort is not None:  # the run was asked to stop already: its hook runs now
                self.aborted = True
                abort()

    with pytest.raises(Stopped):
        model.complete(HELLO, listen=Stopping())
    assert openai_server.requests == []
    model.close()
