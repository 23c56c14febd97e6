"""Model traffic with real Celery worker processes, PostgreSQL and Redis, against fake OpenAI and
Anthropic servers started here: a model limit holds across two workers, a 429 with Retry-After
pauses the other worker's calls, a fallback answers when the first model keeps failing, and a
400 does not fall back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.views import run_json
from tests.conftest import write_config
from tests.support.anthropic_server import FakeAnthropic
from tests.support.fleet import fleet_settings, running_fleet, runtime_for, wait_for
from tests.support.openai_server import FakeOpenAI

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120)]

#: How much later than its grant a request may reach the fake server (seconds).
JITTER_S = 0.05


def agent(
    server: FakeOpenAI, *, max_retries: int = 3, fallback: FakeAnthropic | None = None
) -> str:
    text = (
        f'[model]\nprovider = "openai"\nname = "gpt-test"\nbase_url = "{server.base_url}"\n'
        f"max_retries = {max_retries}\ntimeout = 5\n"
    )
    if fallback is not None:
        text += (
            f'fallbacks = [{{ provider = "anthropic", name = "claude-test", '
            f'base_url = "{fallback.base_url}", max_retries = 0 }}]\n'
        )
    return text


def configure(root: Path, agent_toml: str, limits: str = "") -> Path:
    write_config(root, agents={"talk": agent_toml}, deployments={"talk": 'agent = "talk"\n'})
    (root / "fleet.toml").write_text(limits)
    return root


def submit(rt: Runtime, n: int, prefix: str = "t") -> list[Task]:
    return [
        rt.dispatcher.submit("talk", f"{prefix}{i}", key=f"{prefix}-conv-{i}").task
        for i in range(n)
    ]


def finished(rt: Runtime, tasks: list[Task]) -> list[Task]:
    now = [rt.store.get_task(t.id) for t in tasks]
    return now if all(t.status.terminal for t in now) else []


def steps_of(rt: Runtime, task: Task) -> list[Any]:
    runs = rt.store.runs_of(task.id)
    return list(rt.store.get_run(runs[-1].id).steps) if runs else []


def celery_workers(rt: Runtime, tasks: list[Task]) -> set[int]:
    """The Celery worker processes (main pids) whose pool processes ran ``tasks``' last runs."""
    found = set()
    for t in tasks:
        worker = rt.store.runs_of(t.id)[-1].worker
        assert worker is not None
        pid = worker.rpartition(":")[2]
        stat = Path(f"/proc/{pid}/stat").read_text()
        found.add(int(stat.rpartition(")")[2].split()[1]))  # its parent: the worker
    return found


def most_in_window(arrivals: list[float], window: float) -> int:
    return max(sum(1 for t in arrivals if t0 <= t < t0 + window) for t0 in arrivals)


@pytest.mark.serial
def test_the_rate_holds_across_two_workers(
    tmp_path: Path, pg_url: str, redis_url: str, openai_server: FakeOpenAI
) -> None:
    limits = (
        '[[model_limits]]\nmatch = "openai:*"\nrequests_per_minute = 120\nburst = 2\n'
        'max_wait = "60s"\n'
    )
    root = configure(tmp_path / "config", agent(openai_server), limits)
    settings = fleet_settings(tmp_path, pg_url, redis_url, root, lease_ttl=5.0)
    with runtime_for(settings) as rt, running_fleet(tmp_path, **settings) as fleet:
        w1 = fleet.worker("w1", concurrency=2)
        w2 = fleet.worker("w2", concurrency=2)
        tasks = submit(rt, 14)
        done = wait_for(lambda: finished(rt, tasks), 60, what="14 tasks to finish")
        assert {t.status for t in done} == {TaskStatus.SUCCEEDED}, [t.error for t in done]
        assert celery_workers(rt, done) == {w1.pid, w2.pid}
        # read while the runtime is open (a store read after its close opens a pool anew)
        waits = [s for t in done for s in steps_of(rt, t) if s.kind == "wait"]
    arrivals = sorted(r.at for r in openai_server.requests)
    assert len(arrivals) == 14
    for window in (1.0, 2.0, 4.0):  # 2 a second, plus the burst of 2; a window 50 ms
        # shorter, for the time a granted request takes to reach the server
        assert most_in_window(arrivals, window - JITTER_S) <= 2 * window + 2, (window, arrivals)
    assert arrivals[-1] - arrivals[0] >= (14 - 2) / 2 - 0.5  # the steady rate, not faster
    assert waits and all(
        s.output["text"].startswith("waiting for model capacity: openai:*, ") for s in waits
    )


