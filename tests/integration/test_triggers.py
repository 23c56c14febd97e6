"""Webhook triggers against `fleet serve` and real workers: signatures, threading, idempotency."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet.domain.redaction import Redactor
from fleet.domain.values import Task, TaskStatus
from fleet.domain.webhooks import sign_github, sign_stripe
from fleet.store import Store
from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import caller_toml, row_counts, write_intake_config

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

GH_SECRET, STRIPE_SECRET, HMAC_SECRET = "gh-secret-1", "whsec_test_2", "plain-secret-3"
HOOK_KEY = "hook-key-" + "x" * 24
API_KEY = "api-key-" + "y" * 24
ENV = {
    "FLEET_TEST_GH_SECRET": GH_SECRET,
    "FLEET_TEST_STRIPE_SECRET": STRIPE_SECRET,
    "FLEET_TEST_HMAC_SECRET": HMAC_SECRET,
    "FLEET_TEST_HOOK_KEY": HOOK_KEY,
    "FLEET_TEST_API_KEY": API_KEY,
}
TRIGGERS = {
    "gh": """
        deployment = "chat"
        input = "/comment/body"
        conversation_key = { pointer = "/issue/number" }
        idempotency_header = "X-GitHub-Delivery"
        [labels]
        repo = "/repository/full_name"
        [signature]
        style = "github"
        secret_env = "FLEET_TEST_GH_SECRET"
    """,
    "pay": """
        deployment = "chat"
        input = ""
        conversation_key = { pointer = "/data/object/customer" }
        [signature]
        style = "stripe"
        secret_env = "FLEET_TEST_STRIPE_SECRET"
        tolerance = "5m"
    """,
    "thread": """
        deployment = "chat"
        input = "/text"
        conversation_key = { header = "X-Thread" }
        idempotency_header = "X-Delivery"
        [signature]
        style = "hmac"
        header = "X-Signature"
        secret_env = "FLEET_TEST_HMAC_SECRET"
    """,
    "unset": """
        deployment = "chat"
        input = "/text"
        [signature]
        secret_env = "FLEET_TEST_NEVER_SET"
    """,
    "keyed": """
        deployment = "chat"
        input = "/text"
    """,
}
CALLERS = {
    "hook": caller_toml("webhook:keyed", "FLEET_TEST_HOOK_KEY"),
    "app": caller_toml("api", "FLEET_TEST_API_KEY"),
}


@pytest.fixture
def base(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[str]:
    config = write_intake_config(tmp_path / "config", triggers=TRIGGERS, callers=CALLERS)
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1")
        yield fleet.serve(**ENV)
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()))
    yield s
    s.dispose()


def finished(store: Store, task_id: str) -> Task:
    def done() -> Task | None:
        task = store.get_task(uuid.UUID(task_id))
        return task if task.status.terminal else None

    return wait_for(done, 60, what=f"task {task_id} to finish")


def post_hmac(base: str, payload: dict[str, object], **headers: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    sig = hmac.new(HMAC_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return httpx.post(
        f"{base}/v1/triggers/thread",
        content=body,
        headers={"Content-Type": "application/json", "X-Signature": sig, **headers},
    )


def test_same_header_value_joins_one_conversation_in_order(base: str, store: Store) -> None:
    first = post_hmac(base, {"text": "first"}, **{"X-Thread": "t-1"})
    second = post_hmac(base, {"text": "second"}, **{"X-Thread": "t-1"})
    other = post_hmac(base, {"text": "elsewhere"}, **{"X-Thread": "t-2"})
    assert [r.status_code for r in (first, second, other)] == [202, 202, 202], first.text
    a, b, c = (finished(store, r.json()["id"]) for r in (first, second, other))
    assert a.conversation == b.conversation == "webhook:thread:t-1"
    assert (a.seq, b.seq) == (1, 2)
    assert a.reply == "echo: first [history: 0]"
    assert b.reply == "echo: second [history: 2]"  # it saw the first exchange
    assert c.conversation == "webhook:thread:t-2"
    assert c.reply == "echo: elsewhere [history: 0]"
    assert first.json()["conversation"] == "webhook:thread:t-1"
    assert first.json()["duplicate"] is False


def test_repeated_delivery_id_makes_one_task(base: str, pg_url: str) -> None:
    body = json.dumps({"comment": {"body": "hi"}, "issue": {"number": 7}}).encode()
    headers = {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": sign_github(GH_SECRET.encode(), body),
        "X-GitHub-Delivery": "delivery-1",
    }
    first = httpx.post(f"{base}/v1/triggers/gh", content=body, headers=headers)
    again = httpx.post(f"{base}/v1/triggers/gh", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    assert row_counts(pg_url) == {"tasks": 1, "conversations": 1, "idempotency_keys": 1}


def test_empty_delivery_id_is_no_idempotency(base: str, pg_url: str) -> None:
    # as an empty conversation-key header is no key, an empty delivery id is no id: not a 422
    first = post_hmac(base, {"text": "one"}, **{"X-Delivery": "", "X-Thread": ""})
    second = post_hmac(base, {"text": "two"}, **{"X-Delivery": "", "X-Thread": "t-9"})
    assert [r.status_code for r in (first, second)] == [202, 202], (first.text, second.text)
    assert first.json()["id"] != second.json()["id"]
    assert row_counts(pg_url) == {"tasks": 2, "conversations": 2, "idempotency_keys": 0}


def test_bad_or_missing_signature_is_401_and_writes_no_row(base: str, pg_url: str) -> None:
    body = json.dumps({"comment": {"body": "hi"}, "issue": {"number": 7}, "text": "hi"}).encode()
    now = int(time.time())
    stale = now - 600
    attempts = [
        ("gh", {}),
        ("gh", {"X-Hub-Signature-256": sign_github(b"wrong secret", body)}),
        ("gh", {"X-Hub-Signature-256": "sha256=" + "0" * 64}),
        ("gh", {"X-Hub-Signature-256": sign_github(GH_SECRET.encode(), body + b" ")}),
        ("pay", {"Stripe-Signature": sign_stripe(b"wrong", body, now)}),
        ("pay", {"Stripe-Signature": sign_stripe(STRIPE_SECRET.encode(), body, stale)}),
        ("pay", {"X-Hub-Signature-256": sign_github(STRIPE_SECRET.encode(), body)}),
        ("thread", {"X-Signature": "0" * 64, "X-Thread": "t"}),
        # a bearer key does not replace a configured signature
        ("gh", {"Authorization": f"Bearer {API_KEY}"}),
    ]
    for trigger, headers in attempts:
        r = httpx.post(
            f"{base}/v1/triggers/{trigger}",
            content=body,
            headers={"Content-Type": "application/json", "X-GitHub-Delivery": "d", **headers},
        )
        assert r.status_code == 401, (trigger, headers, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["status"] == 401
    assert row_counts(pg_url) == {"tasks": 0, "conversations": 0, "idempotency_keys": 0}


def test_github_style(base: str, store: Store) -> None:
    payload = {
        "action": "created",
        "issue": {"number": 4711},
        "comment": {"body": "it broke"},
        "repository": {"full_name": "acme/app"},
    }
    body = json.dumps(payload).encode()
    r = httpx.post(
        f"{base}/v1/triggers/gh",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign_github(GH_SECRET.encode(), body),
            "X-GitHub-Delivery": str(uuid.uuid4()),
        },
    )
    assert r.status_code == 202, r.text
    task = finished(store, r.json()["id"])
    assert task.status == TaskStatus.SUCCEEDED
    assert task.conversation == "webhook:gh:4711"
    assert task.labels == {"repo": "acme/app"}
    assert task.reply == "echo: it broke [history: 0]"


def test_stripe_style_sends_the_whole_body_as_data(base: str, store: Store) -> None:
    payload = {"type": "invoice.paid", "data": {"object": {"customer": "cus_42", "total": 100}}}
    body = json.dumps(payload).encode()
    sig = sign_stripe(STRIPE_SECRET.encode(), body, int(time.time()))
    r = httpx.post(
        f"{base}/v1/triggers/pay",
        content=body,
        headers={"Content-Type": "application/json", "Stripe-Signature": sig},
    )
    assert r.status_code == 202, r.text
    task = finished(store, r.json()["id"])
    assert task.status == TaskStatus.SUCCEEDED
    assert task.conversation == "webhook:pay:cus_42"
    assert [p.model_dump() for p in task.input] == [{"type": "data", "data": payload}]


def test_refusals_name_the_problem_and_store_nothing(base: str, pg_url: str) -> None:
    def post(name: str, body: bytes, **headers: str) -> httpx.Response:
        return httpx.post(f"{base}/v1/triggers/{name}", content=body, headers=headers)

    # the trigger's secret is not set on the server: 503 (the sender retries), never accepted
    r = post("unset", b'{"text": "x"}')
    assert r.status_code == 503, r.text
    assert "secret is not set" in r.json()["detail"]
    assert post("nope", b"{}").status_code == 404
    # a signed body that is not JSON, or lacks the input field: 422 naming it
    bad = b"{not json"
    r = post("gh", bad, **{"X-Hub-Signature-256": sign_github(GH_SECRET.encode(), bad)})
    assert r.status_code == 422 and "not JSON" in r.json()["detail"], r.text
    no_input = b'{"issue": {"number": 1}}'
    r = post("gh", no_input, **{"X-Hub-Signature-256": sign_github(GH_SECRET.encode(), no_input)})
    assert r.status_code == 422 and "/comment/body" in r.json()["detail"], r.text
    blank = b'{"issue": {"number": 1}, "comment": {"body": " "}}'
    r = post("gh", blank, **{"X-Hub-Signature-256": sign_github(GH_SECRET.encode(), blank)})
    assert r.status_code == 422, r.text
    assert r.json()["invalidParams"][0]["name"] == "/comment/body", r.text
    # an unsigned trigger with callers: their bearer key, and only theirs
    assert post("keyed", b'{"text": "x"}').status_code == 401
    r = post("keyed", b'{"text": "x"}', Authorization=f"Bearer {API_KEY}")
    assert r.status_code == 403, r.text
    assert row_counts(pg_url) == {"tasks": 0, "conversations": 0, "idempotency_keys": 0}
    r = post("keyed", b'{"text": "x"}', Authorization=f"Bearer {HOOK_KEY}")
    assert r.status_code == 202, r.text
    assert r.json()["conversation"].startswith("webhook:keyed:")
