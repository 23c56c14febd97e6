"""A managed model against the fake OpenAI and Anthropic servers, on a fake clock: fleet's
retries, the shared cooldown, waits shown and bounded by max_wait, fallbacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.agents import models
from fleet.agents.capacity import LocalCapacity, Wait
from fleet.agents.models.base import ChatMessage
from fleet.agents.models.traffic import ManagedModel
from fleet.config import ModelConfig, Settings
from fleet.domain.model_limits import Limit
from fleet.errors import ModelError
from tests.support.anthropic_server import FakeAnthropic
from tests.support.openai_server import FakeOpenAI

HELLO = [ChatMessage(role="user", content="hello")]


class Clock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


@pytest.fixture(autouse=True)
def _closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every managed model a test builds is closed after it (no unclosed sockets)."""
    built: list[ManagedModel] = []
    real = ManagedModel.__init__

    def init(self: ManagedModel, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        built.append(self)

    monkeypatch.setattr(ManagedModel, "__init__", init)
    yield
    for model in built:
        model.close()


def managed(
    tmp_path: Path,
    openai_server: FakeOpenAI,
    clock: Clock,
    limits: tuple[Limit, ...] = (),
    *,
    fallback: FakeAnthropic | None = None,
    max_retries: int = 2,
) -> tuple[ManagedModel, LocalCapacity]:
    cfg: dict[str, object] = {
        "provider": "openai",
        "name": "gpt-test",
        "base_url": openai_server.base_url,
        "max_retries": max_retries,
    }
    if fallback is not None:
        cfg["fallbacks"] = [
            {"provider": "anthropic", "name": "claude-test", "base_url": fallback.base_url}
        ]
    capacity = LocalCapacity(clock)
    model = models.build(
        ModelConfig.model_validate(cfg),
        Settings(home=tmp_path),
        models.Traffic(limits, capacity),
    )
    assert isinstance(model, ManagedModel)
    model._sleep, model._clock = clock.sleep, clock
    return model, capacity


def test_a_model_without_limits_or_fallbacks_stays_the_sdk_adapter(tmp_path: Path) -> None:
    cfg = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:9/v1")
    model = models.build(cfg, Settings(home=tmp_path), models.Traffic((Limit("anthropic:*", 60),)))
    assert not isinstance(model, ManagedModel)


def test_429_with_retry_after_cools_the_limit_then_the_call_retries(
    tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    clock = Clock()
    limit = Limit("openai:*", requests_per_minute=600)
    model, capacity = managed(tmp_path, openai_server, clock, (limit,))
    openai_server.enqueue(429, headers={"retry-after": "3"})
    shown: list[Wait] = []
    resp = model.complete(HELLO, waiting=lambda wait, name: shown.append(wait))
    assert resp.message.content == "echo: hello"
    assert resp.answered_by == "openai:gpt-test" and not resp.fallback
    assert [w.reason for w in shown] == ["cooldown"] and shown[0].limit == "openai:*"
    assert resp.waited_s == pytest.approx(3.0, abs=0.01)
    assert len(openai_server.requests) == 2  # the SDK retried nothing itself
    # a call of another limit is not held by this cooldown; one of this limit is
    capacity.cool((limit,), 5.0)
    assert capacity.acquire((Limit("anthropic:*", 60),), 0, "g", 1.0) is None
    held = capacity.acquire((limit,), 0, "g", 1.0)
    assert held is not None and held.reason == "cooldown"


def test_past_max_wait_the_call_fails_clearly(tmp_path: Path, openai_server: FakeOpenAI) -> None:
    clock = Clock()
    limit = Limit("openai:*", requests_per_minute=60, burst=1, max_wait_s=0.5)
    model, _ = managed(tmp_path, openai_server, clock, (limit,))
    model.complete(HELLO)
    with pytest.raises(ModelError) as caught:
        model.complete(HELLO)
    assert "no model capacity within max_wait 0.5s: limit 'openai:*' (requests)" in str(
        caught.value
    )
    assert "raise its max_wait or its requests_per_minute" in str(caught.value)
    assert len(openai_server.requests) == 1


def test_a_retry_after_past_max_wait_says_what_can_help(
    tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    """A higher rate cannot shorten the provider's Retry-After: the error says so and names a
    longer max_wait or a fallback model instead."""
    clock = Clock()
    limit = Limit("openai:*", requests_per_minute=600, max_wait_s=5.0)
    model, _ = managed(tmp_path, openai_server, clock, (limit,))
    openai_server.enqueue(429, headers={"retry-after": "30"})
    with pytest.raises(ModelError) as caught:
        model.complete(HELLO)
    message = caught.value.message
    assert "limit 'openai:*' (cooldown) would hold the call 30.0 s" in message, message
    assert "no rate of fleet's shortens it: raise the limit's max_wait to at least 30s" in message
    assert "fallback model ([model] fallbacks)" in message
    assert "or its rate" not in message
    assert len(openai_server.requests) == 1


def test_retries_spent_then_the_fallback_answers(
    tmp_path: Path, openai_server: FakeOpenAI, anthropic_server: FakeAnthropic
) -> None:
    clock = Clock()
    model, _ = managed(tmp_path, openai_server, clock, fallback=anthropic_server, max_retries=1)
    openai_server.enqueue(503)
    openai_server.enqueue(500)
    resp = model.complete(HELLO)
    assert resp.answered_by == "anthropic:claude-test" and resp.fallback
    assert len(openai_server.requests) == 2 and len(anthropic_server.requests) == 1
    assert clock.slept == [1.0]  # the switch's own backoff, not shared


def test_a_400_does_not_fall_back(
    tmp_path: Path, openai_server: FakeOpenAI, anthropic_server: FakeAnthropic
) -> None:
    clock = Clock()
    model, _ = managed(tmp_path, openai_server, clock, fallback=anthropic_server)
    openai_server.enqueue(400)
    with pytest.raises(ModelError) as caught:
        model.complete(HELLO)
    assert caught.value.action == "fail" and "HTTP 400" in caught.value.message
    assert len(openai_server.requests) == 1 and anthropic_server.requests == []


def test_every_model_failing_names_each(
    tmp_path: Path, openai_server: FakeOpenAI, anthropic_server: FakeAnthropic
) -> None:
    clock = Clock()
    model, _ = managed(tmp_path, openai_server, clock, fallback=anthropic_server, max_retries=0)
    openai_server.enqueue(503)
    for _ in range(4):  # the fallback's own max_retries (3, its default) spent too
        anthropic_server.enqueue(529)
    with pytest.raises(ModelError) as caught:
        model.complete(HELLO)
    text = caught.value.message
    assert (
        text.startswith("every model failed: openai:gpt-test:") and "anthropic:claude-test" in text
    )


def test_tokens_are_corrected_by_the_reported_usage(
    tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    clock = Clock()
    limit = Limit("openai:*", tokens_per_minute=60)  # one a second, a bucket of 1
    model, capacity = managed(tmp_path, openai_server, clock, (limit,))
    model.complete(HELLO)  # reported: 1 prompt + 2 completion tokens
    state = capacity._states["openai:*"]
    assert state.tokens_tat == pytest.approx(clock.now + 3.0)
    assert state.in_flight == 0


def test_a_wait_is_a_step_committed_before_the_model_step() -> None:
    """The runner records a managed call's wait as a ``wait`` step and commits it as it begins
    (the trace and the task's events show it while it lasts), then stores how long it lasted
    with the next step (issue 45: a 2-second cooldown showed 0.0 ms); a retry's replay skips
    it."""
    from fleet.agents.models.echo import EchoModel
    from fleet.agents.models.traffic import Candidate
    from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
    from fleet.agents.tools import ToolContext
    from fleet.domain.journal import Replay

    clock = Clock()
    capacity = LocalCapacity(clock)
    limit = Limit("echo", requests_per_minute=60, burst=1)
    capacity.cool((limit,), 2.0)
    model = ManagedModel([Candidate(EchoModel(), (limit,), 1, 5.0)], capacity)
    model._sleep, model._clock = clock.sleep, clock
    journal = MemoryJournal()
    outcome = run_agent(
        model,
        {},
        [ChatMessage(role="user", content="hi")],
        max_steps=2,
        ctx=ToolContext(task_id="t", run_id="r"),
        ports=RunPorts(journal=journal),
    )
    assert outcome.status.value == "succeeded"
    (began,) = journal.commits[0]  # committed alone, as it began
    wait = outcome.traces[0]  # the same step as stored at the end (in place)
    assert (began.step, began.kind, began.name) == (wait.step, wait.kind, wait.name)
    assert (wait.step, wait.kind, wait.name) == (1, "wait", "model capacity")
    text = "waiting for model capacity: echo, 2.0 s (cooldown after a 429)"
    assert began.output["text"] == wait.output["text"] == text
    assert wait.input == {"model": "echo", "limit": "echo", "reason": "cooldown"}
    assert wait.duration_ms == 2000.0  # the cooldown it waited out (on the model's clock)
    model_step = outcome.traces[-1]
    assert (model_step.step, model_step.kind) == (2, "model")
    assert model_step.output["answered_by"] == "echo" and model_step.output["waited_s"] == 2.0
    assert outcome.details["models"]["echo"]["calls"] == 1
    assert Replay([wait, model_step]).model() == model_step
    assert began.duration_ms < 1000.0  # (as it began)


def test_a_wait_step_shows_in_getrun_the_live_view_and_the_trace() -> None:
    from datetime import UTC, datetime

    from fleet.api.run_schemas import StepView
    from fleet.cli.live import describe
    from fleet.domain.values import Step
    from fleet.views import step_json

    text = "waiting for model capacity: openai:*, 1.2 s"
    step = Step(
        step=1,
        kind="wait",
        name="model capacity",
        status="finished",
        input={"model": "openai:gpt-4o", "limit": "openai:*", "reason": "requests"},
        output={"text": text, "seconds": 1.2},
        error=None,
        usage={},
        started_at=datetime.now(UTC),
        duration_ms=0.0,
        call_id=None,
        replayed=False,
    )
    shown = step_json(step)
    assert shown["wait"] == {
        "text": text,
        "seconds": 1.2,
        "limit": "openai:*",
        "reason": "requests",
        "model": "openai:gpt-4o",
    }
    assert shown["tool"] is None and shown["model"] is None
    StepView.model_validate(shown)  # the documented shape
    # a text stored without its reason shows it (the live view, the trace table)
    assert describe("step", {"taskId": "t", "attempt": 1, "runId": "r", **shown}) == (
        f"step 1  wait model capacity  {text} (requests per minute)"
    )
    from fleet.cli.runs import _call

    assert _call(shown) == ("wait model capacity", "openai:gpt-4o", f"{text} (requests per minute)")


def test_a_cancel_stops_a_wait_for_capacity() -> None:
    from fleet.agents.models.echo import EchoModel
    from fleet.agents.models.traffic import Candidate
    from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
    from fleet.agents.tools import ToolContext

    clock = Clock()
    capacity = LocalCapacity(clock)
    limit = Limit("echo", requests_per_minute=60, max_wait_s=60.0)
    capacity.cool((limit,), 30.0)
    model = ManagedModel([Candidate(EchoModel(), (limit,), 1, 5.0)], capacity)
    model._sleep, model._clock = clock.sleep, clock
    asked: list[float] = []

    def watch() -> bool:  # a cancel arrives a second into the wait
        asked.append(clock.now)
        return len(asked) > 2

    journal = MemoryJournal(cancel_at=2)
    outcome = run_agent(
        model,
        {},
        [ChatMessage(role="user", content="hi")],
        max_steps=2,
        ctx=ToolContext(task_id="t", run_id="r"),
        ports=RunPorts(journal=journal, watch=watch),
    )
    assert outcome.status.value == "cancelled"
    assert sum(clock.slept) == pytest.approx(1.0)  # asked every 0.5 s, not after 30 s
    stopped = journal.commits[-1][-1]
    assert (stopped.kind, stopped.error) == ("model", "stopped while waiting for model capacity")
