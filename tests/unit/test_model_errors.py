"""Provider errors sorted into wait / switch / fail: the pure rules, then both official SDKs'
real exceptions (raised by the SDKs against the fake servers, with their own retries off)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.agents.models.anthropic import AnthropicModel
from fleet.agents.models.base import ChatMessage
from fleet.agents.models.openai import OpenAIModel
from fleet.domain.model_errors import MAX_RETRY_AFTER_S, backoff, classify, pause, retry_after
from fleet.errors import ModelError
from tests.support.anthropic_server import FakeAnthropic
from tests.support.openai_server import FakeOpenAI

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kwargs", "action", "after"),
    [
        ({"status": 429}, "wait", None),
        ({"status": 429, "headers": {"Retry-After": "3"}}, "wait", 3.0),
        ({"status": 429, "headers": {"retry-after-ms": "250", "retry-after": "9"}}, "wait", 0.25),
        ({"status": 429, "error_type": "insufficient_quota"}, "fail", None),
        ({"status": 529}, "wait", None),
        ({"status": 500, "error_type": "overloaded_error"}, "wait", None),
        ({"status": 529, "headers": {"retry-after": "2"}}, "wait", 2.0),
        ({"status": 500}, "switch", None),
        ({"status": 502}, "switch", None),
        ({"status": 503, "headers": {"Retry-After": "1"}}, "switch", 1.0),
        ({"status": 408}, "switch", None),
        ({"status": 409}, "switch", None),
        ({"timeout": True}, "switch", None),
        ({"connection": True}, "switch", None),
        ({"status": 400}, "fail", None),
        ({"status": 401}, "fail", None),
        ({"status": 403}, "fail", None),
        ({"status": 404}, "fail", None),
        ({"status": 413}, "fail", None),
        ({"status": 422}, "fail", None),
        ({}, "fail", None),
    ],
)
def test_classify(kwargs: dict[str, Any], action: str, after: float | None) -> None:
    verdict = classify(now=NOW, **kwargs)
    assert verdict.action == action
    assert verdict.retry_after_s == after


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "nonsense"}, None),
        ({"retry-after": "Wed, 02 Dec 2026 12:00:07 GMT"}, 7.0),
        ({"retry-after": "Wed, 02 Dec 2026 11:00:00 GMT"}, 0.0),
        ({"retry-after": "86400"}, MAX_RETRY_AFTER_S),
        ({"retry-after-ms": "inf", "retry-after": "2"}, 2.0),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after(headers, NOW) == seconds


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 1.0), (2, 2.0), (3, 4.0), (9, 30.0)])
def test_backoff_doubles_to_its_maximum(attempt: int, seconds: float) -> None:
    assert backoff(attempt) == seconds


def test_pause_prefers_what_the_provider_asked() -> None:
    assert pause(classify(status=429, headers={"retry-after": "5"}), 1) == 5.0
    assert pause(classify(status=429), 2) == 2.0


# -- both SDKs, real exceptions -------------------------------------------------------------------

SDK_ROWS: list[tuple[int, dict[str, str], dict[str, Any] | None, str, float | None]] = [
    (429, {"retry-after": "3"}, None, "wait", 3.0),
    (429, {}, None, "wait", None),
    (500, {}, None, "switch", None),
    (503, {}, None, "switch", None),
    (400, {}, None, "fail", None),
    (401, {}, None, "fail", None),
    (404, {}, None, "fail", None),
]
HELLO = [ChatMessage(role="user", content="hello")]


@pytest.fixture(scope="module")
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as srv:
        yield srv


def _error(model: OpenAIModel | AnthropicModel) -> ModelError:
    with pytest.raises(ModelError) as caught:
        model.complete(HELLO)
    return caught.value


@pytest.mark.parametrize(("status", "headers", "body", "action", "after"), SDK_ROWS)
def test_openai_sdk_errors(
    openai_server: FakeOpenAI,
    status: int,
    headers: dict[str, str],
    body: dict[str, Any] | None,
    action: str,
    after: float | None,
) -> None:
    openai_server.enqueue(status, body, headers=headers)
    model = OpenAIModel(model="m", base_url=openai_server.base_url, max_retries=0)
    err = _error(model)
    assert (err.action, err.retry_after_s, err.status_code) == (action, after, status)
    assert err.retryable == (action != "fail")


@pytest.mark.parametrize(("status", "headers", "body", "action", "after"), SDK_ROWS)
def test_anthropic_sdk_errors(
    anthropic_server: FakeAnthropic,
    status: int,
    headers: dict[str, str],
    body: dict[str, Any] | None,
    action: str,
    after: float | None,
) -> None:
    anthropic_server.enqueue(status, body, headers=headers)
    model = AnthropicModel(model="m", base_url=anthropic_server.base_url, max_retries=0)
    err = _error(model)
    assert (err.action, err.retry_after_s, err.status_code) == (action, after, status)


def test_anthropic_overloaded_529_waits(anthropic_server: FakeAnthropic) -> None:
    anthropic_server.enqueue(529, headers={"retry-after": "2"})
    model = AnthropicModel(model="m", base_url=anthropic_server.base_url, max_retries=0)
    err = _error(model)
    assert (err.action, err.retry_after_s) == ("wait", 2.0)


def test_openai_insufficient_quota_fails(openai_server: FakeOpenAI) -> None:
    spent = "insufficient_quota"
    body = {"error": {"message": "quota", "type": spent, "code": spent}}
    openai_server.enqueue(429, body)
    model = OpenAIModel(model="m", base_url=openai_server.base_url, max_retries=0)
    assert _error(model).action == "fail"


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_hanging_request_is_bounded_by_the_timeout(
    openai_server: FakeOpenAI, anthropic_server: FakeAnthropic, sdk: str
) -> None:
    model: OpenAIModel | AnthropicModel
    if sdk == "openai":
        openai_server.hang()
        model = OpenAIModel(
            model="m", base_url=openai_server.base_url, max_retries=0, timeout_s=0.3
        )
    else:
        anthropic_server.hang()
        model = AnthropicModel(
            model="m", base_url=anthropic_server.base_url, max_retries=0, timeout_s=0.3
        )
    t0 = time.monotonic()
    err = _error(model)
    assert time.monotonic() - t0 < 3.0
    assert err.action == "switch" and "timed out" in err.message


def test_a_refused_connection_switches() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIModel(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    assert _error(model).action == "switch"