@pytest.mark.serial
def test_a_429_with_retry_after_pauses_the_other_workers_calls(
    tmp_path: Path, pg_url: str, redis_url: str, openai_server: FakeOpenAI
) -> None:
    limits = '[[model_limits]]\nmatch = "openai:*"\nrequests_per_minute = 6000\nmax_wait = "30s"\n'
    root = configure(tmp_path / "config", agent(openai_server), limits)
    settings = fleet_settings(tmp_path, pg_url, redis_url, root, lease_ttl=5.0)
    openai_server.enqueue(429, headers={"retry-after": "3"})
    with runtime_for(settings) as rt, running_fleet(tmp_path, **settings) as fleet:
        w1 = fleet.worker("w1", concurrency=2)
        w2 = fleet.worker("w2", concurrency=2)
        first = submit(rt, 1, "first")
        # the 429 answered, its cooldown set: the first call shows it waits for it
        wait_for(
            lambda: any(s.kind == "wait" for s in steps_of(rt, first[0])),
            20,
            what="the first call to wait out the cooldown",
        )
        limited_at = openai_server.requests[0].at
        others = submit(rt, 8, "other")
        done = wait_for(lambda: finished(rt, first + others), 60, what="9 tasks to finish")
        assert {t.status for t in done} == {TaskStatus.SUCCEEDED}, [t.error for t in done]
        assert celery_workers(rt, others) == {w1.pid, w2.pid}
        waited = [s for t in others for s in steps_of(rt, t) if s.kind == "wait"]
    after = sorted(r.at for r in openai_server.requests)[1:]
    assert len(after) == 9
    assert min(after) - limited_at >= 3.0 - 0.1, "a call reached the provider during the cooldown"
    assert {s.input["reason"] for s in waited} == {"cooldown"}


def test_a_fallback_answers_when_the_first_model_keeps_failing(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    openai_server: FakeOpenAI,
    anthropic_server: FakeAnthropic,
) -> None:
    for _ in range(2):
        openai_server.enqueue(503)
    prices = (
        '[prices."openai:gpt-test"]\ninput = 1.0\noutput = 2.0\n'
        '[prices."anthropic:claude-test"]\ninput = 3.0\noutput = 15.0\n'
    )
    root = configure(
        tmp_path / "config",
        agent(openai_server, max_retries=1, fallback=anthropic_server),
        prices,
    )
    settings = fleet_settings(tmp_path, pg_url, redis_url, root, lease_ttl=5.0)
    with runtime_for(settings) as rt, running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1")
        tasks = submit(rt, 1)
        (task,) = wait_for(lambda: finished(rt, tasks), 30, what="the task to finish")
        assert task.status == TaskStatus.SUCCEEDED, task.error
        assert task.reply == "echo: t0"
        run = rt.store.runs_of(task.id)[-1]
        (model_step,) = [s for s in steps_of(rt, task) if s.kind == "model"]
        today = rt.store.tenant_figures(datetime.now(UTC))["default"]
        shown = run_json(run)
    assert len(openai_server.requests) == 2 and len(anthropic_server.requests) == 1
    assert model_step.output["answered_by"] == "anthropic:claude-test"
    assert model_step.output["fallback"] is True
    assert run.details["models"]["anthropic:claude-test"]["calls"] == 1
    assert shown["models"][0]["model"] == "anthropic:claude-test" and shown["models"][0]["fallback"]
    # the fallback's price, not the first model's: in the run, its GetRun, the tenant's day
    used = model_step.usage
    cost = used["prompt_tokens"] * 3 + used["completion_tokens"] * 15
    assert cost > 0 and used["cost_micros"] == cost
    assert run.usage["cost_micros"] == cost
    assert shown["usage"]["cost"] == cost / 1_000_000
    assert today.cost_today_micros == cost


def test_a_400_does_not_fall_back(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    openai_server: FakeOpenAI,
    anthropic_server: FakeAnthropic,
) -> None:
    openai_server.enqueue(400)
    root = configure(tmp_path / "config", agent(openai_server, fallback=anthropic_server))
    settings = fleet_settings(tmp_path, pg_url, redis_url, root, lease_ttl=5.0)
    with runtime_for(settings) as rt, running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1")
        tasks = submit(rt, 1)
        (task,) = wait_for(lambda: finished(rt, tasks), 30, what="the task to finish")
    assert task.status == TaskStatus.FAILED
    assert task.error is not None and "HTTP 400" in task.error
    assert len(openai_server.requests) == 1 and anthropic_server.requests == []
