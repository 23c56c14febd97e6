"""A trigger's ``[reply]`` on real workers (PostgreSQL, Redis, Celery processes): a GitHub-like
webhook's body fills the reply URL's template and the local receiver gets the reply at the
rendered path; the trigger's ``[reply]`` replaces its deployment's for the tasks it makes, while
a task submitted to that deployment directly still goes to the deployment's ``[reply]``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.domain import delivery as rules
from fleet.domain.webhooks import sign_github
from fleet.runtime import Runtime
from tests.support.fleet import Fleet, fleet_settings, wait_for
from tests.support.intake import write_intake_config
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

GH_SECRET = "gh-secret-reply-7d1e"
TOKEN = "gh-token-reply-3c9b2a"
ENV = {"FLEET_TEST_GH_SECRET": GH_SECRET, "FLEET_TEST_GH_TOKEN": TOKEN}


def deployments(base: str) -> dict[str, str]:
    return {
        "chat": (
            f'agent = "quick"\n[reply]\nurl = "{base}/ok/deployment/{{conversation}}/{{task_id}}"\n'
        ),
    }


def triggers(base: str) -> dict[str, str]:
    return {
        "github": f"""
            deployment = "chat"
            input = "/comment/body"
            conversation_key = {{ pointer = "/issue/number" }}
            idempotency_header = "X-GitHub-Delivery"
            [labels]
            repo = "/repository/full_name"
            issue = "/issue/number"
            [signature]
            style = "github"
            secret_env = "FLEET_TEST_GH_SECRET"
            [reply]
            url = "{base}/ok/repos/{{labels.repo}}/issues/{{labels.issue}}/comments"
            headers = {{ Authorization = {{ env = "FLEET_TEST_GH_TOKEN", prefix = "Bearer " }} }}
            body = {{ body = "{{reply}}" }}
        """,
    }


@pytest.fixture
def config(tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)  # the workers (and this test's runtime) inherit them
    root = write_intake_config(tmp_path / "config", triggers=triggers(receiver.url))
    (root / "deployments" / "chat.toml").write_text(deployments(receiver.url)["chat"])
    (root / "agents" / "quick.toml").write_text('model = "echo"\n')
    return root


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0)


@pytest.fixture
def fleet(fleet: Fleet) -> Fleet:
    """Worker ``a``, started."""
    fleet.worker("a")
    return fleet


def settled(rt: Runtime, task_id: uuid.UUID) -> list[rules.Record]:
    def final() -> list[rules.Record] | None:
        found = rt.store.task_deliveries(task_id)
        return found if found and all(d.status in rules.FINAL for d in found) else None

    return wait_for(final, 60, what=f"the deliveries of task {task_id} to settle")


def post_github(api: str, payload: dict[str, object], delivery: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    return httpx.post(
        f"{api}/v1/triggers/github",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign_github(GH_SECRET.encode(), body),
            "X-GitHub-Delivery": delivery,
        },
        timeout=10,
    )


def test_a_triggers_reply_goes_to_the_url_its_webhook_body_fills(
    rt: Runtime, fleet: Fleet, receiver: Receiver
) -> None:
    api = fleet.serve()
    payload = {
        "comment": {"body": "is the build green?"},
        "issue": {"number": 4711},
        "repository": {"full_name": "acme/shop"},
    }
    posted = post_github(api, payload, "gh-delivery-1")
    assert posted.status_code == 202, posted.text
    task_id = uuid.UUID(posted.json()["id"])

    (rec,) = settled(rt, task_id)
    assert (rec.status, rec.kind, rec.target) == ("sent", "reply", "reply:triggers/github")
    (got,) = receiver.got("/ok/")  # the trigger's [reply] only: the deployment's is replaced
    # The body's fields fill the template; each value stays one path segment.
    assert got.path == "/ok/repos/acme%2Fshop/issues/4711/comments"
    assert got.body == {"body": "echo: is the build green? [history: 0]"}
    assert got.headers["Authorization"] == f"Bearer {TOKEN}"
    assert got.headers["Idempotency-Key"] == str(rec.id)
    assert TOKEN not in json.dumps(rec.journal)
    msgs = rt.store.messages(rt.store.get_task(task_id).conversation_id, limit=10)
    assert [m.delivery for m in msgs] == ["accepted", "sent"]

    # The same deployment's own tasks still use the deployment's [reply].
    adm = rt.dispatcher.submit("chat", "direct", key="k-1")
    (direct,) = settled(rt, adm.task.id)
    assert (direct.status, direct.target) == ("sent", "reply:deployments/chat")
    (dep,) = receiver.got("/ok/deployment/")
    assert dep.path == f"/ok/deployment/api%3Ak-1/{adm.task.id}"
    assert "Authorization" not in dep.headers
    assert len(receiver.got("/ok/repos/")) == 1  # nothing more went to the trigger's URL
