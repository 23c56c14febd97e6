"""What a managed model tells an SRE: every attempt under fleet's retries counted by outcome
(ok, or the error class stored on tasks), each retry with its cause, each cooldown on its limit,
each fallback that answered, the time waited for capacity; one log line for each retry, cooldown
and fallback. (Model steps of every model, managed or not, are counted by the runner:
tests/unit/test_runner.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from fleet.domain.model_limits import Limit
from tests.support.anthropic_server import FakeAnthropic
from tests.support.openai_server import FakeOpenAI
from tests.unit.test_model_traffic import HELLO, Clock, managed

PRIMARY, FALLBACK = "openai:gpt-test", "anthropic:claude-test"


class Samples:
    """Metric samples, as differences from when it was made (the registry is the process's)."""

    def __init__(self) -> None:
        self.before = self._all()

    @staticmethod
    def _all() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for m in REGISTRY.collect()
            if m.name.startswith("fleet_model")
            for s in m.samples
        }

    def delta(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return self._all().get(key, 0.0) - self.before.get(key, 0.0)


def test_a_429_then_an_answer_counts_a_rate_limit_a_retry_a_cooldown_and_an_ok(
    tmp_path: Path, openai_server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    limit = Limit("openai:*", requests_per_minute=600)
    model, _ = managed(tmp_path, openai_server, clock, (limit,))
    openai_server.enqueue(429, headers={"retry-after": "3"})
    seen = Samples()
    with caplog.at_level(logging.INFO, logger="fleet.agents.models.traffic"):
        model.complete(HELLO)
    calls = "fleet_model_attempts_total"
    assert seen.delta(calls, model=PRIMARY, outcome="rate_limit") == 1
    assert seen.delta(calls, model=PRIMARY, outcome="ok") == 1
    assert seen.delta("fleet_model_retries_total", model=PRIMARY, error_class="rate_limit") == 1
    assert seen.delta("fleet_model_cooldowns_total", limit="openai:*") == 1
    assert seen.delta("fleet_model_fallbacks_total", model=PRIMARY) == 0
    assert seen.delta("fleet_model_capacity_wait_seconds_count", model=PRIMARY) == 2
    assert seen.delta("fleet_model_capacity_wait_seconds_sum", model=PRIMARY) == pytest.approx(3)
    events = [(r.event, r.getMessage()) for r in caplog.records if hasattr(r, "event")]
    assert events == [
        ("model.retry", f"model {PRIMARY} failed (rate_limit, HTTP 429); attempt 2 of 3 in 3.0s"),
        (
            "model.cooldown",
            f"cooldown of 3.0s started on model limit openai:* (model {PRIMARY} was rate limited)",
        ),
    ]
    retry = next(r for r in caplog.records if getattr(r, "event", "") == "model.retry")
    assert (retry.http_status, retry.error_class, retry.attempt) == (429, "rate_limit", 2)


def test_two_500s_then_the_fallback_answers(
    tmp_path: Path,
    openai_server: FakeOpenAI,
    anthropic_server: FakeAnthropic,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    model, _ = managed(tmp_path, openai_server, clock, fallback=anthropic_server, max_retries=1)
    openai_server.enqueue(500)
    openai_server.enqueue(500)
    seen = Samples()
    with caplog.at_level(logging.INFO, logger="fleet.agents.models.traffic"):
        model.complete(HELLO)
    calls = "fleet_model_attempts_total"
    assert seen.delta(calls, model=PRIMARY, outcome="provider_error") == 2
    assert seen.delta(calls, model=FALLBACK, outcome="ok") == 1
    assert seen.delta("fleet_model_retries_total", model=PRIMARY, error_class="provider_error") == 1
    assert seen.delta("fleet_model_fallbacks_total", model=FALLBACK) == 1
    fell = [r for r in caplog.records if getattr(r, "event", "") == "model.fallback"]
    assert len(fell) == 1 and fell[0].levelno == logging.WARNING
    assert fell[0].getMessage().startswith(f"fallback {FALLBACK} answered after {PRIMARY}:")
    assert "HTTP 500" in fell[0].getMessage()


def test_a_401_is_one_auth_attempt_and_no_retry(
    tmp_path: Path, openai_server: FakeOpenAI, anthropic_server: FakeAnthropic
) -> None:
    clock = Clock()
    model, _ = managed(tmp_path, openai_server, clock, fallback=anthropic_server)
    openai_server.enqueue(401)
    seen = Samples()
    with pytest.raises(Exception, match="401"):
        model.complete(HELLO)
    assert seen.delta("fleet_model_attempts_total", model=PRIMARY, outcome="auth") == 1
    assert seen.delta("fleet_model_retries_total", model=PRIMARY, error_class="auth") == 0
    assert anthropic_server.requests == []  # a wrong request falls back to nothing
