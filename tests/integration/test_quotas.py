"""Tenants' quotas and token budgets against `fleet serve`, real workers, PostgreSQL and Redis:
429 problem+json naming the quota, its value and Retry-After, with nothing stored; webhook
deliveries never refused; a budget that runs out ends a run at its next model call; the ledger
holds exactly what the runs used."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from fleet.domain.redaction import Redactor
from fleet.domain.values import TaskStatus
from fleet.store import Store
from tests.support.fleet import Fleet, running_fleet, wait_for
from tests.support.intake import a2a_send_raw, caller_toml, row_counts, write_intake_config

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

KEYS = {name: f"key-{name}-" + "q" * 24 for name in ("capped", "rated", "spender", "bot")}
ENV = {f"FLEET_TEST_KEY_{n.upper()}": k for n, k in KEYS.items()}
CALLERS = {
    "capped": caller_toml("api", "FLEET_TEST_KEY_CAPPED"),
    "rated": caller_toml("api", "FLEET_TEST_KEY_RATED"),
    "spender": caller_toml("api", "FLEET_TEST_KEY_SPENDER"),
    # an A2A key of the capped tenant
    "bot": caller_toml("a2a", "FLEET_TEST_KEY_BOT") + 'tenant = "capped"\n',
}
TRIGGERS = {
    "inbox": """
        deployment = "chat"
        input = "/text"
        public = true
        tenant = "capped"
    """
}
TENANTS = {
    "capped": "max_queued_tasks = 2\n",
    "rated": "submit_per_minute = 3\n",
    "spender": "tokens_per_day = 5\n",
}
PROBLEM = "application/problem+json"


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[tuple[Fleet, str]]:
    config = write_intake_config(tmp_path / "config", triggers=TRIGGERS, callers=CALLERS)
    (config / "tenants").mkdir()
    for name, body in TENANTS.items():
        (config / "tenants" / f"{name}.toml").write_text(body)
    with running_fleet(tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config) as f:
        yield f, f.serve(**ENV)
        f.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()))
    yield s
    s.dispose()


def submit(base: str, who: str, text: str = "hi", **extra: object) -> httpx.Response:
    body = {"deployment": extra.pop("deployment", "chat"), "input": text, **extra}
    return httpx.post(f"{base}/v1/tasks", json=body, headers=bearer(who))


def refused(r: httpx.Response, quota: str, limit: int) -> dict:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert (body["quota"], body["limit"]) == (quota, limit), body
    assert quota in body["detail"] and str(limit) in body["detail"]
    assert int(r.headers["Retry-After"]) >= 1 and body["retryAfter"] == int(
        r.headers["Retry-After"]
    )
    return body


def test_max_queued_tasks_refuses_api_and_a2a_and_never_a_webhook(fleet, pg_url) -> None:
    _, base = fleet  # no worker: tasks stay queued
    assert submit(base, "capped", conversationKey="a").status_code == 202
    assert submit(base, "capped", conversationKey="b").status_code == 202
    before = row_counts(pg_url)
    body = refused(submit(base, "capped", conversationKey="c"), "max_queued_tasks", 2)
    assert "tenant 'capped'" in body["detail"]
    assert row_counts(pg_url) == before  # nothing stored

    refused(a2a_send_raw(base, "chat", KEYS["bot"], "over"), "max_queued_tasks", 2)
    assert row_counts(pg_url) == before
    # a webhook delivery of the same tenant is stored however full it is (a sender may not
    # send it again), and waits its turn
    hook = httpx.post(f"{base}/v1/triggers/inbox", json={"text": "deliver me"})
    assert hook.status_code == 202, hook.text
    assert row_counts(pg_url)["tasks"] == before["tasks"] + 1
    # another tenant is not held back by this one's quota
    assert submit(base, "rated").status_code == 202
    metrics = httpx.get(f"{base}/metrics").text
    assert 'fleet_tenant_quota_refused_total{quota="max_queued_tasks",tenant="capped"} 2.0' in (
        metrics
    )


def test_submit_per_minute_is_shared_by_every_api_process(fleet) -> None:
    f, base = fleet
    other = f.serve(**ENV)  # a second API process: the rate is the tenant's, fleet-wide
    answers = [submit(b, "rated").status_code for b in (base, other, base)]
    assert answers == [202, 202, 202]
    body = refused(submit(other, "rated"), "submit_per_minute", 3)
    assert body["retryAfter"] <= 21  # the next place comes after 60/3 seconds at most


def test_a_spent_budget_ends_the_run_at_its_next_model_call_and_refuses_new_work(
    fleet, store, pg_url
) -> None:
    f, base = fleet
    f.worker("w1", concurrency=1)
    # two model steps: the first (a tool call) uses more than the 5 tokens of the day
    first = submit(base, "spender", "/tool current_time {}", deployment="tooly").json()

    def ended() -> bool:
        return store.get_task(uuid.UUID(first["id"])).status.terminal

    wait_for(ended, 60, what="the run to end")
    task = store.get_task(uuid.UUID(first["id"]))
    assert task.status == TaskStatus.FAILED
    assert task.error == "budget exhausted: tenant spender, tokens_per_day 5, resets 00:00 UTC"
    runs = httpx.get(f"{base}/v1/tasks/{task.id}/runs", headers=bearer("spender")).json()["runs"]
    (run,) = runs
    detail = httpx.get(f"{base}/v1/runs/{run['id']}", headers=bearer("spender")).json()
    assert [s["kind"] for s in detail["steps"]] == ["model", "tool"]  # no second model call
    # (an API process reuses a tenant's day total for up to 2 s: ask one that has not read it)
    other = f.serve(**ENV)
    body = refused(submit(other, "spender"), "tokens_per_day", 5)
    assert "resets 00:00 UTC" in body["detail"]
    # the ledger holds exactly what the run's model steps used, once
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        ledger = conn.execute(
            text("SELECT coalesce(sum(tokens), 0) FROM token_usage WHERE tenant = 'spender'")
        ).scalar_one()
        used = conn.execute(
            text(
                "SELECT coalesce(sum((usage->>'prompt_tokens')::int"
                " + (usage->>'completion_tokens')::int), 0)"
                " FROM traces WHERE kind = 'model' AND NOT replayed"
            )
        ).scalar_one()
    engine.dispose()
    assert ledger == used == run["usage"]["totalTokens"] > 5
