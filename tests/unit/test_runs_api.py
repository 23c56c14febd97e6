"""ListTaskRuns and GetRun over an embedded SQLite runtime: shapes, scoping, refusals.

Tasks are run to the end in the test's own thread (``run_until_done``), so every answer is read
after the run it shows has finished. The same operations against `fleet serve`, PostgreSQL and a
Celery worker are in ``tests/integration/test_runs_api.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.api.run_schemas import RunList, RunView
from fleet.dispatch.embedded import run_until_done
from fleet.runtime import Runtime
from tests.conftest import AGENTS, DEPLOYMENTS
from tests.support.callers import keyed_runtime
from tests.unit.test_api_problems import CALLERS, KEYS, as_, assert_problem

#: A token budget small enough that one long tool result is shortened in what is sent.
BUDGET = 'model = "echo"\ncontext_tokens = 256\ntools = ["tests.support.shop_tools:report"]\n'


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(
        tmp_path,
        CALLERS,
        KEYS,
        {**AGENTS, "budget": BUDGET},
        {**DEPLOYMENTS, "budget": 'agent = "budget"\n'},
    )
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {KEYS['ops']}"
        yield c


def finished(rt: Runtime, client: TestClient, deployment: str, text: str, **body: str) -> dict:
    r = client.post("/v1/tasks", json={"deployment": deployment, "input": text, **body})
    assert r.status_code == 202, r.text
    assert rt.local_waker is not None
    run_until_done(rt.dispatcher, rt.local_waker, uuid.UUID(r.json()["id"]), 30)
    return client.get(f"/v1/tasks/{r.json()['id']}").json()


def test_a_tool_run_reads_back_with_its_steps(rt: Runtime, client: TestClient) -> None:
    task = finished(rt, client, "tooly", "/tool current_time {}")
    assert task["status"] == "succeeded", task
    r = client.get(f"/v1/tasks/{task['id']}/runs")
    assert r.status_code == 200, r.text
    RunList.model_validate(r.json())
    (listed,) = r.json()["runs"]
    assert "steps" not in listed and "messages" not in listed["context"]
    assert (listed["taskId"], listed["attempt"], listed["status"]) == (task["id"], 1, "succeeded")
    assert listed["worker"] and listed["model"] == "echo" and listed["usage"]["steps"] == 3

    r = client.get(f"/v1/runs/{listed['id']}")
    assert r.status_code == 200, r.text
    run = r.json()
    RunView.model_validate(run)
    assert {k: v for k, v in run.items() if k != "steps"} == listed
    assert [(s["step"], s["kind"], s["name"]) for s in run["steps"]] == [
        (1, "model", "echo"),
        (2, "tool", "current_time"),
        (3, "model", "echo"),
    ]
    asked, called, answered = run["steps"]
    assert asked["model"]["finishReason"] == "tool_calls"
    assert asked["model"]["toolCalls"][0]["name"] == "current_time"
    assert called["tool"]["arguments"] == {} and called["tool"]["result"].startswith("20")
    assert called["tool"]["callId"] == asked["model"]["toolCalls"][0]["id"]
    assert answered["model"]["content"] == task["reply"]
    assert answered["model"]["tokens"]["completion"] > 0

    with_messages = client.get(f"/v1/runs/{listed['id']}", params={"include": "messages"}).json()
    RunView.model_validate(with_messages)
    assert with_messages["context"]["messages"][-1] == {
        "role": "user",
        "content": "/tool current_time {}",
    }


def test_context_provenance_lists_what_was_dropped(rt: Runtime, client: TestClient) -> None:
    finished(rt, client, "short", "a", conversationKey="p")
    finished(rt, client, "short", "y" * 300, conversationKey="p")  # bigger than max_bytes 200
    finished(rt, client, "short", "c", conversationKey="p")
    task = finished(rt, client, "short", "d", conversationKey="p")
    (run,) = client.get(f"/v1/tasks/{task['id']}/runs").json()["runs"]
    ctx = run["context"]
    assert ctx["limits"] == {"maxItems": 3, "maxBytes": 200}
    # whole turns: the turn of "a" does not fit the one item left, so neither of its messages
    # is sent (never the reply without its question)
    assert [(m["role"], m["preview"]) for m in ctx["injected"]] == [
        ("user", "c"),
        ("assistant", "echo: c [history: 2]"),
    ]
    assert [(m["role"], m["reason"]) for m in ctx["dropped"]] == [
        ("assistant", "oversized"),
        ("user", "oversized"),
        ("assistant", "item_limit"),
        ("user", "item_limit"),
    ]
    assert ctx["olderUnseen"] is False
    assert ctx["injectedTokens"] is None and ctx["tokenizer"] is None  # no token budget


def test_a_token_budget_shows_tokens_and_shortened_results(rt: Runtime, client: TestClient) -> None:
    finished(rt, client, "budget", "hello", conversationKey="b")
    task = finished(rt, client, "budget", '/tool report {"lines": 200}', conversationKey="b")
    assert task["status"] == "succeeded", task
    (listed,) = client.get(f"/v1/tasks/{task['id']}/runs").json()["runs"]
    ctx = listed["context"]
    assert ctx["limits"]["contextTokens"] == 256 and ctx["limits"]["historyTokens"] > 0
    assert ctx["tokenizer"] and ctx["injectedTokens"] == sum(m["tokens"] for m in ctx["injected"])
    assert [m["role"] for m in ctx["injected"]] == ["user", "assistant"]
    (cut,) = listed["shortened"]
    run = client.get(f"/v1/runs/{listed['id']}").json()
    RunView.model_validate(run)
    called = run["steps"][1]
    assert (cut["callId"], cut["tool"], cut["step"]) == (called["tool"]["callId"], "report", 3)
    assert cut["kept"] < cut["tokens"]
    assert called["tool"]["result"].count("\n") == 199  # the journal keeps the result whole


def test_runs_are_seen_in_the_callers_scope_only(rt: Runtime, client: TestClient) -> None:
    hooked = rt.dispatcher.submit("chat", "from a hook", scope="webhook:gh", key="k").task
    assert rt.local_waker is not None
    run_until_done(rt.dispatcher, rt.local_waker, hooked.id, 30)
    (other_run,) = rt.store.list_runs(hooked.id)
    mine = finished(rt, client, "tooly", "hello")
    (my_run,) = client.get(f"/v1/tasks/{mine['id']}/runs").json()["runs"]

    # another scope's task and run are 404, exactly like missing ones
    missing = str(uuid.uuid4())
    for template, hidden_id in (
        ("/v1/tasks/{}/runs", str(hooked.id)),
        ("/v1/runs/{}", str(other_run.id)),
    ):
        hidden = assert_problem(client.get(template.format(hidden_id)), 404, field="id")
        gone = assert_problem(client.get(template.format(missing)), 404, field="id")
        assert hidden["detail"].replace(hidden_id, "X") == gone["detail"].replace(missing, "X")
    assert "no run with id" in client.get(f"/v1/runs/{other_run.id}").json()["detail"]

    # a caller limited to other deployments does not see them either; an A2A key is refused
    narrow = as_("narrow")
    assert_problem(client.get(f"/v1/tasks/{mine['id']}/runs", headers=narrow), 404)
    assert_problem(client.get(f"/v1/runs/{my_run['id']}", headers=narrow), 404)
    assert_problem(client.get(f"/v1/runs/{my_run['id']}", headers=as_("bot")), 403)
    assert_problem(client.get(f"/v1/runs/{my_run['id']}", headers={"Authorization": ""}), 401)


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/tasks/not-a-uuid/runs", {}, "id"),
        ("/v1/runs/not-a-uuid", {}, "id"),
        (f"/v1/runs/{uuid.UUID(int=1)}", {"include": "everything"}, "include"),
    ],
)
def test_malformed_requests_are_422_naming_the_field(
    client: TestClient, path: str, params: dict[str, str], field: str
) -> None:
    assert_problem(client.get(path, params=params), 422, field=field)


def test_openapi_names_the_run_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ops = {
        op["operationId"]: (path, method)
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    assert ops["ListTaskRuns"] == ("/v1/tasks/{id}/runs", "get")
    assert ops["GetRun"] == ("/v1/runs/{id}", "get")
