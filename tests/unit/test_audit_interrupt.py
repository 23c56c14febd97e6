"""A submission in the ``interrupt`` queue mode that stops a running task is an audit entry of
its caller (``task.interrupt``, the stopped task as its object); one that stops nothing is not."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from tests.support.callers import auth, keyed_runtime
from tests.support.fleet import wait_for

KEYS = {"boss": "boss-key-0123456789", "app": "app-key-0123456789"}
CALLERS = {
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
    "app": 'source = "api"\nscope = "api"\n',
}
AGENTS = {"slow": '[model]\nprovider = "echo"\nstream_ms = 150\n'}
DEPLOYMENTS = {"stopper": 'agent = "slow"\n[conversations]\nqueue_mode = "interrupt"\n'}


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, AGENTS, DEPLOYMENTS)
    yield runtime
    runtime.close()


def submit(client: TestClient, text: str) -> uuid.UUID:
    r = client.post(
        "/v1/tasks",
        json={"deployment": "stopper", "input": text, "conversationKey": "c"},
        headers=auth(KEYS, "app"),
    )
    assert r.status_code == 202, r.text
    return uuid.UUID(r.json()["id"])


def test_an_interrupting_submission_is_recorded(rt: Runtime) -> None:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as client:
        first = submit(client, "a long answer streamed slowly")
        conv = rt.store.get_task(first).conversation_id
        runner = threading.Thread(target=rt.dispatcher.drain, args=(conv,))
        runner.start()
        wait_for(lambda: rt.store.get_task(first).status == TaskStatus.RUNNING, 20)
        second = submit(client, "stop that")
        runner.join(30)
        r = client.get("/v1/audit", headers=auth(KEYS, "boss"))
    found = r.json()["entries"]
    assert [(e["action"], e["actor"], e["object"], e["outcome"]) for e in found] == [
        ("task.interrupt", "caller:app", str(first), "ok")
    ]
    assert found[0]["detail"] == {"by": str(second)} and found[0]["tenant"] == "default"
