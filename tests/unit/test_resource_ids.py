"""A submission's ``resourceId`` reaches its task by each way in (embedded SQLite, the real
app): SubmitTask's body, A2A's ``fleet.resource`` metadata and a trigger's ``resource``
pointer into the delivery."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.support.callers import auth, keyed_runtime
from tests.unit.test_api_problems import CALLERS, KEYS

#: A public trigger whose resource is the sender's login.
HOOK = (
    'deployment = "chat"\ninput = "/text"\npublic = true\n'
    'resource = { pointer = "/sender/login" }\n'
)


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, folders={"triggers": {"hook": HOOK}})
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        yield c


def test_submit_task_carries_the_resource_id(rt: Runtime, client: TestClient) -> None:
    body = {"deployment": "chat", "input": "hi", "resourceId": "user-42"}
    r = client.post("/v1/tasks", json=body, headers=auth(KEYS, "ops"))
    assert r.status_code == 202, r.text
    assert rt.store.get_task(uuid.UUID(r.json()["id"])).resource_id == "user-42"
    plain = client.post(
        "/v1/tasks",
        json={"deployment": "chat", "input": "hi"},
        headers=auth(KEYS, "ops"),
    )
    assert rt.store.get_task(uuid.UUID(plain.json()["id"])).resource_id is None


def test_a2a_metadata_carries_the_resource_id(rt: Runtime, client: TestClient) -> None:
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {"role": "user", "messageId": "m-1", "parts": [{"text": "hi"}]},
            "configuration": {"blocking": False},
            "metadata": {"fleet.resource": "user-7"},
        },
    }
    r = client.post("/a2a/chat", json=send, headers=auth(KEYS, "bot"))
    assert r.status_code == 200 and "error" not in r.json(), r.text
    [task] = rt.store.list_tasks(TaskFilter())
    assert task.scope == "a2a:bot" and task.resource_id == "user-7"


def test_a_trigger_pointer_carries_the_resource_id(rt: Runtime, client: TestClient) -> None:
    r = client.post("/v1/triggers/hook", json={"text": "hi", "sender": {"login": "octocat"}})
    assert r.status_code == 202, r.text
    [task] = rt.store.list_tasks(TaskFilter())
    assert task.scope == "webhook:hook" and task.resource_id == "octocat"
