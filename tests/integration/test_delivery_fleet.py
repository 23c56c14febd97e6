"""Reply delivery on real workers (PostgreSQL, Redis, Celery processes) to a local receiver:
200 → ``sent``; 500 then 200 → retried, then ``sent``; no answer → ``unknown``; each visible in
GetTask and ``fleet tasks show``; ``remember = "delivered"`` keeps the undelivered reply out of
the next run's context, and its provenance says so."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.domain import delivery as rules
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

TTL, SWEEP = 2.0, 1.0
TOKEN = "recv-token-4f9a8b7c6d5e"
AGENTS = {"quick": 'model = "echo"\n'}


def deployments(base: str) -> dict[str, str]:
    reply = 'headers = { Authorization = { env = "FLEET_TEST_RECV_TOKEN", prefix = "Bearer " } }\n'
    return {
        "ok": (
            'agent = "quick"\n[reply]\n'
            f'url = "{base}/ok/{{labels.repo}}/{{task_id}}"\n{reply}'
            'body = { text = "{reply}", repo = "{labels.repo}", n = 1 }\n'
        ),
        "flaky": f'agent = "quick"\n[reply]\nurl = "{base}/flaky/{{task_id}}"\nattempts = 3\n',
        "hang": (
            'agent = "quick"\nremember = "delivered"\n[reply]\n'
            f'url = "{base}/hang/{{task_id}}"\ntimeout = "1s"\nattempts = 2\n'
        ),
    }


@pytest.fixture
def config(tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEET_TEST_RECV_TOKEN", TOKEN)
    return write_config(tmp_path / "config", AGENTS, deployments(receiver.url))


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=TTL, sweep_interval=SWEEP)


@pytest.fixture
def fleet(fleet: Fleet) -> Fleet:
    """Worker ``a`` and the sweeper, started."""
    fleet.worker("a")
    fleet.beat()
    return fleet


def settled(rt: Runtime, task_id: uuid.UUID, timeout: float = 60) -> list[rules.Record]:
    def final() -> list[rules.Record] | None:
        found = rt.store.task_deliveries(task_id)
        return found if found and all(d.status in rules.FINAL for d in found) else None

    return wait_for(final, timeout, what=f"the deliveries of task {task_id} to settle")


def get_task(api: str, task_id: uuid.UUID) -> dict[str, Any]:
    answer = httpx.get(f"{api}/v1/tasks/{task_id}", timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def show(fleet: Fleet, task_id: uuid.UUID) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "tasks", "show", str(task_id)],
        env=fleet.env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_200_is_sent_once_with_its_headers_and_body(
    rt: Runtime, fleet: Fleet, receiver: Receiver
) -> None:
    api = fleet.serve()
    adm = rt.dispatcher.submit("ok", "hello", key="c-1", labels={"repo": "acme/shop"})
    (rec,) = settled(rt, adm.task.id)
    assert rec.status == "sent" and rec.attempts == 1
    (got,) = receiver.got("/ok/")
    assert got.path == f"/ok/acme%2Fshop/{adm.task.id}"  # a field cannot add a path segment
    assert got.headers["Idempotency-Key"] == str(rec.id)
    assert got.headers["Authorization"] == f"Bearer {TOKEN}"
    assert got.body == {"text": "echo: hello [history: 0]", "repo": "acme/shop", "n": 1}
    # The journal keeps the receiver's answer, with the header's secret redacted.
    assert rec.journal[0]["outcome"] == "sent" and rec.journal[0]["httpStatus"] == 200
    assert TOKEN not in str(rec.journal) and "REDACTED" in rec.journal[0]["detail"]
    view = get_task(api, adm.task.id)
    assert [(d["status"], d["attempts"], d["kind"]) for d in view["deliveries"]] == [
        ("sent", 1, "reply")
    ]
    assert "sent  reply:deployments/ok" in show(fleet, adm.task.id)
    # The reply in the conversation is ``sent``.
    msgs = rt.store.messages(adm.task.conversation_id, limit=10)
    assert [m.delivery for m in msgs] == ["accepted", "sent"]


def test_a_500_is_retried_with_the_same_idempotency_key_then_sent(
    rt: Runtime, fleet: Fleet, receiver: Receiver
) -> None:
    api = fleet.serve()
    adm = rt.dispatcher.submit("flaky", "hello", key="c-2")
    (rec,) = settled(rt, adm.task.id)
    assert rec.status == "sent" and rec.attempts == 2
    outcomes = [(e["outcome"], e["httpStatus"]) for e in rec.journal]
    assert outcomes == [("failed", 500), ("sent", 200)]
    keys = {r.headers["Idempotency-Key"] for r in receiver.got("/flaky/")}
    assert keys == {str(rec.id)} and len(receiver.got("/flaky/")) == 2
    view = get_task(api, adm.task.id)
    assert view["deliveries"][0]["status"] == "sent"
    assert [e["outcome"] for e in view["deliveries"][0]["journal"]] == ["failed", "sent"]


def test_no_answer_is_unknown_and_remember_delivered_leaves_it_out(
    rt: Runtime, fleet: Fleet, receiver: Receiver
) -> None:
    api = fleet.serve()
    first = rt.dispatcher.submit("hang", "one", key="c-3")
    (rec,) = settled(rt, first.task.id)
    assert rec.status == "unknown" and rec.attempts == 2
    assert [e["outcome"] for e in rec.journal] == ["unknown", "unknown"]
    assert len(receiver.got("/hang/")) == 2
    assert {r.headers["Idempotency-Key"] for r in receiver.got("/hang/")} == {str(rec.id)}
    assert get_task(api, first.task.id)["deliveries"][0]["status"] == "unknown"
    assert "unknown  reply:deployments/hang" in show(fleet, first.task.id)
    msgs = rt.store.messages(first.task.conversation_id, limit=10)
    assert [m.delivery for m in msgs] == ["accepted", "unknown"]

    second = rt.dispatcher.submit("hang", "two", key="c-3")
    done = rt.dispatcher.wait(second.task.id, 60)
    assert done.reply == "echo: two [history: 1]"  # the input is history, the reply is not
    (run,) = rt.store.runs_of(second.task.id)
    injected = [(r["role"], r["preview"]) for r in run.context["injected"]]
    assert injected == [("user", "one")]
    dropped = [(r["role"], r["reason"], r["delivery"]) for r in run.context["dropped"]]
    assert dropped == [("assistant", "undelivered", "unknown")]
    # The run's provenance as users read it (GetRun's context).
    runs = httpx.get(f"{api}/v1/tasks/{second.task.id}/runs", timeout=10).json()
    assert runs["runs"][0]["context"]["dropped"][0]["reason"] == "undelivered"
