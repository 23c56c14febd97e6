"""The task API's shape and errors over an embedded SQLite runtime (no workers: tasks stay queued).

Every refusal is problem+json naming the field; another scope's task is 404 like a missing one;
an outage is 503 with Retry-After, never a 500.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from fleet.api.app import create_app
from fleet.api.schemas import (
    CancelTaskResponse,
    MessageList,
    SubmitTaskResponse,
    TaskDetail,
)
from fleet.config import Settings
from fleet.runtime import Runtime, build
from fleet.store import Store, TaskFilter
from tests.support.callers import keyed_runtime

KEYS = {"ops": "ops-key-0123456789", "narrow": "narrow-key-0123456789", "bot": "bot-key-0123456789"}
CALLERS = {
    "ops": 'source = "api"\ndeployments = ["*"]\n',
    "narrow": 'source = "api"\ndeployments = ["chat"]\n',
    "bot": 'source = "a2a"\ndeployments = ["*"]\n',
}
PROBLEM = "application/problem+json"


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {KEYS['ops']}"
        yield c


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


def submit(client: TestClient, **body: object) -> dict:
    r = client.post("/v1/tasks", json={"deployment": "chat", "input": "hello", **body})
    assert r.status_code == 202, r.text
    return r.json()


def assert_problem(r, status: int, field: str | None = None, text: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    if field is not None:
        assert field in [p["name"] for p in body["invalidParams"]], body
    if text is not None:
        assert text in body["detail"], body
    assert "Traceback" not in r.text
    return body


# -- the happy path's shape --------------------------------------------------------------------


def test_submit_answers_202_with_the_scoped_key_and_the_documented_shape(client):
    r = client.post(
        "/v1/tasks",
        json={
            "deployment": "chat",
            "input": [{"type": "text", "text": "hi"}, {"type": "data", "data": {"n": 1}}],
            "conversationKey": "ticket-4711",
            "labels": {"team": "search"},
        },
    )
    assert r.status_code == 202, r.text
    body = r.json()
    SubmitTaskResponse.model_validate(body)  # views.admission_json matches the documented model
    assert r.headers["location"] == f"/v1/tasks/{body['id']}"
    assert body["conversation"] == "api:ops:ticket-4711"  # caller ops is its own tenant
    assert (body["status"], body["seq"], body["mergedInto"], body["duplicate"]) == (
        "queued",
        1,
        None,
        False,
    )
    assert body["labels"] == {"team": "search"}
    assert body["input"] == [{"type": "text", "text": "hi"}, {"type": "data", "data": {"n": 1}}]


def test_the_scoped_key_sent_back_continues_the_same_conversation(client, rt):
    first = submit(client, conversationKey="ticket-4711")
    again = submit(client, conversationKey=first["conversation"])
    bare = submit(client, conversationKey="ticket-4711")
    legacy = submit(client, conversationKey="api:ticket-4711")  # before tenants: the same one
    sent = (first, again, bare, legacy)
    assert [t["conversation"] for t in sent] == ["api:ops:ticket-4711"] * 4
    assert [t["seq"] for t in sent] == [1, 2, 3, 4]
    ids = {rt.store.get_task(uuid.UUID(t["id"])).conversation_id for t in sent}
    assert len(ids) == 1


def test_without_a_key_each_task_gets_its_own_conversation(client):
    a, b = submit(client), submit(client)
    assert a["conversation"] != b["conversation"] and a["seq"] == b["seq"] == 1


def test_collect_answers_with_the_task_it_merged_into(client):
    first = submit(client, deployment="burst", conversationKey="b")
    second = submit(client, deployment="burst", conversationKey="b", input="more")
    assert second["id"] == first["id"] == second["mergedInto"]
    assert second["submissions"] == 2 and first["mergedInto"] is None


def test_an_idempotency_key_returns_the_original_task_and_creates_nothing(client, rt):
    first = submit(client, idempotencyKey="delivery-1")
    again = submit(client, idempotencyKey="delivery-1", input="changed")
    assert again["id"] == first["id"] and again["duplicate"] is True
    assert len(client.get("/v1/tasks").json()["tasks"]) == 1


def test_get_list_and_cancel(client):
    a = submit(client, conversationKey="k")
    b = submit(client, conversationKey="k")
    got = client.get(f"/v1/tasks/{a['id']}")
    assert got.status_code == 200
    assert TaskDetail.model_validate(got.json()).deliveries == []
    listed = client.get("/v1/tasks", params={"conversationKey": "api:k"}).json()["tasks"]
    assert [t["id"] for t in listed] == [a["id"], b["id"]]
    assert client.get("/v1/tasks", params={"status": "succeeded"}).json()["tasks"] == []
    cancelled = client.post(f"/v1/tasks/{b['id']}/cancel")
    assert cancelled.status_code == 200
    CancelTaskResponse.model_validate(cancelled.json())
    assert cancelled.json()["effect"] == "cancelled"
    assert cancelled.json()["task"]["status"] == "cancelled"
    again = client.post(f"/v1/tasks/{b['id']}/cancel").json()
    assert again["effect"] == "finished"


def test_get_waits_until_the_time_is_up_then_answers_with_the_task_as_it_is(client):
    task = submit(client)
    started = time.monotonic()
    r = client.get(f"/v1/tasks/{task['id']}", params={"wait": 0.3})
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert time.monotonic() - started >= 0.3


def test_get_of_a_finished_task_does_not_wait(client):
    task = submit(client)
    client.post(f"/v1/tasks/{task['id']}/cancel")
    started = time.monotonic()
    r = client.get(f"/v1/tasks/{task['id']}", params={"wait": 60})
    assert r.json()["status"] == "cancelled"
    assert time.monotonic() - started < 30  # far below the 60 s asked for


def test_messages_of_a_conversation(client, rt):
    task = submit(client, conversationKey="m")
    r = client.get("/v1/conversations/api:m/messages", params={"deployment": "chat"})
    assert r.status_code == 200, r.text
    MessageList.model_validate(r.json())
    assert r.json()["conversation"] == "api:ops:m" and r.json()["messages"] == []
    scoped = client.get("/v1/conversations/api:ops:m/messages", params={"deployment": "chat"})
    assert scoped.status_code == 200 and scoped.json()["conversation"] == "api:ops:m"
    slash = submit(client, conversationKey="org/repo#1")
    r = client.get("/v1/conversations/org%2Frepo%231/messages", params={"deployment": "chat"})
    assert r.status_code == 200 and r.json()["conversation"] == slash["conversation"]
    del task


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,field",
    [
        ({"deployment": "chat", "input": "x", "bogus": 1}, "bogus"),
        ({"input": "x"}, "deployment"),
        ({"deployment": "chat"}, "input"),
        ({"deployment": "nope", "input": "x"}, "deployment"),
        ({"deployment": "chat", "input": 5}, "input"),
        ({"deployment": "chat", "input": "   "}, "input"),
        ({"deployment": "chat", "input": [{"type": "image"}]}, "input"),
        ({"deployment": "chat", "input": [{"type": "text", "text": "x", "more": 1}]}, None),
        ({"deployment": "chat", "input": "a\u0000b"}, "input"),
        ({"deployment": "chat", "input": [{"type": "data", "data": {"k": "\u0000"}}]}, "input"),
        ({"deployment": "chat", "input": "x" * 20_000}, "input"),
        ({"deployment": "chat", "input": "x", "labels": {"bad key": "v"}}, "labels.bad key"),
        ({"deployment": "chat", "input": "x", "labels": {"k": 1}}, "labels.k"),
        (
            {"deployment": "chat", "input": "x", "labels": {f"k{i}": "v" for i in range(33)}},
            "labels",
        ),
        ({"deployment": "chat", "input": "x", "conversationKey": "a\nb"}, "conversationKey"),
        ({"deployment": "chat", "input": "x", "conversationKey": ""}, "conversationKey"),
        ({"deployment": "chat", "input": "x", "conversationKey": "k" * 201}, "conversationKey"),
        ({"deployment": "chat", "input": "x", "idempotencyKey": "i" * 201}, "idempotencyKey"),
        ({"deployment": "chat", "input": "x", "idempotencyKey": ""}, "idempotencyKey"),
    ],
)
def test_bad_submissions_are_422_naming_the_field(client, body, field):
    r = client.post("/v1/tasks", json=body)
    assert_problem(r, 422, field)


@pytest.mark.parametrize(
    ("key", "is_"), [("", "empty"), ("   ", "only white space"), ("\u3000 ", "only white space")]
)
def test_an_empty_conversation_key_is_refused_not_taken_for_none(client, rt, key, is_):
    """Issue 33: `conversationKey: ""` started a new conversation each time; issue 45: one of
    spaces alone was taken (and shown as `api:`)."""
    r = client.post("/v1/tasks", json={"deployment": "chat", "input": "x", "conversationKey": key})
    body = assert_problem(r, 422, "conversationKey")
    assert body["detail"] == (
        f"conversationKey: is {is_}; send the conversation's key, or omit it to start a new one"
    )
    for scoped in ("api:   ", "api:\t"):  # scoped: refused by the same rule (or as control)
        r = client.post(
            "/v1/tasks", json={"deployment": "chat", "input": "x", "conversationKey": scoped}
        )
        assert_problem(r, 422, "conversationKey")
    assert rt.store.list_tasks(TaskFilter(limit=10)) == []


def test_a_body_that_is_not_json_is_400_naming_the_body(client):
    r = client.post("/v1/tasks", content=b"{not json", headers={"content-type": "application/json"})
    body = assert_problem(r, 400)
    assert body["invalidParams"][0]["name"] == "body"


@pytest.mark.parametrize(
    "path,params,field",
    [
        ("/v1/tasks/not-a-uuid", {}, "id"),
        ("/v1/tasks/{id}", {"wait": "61"}, "wait"),
        ("/v1/tasks/{id}", {"wait": "-1"}, "wait"),
        ("/v1/tasks/{id}", {"wait": "nan"}, "wait"),
        ("/v1/tasks/{id}", {"wait": "soon"}, "wait"),
        ("/v1/tasks", {"status": "done"}, "status"),
        ("/v1/tasks", {"limit": "0"}, "limit"),
        ("/v1/tasks", {"limit": "1001"}, "limit"),
        ("/v1/tasks", {"deployment": "nope"}, "deployment"),
        ("/v1/tasks", {"deployment": "a\u0000"}, "deployment"),
        ("/v1/tasks", {"conversationKey": "a\u0000b"}, "conversationKey"),
        ("/v1/conversations/k/messages", {}, "deployment"),
        ("/v1/conversations/k/messages", {"deployment": "nope"}, "deployment"),
        ("/v1/conversations/a%00b/messages", {"deployment": "chat"}, "conversationKey"),
    ],
)
def test_bad_reads_are_422_naming_the_field(client, path, params, field):
    task = submit(client)
    r = client.get(path.format(id=task["id"]), params=params)
    assert_problem(r, 422, field)


def test_another_scopes_task_is_not_found_like_a_missing_one(client, rt):
    theirs = rt.dispatcher.submit("chat", "secret", scope="webhook:gh", key="pr-1").task
    missing = uuid.uuid4()
    for task_id in (theirs.id, missing):
        got = assert_problem(client.get(f"/v1/tasks/{task_id}"), 404, "id")
        assert got["detail"] == f"no task with id {task_id}"
        assert_problem(client.post(f"/v1/tasks/{task_id}/cancel"), 404, "id")
    assert rt.store.get_task(theirs.id).status == "queued"  # the cancel touched nothing
    assert client.get("/v1/tasks").json()["tasks"] == []


def test_a_key_of_another_scope_is_forbidden(client, rt):
    rt.dispatcher.submit("chat", "secret", scope="webhook:gh", key="pr-1")
    for key in ("webhook:gh:pr-1", "a2a:bot:ctx-1"):
        r = client.post(
            "/v1/tasks", json={"deployment": "chat", "input": "x", "conversationKey": key}
        )
        assert_problem(r, 403, "conversationKey", "belongs to scope")
        assert_problem(client.get("/v1/tasks", params={"conversationKey": key}), 403)
        r = client.get(f"/v1/conversations/{key}/messages", params={"deployment": "chat"})
        assert_problem(r, 403, "conversationKey")


def test_a_deployment_the_caller_may_not_use_is_forbidden(client):
    other = submit(client, deployment="burst")
    r = client.post("/v1/tasks", json={"deployment": "burst", "input": "x"}, headers=as_("narrow"))
    assert_problem(r, 403, "deployment")
    assert_problem(client.get(f"/v1/tasks/{other['id']}", headers=as_("narrow")), 404)
    listed = client.get("/v1/tasks", headers=as_("narrow")).json()["tasks"]
    assert listed == []
    r = client.get("/v1/tasks", params={"deployment": "burst"}, headers=as_("narrow"))
    assert_problem(r, 403, "deployment")


def test_a_key_of_another_source_cannot_use_the_task_api(client):
    r = client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}, headers=as_("bot"))
    assert_problem(r, 403, text="a2a:bot")
    assert_problem(client.get("/v1/tasks", headers=as_("bot")), 403)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}]
)
def test_no_or_a_bad_key_is_401(client, headers):
    client.headers.pop("Authorization")
    r = client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}, headers=headers)
    assert_problem(r, 401)
    assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/healthz").status_code == 200  # probes need no key


def test_singleton_tasks_are_readable_by_every_api_caller(client):
    task = submit(client, deployment="solo", conversationKey="ignored")
    assert task["conversation"] == "deployment:singleton"
    assert client.get(f"/v1/tasks/{task['id']}").status_code == 200
    listed = client.get("/v1/tasks", params={"conversationKey": "deployment:singleton"})
    assert [t["id"] for t in listed.json()["tasks"]] == [task["id"]]


# -- outages --------------------------------------------------------------------------------------


def point_store_at(store: Store, url: str) -> None:
    """Make the store's database unreachable from now on (as after a network failure)."""
    store.engine.dispose()
    store.engine = create_engine(url)
    store._autocommit = store.engine.execution_options(isolation_level="AUTOCOMMIT")


def test_an_unreachable_database_is_503_with_retry_after(client, rt, tmp_path):
    task = submit(client)
    point_store_at(rt.store, f"sqlite:///{tmp_path / 'gone' / 'fleet.db'}")
    for r in (
        client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}),
        client.get(f"/v1/tasks/{task['id']}"),
        client.get(f"/v1/tasks/{task['id']}", params={"wait": 1}),
        client.get("/v1/tasks"),
        client.post(f"/v1/tasks/{task['id']}/cancel"),
        client.get("/v1/conversations/k/messages", params={"deployment": "chat"}),
    ):
        assert_problem(r, 503, text="unavailable")
        assert r.headers["retry-after"].isdigit()
    ready = assert_problem(client.get("/readyz"), 503, text="database")
    assert ready["checks"]["database"] != "ok"
    assert client.get("/healthz").status_code == 200
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and "fleet_backlog_up 0.0" in metrics.text


def test_readyz_names_a_schema_that_is_not_at_head(client, rt, tmp_path):
    assert client.get("/readyz").json()["status"] == "ready"
    point_store_at(rt.store, f"sqlite:///{tmp_path / 'empty.db'}")
    assert_problem(client.get("/readyz"), 503, text="run `fleet migrate`")


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_redis_fails_readyz_but_an_admitted_task_is_still_accepted(tmp_path):
    runtime = keyed_runtime(tmp_path, redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    try:
        with TestClient(
            create_app(runtime, run_embedded=False), raise_server_exceptions=False
        ) as c:
            body = assert_problem(c.get("/readyz"), 503, text="redis")
            assert body["checks"]["database"] == "ok" and body["checks"]["redis"] != "ok"
            # The task is committed before the wake-up hint is sent: the sweeper starts it later.
            r = c.post("/v1/tasks", json={"deployment": "chat", "input": "x"})
            assert r.status_code == 202, r.text
            assert runtime.store.get_task(uuid.UUID(r.json()["id"])).status == "queued"
    finally:
        runtime.close()


# -- ops and schema ---------------------------------------------------------------------------


def test_metrics_show_submissions_and_the_backlog(client):
    submit(client, deployment="burst", conversationKey="m")
    submit(client, deployment="burst", conversationKey="m")
    text = client.get("/metrics").text
    assert 'fleet_tasks_submitted_total{deployment="burst",outcome="merged"}' in text
    assert 'fleet_backlog_tasks{deployment="burst",status="queued"} 1.0' in text
    assert 'fleet_backlog_tasks{deployment="chat",status="running"} 0.0' in text
    assert "fleet_backlog_up 1.0" in text
    for name in (
        "fleet_tasks_started_total",
        "fleet_tasks_finished_total",
        "fleet_queue_wait_seconds",
        "fleet_run_duration_seconds",
        "fleet_tasks_recovered_total",
        "fleet_tasks_retried_total",
    ):
        assert f"# TYPE {name}" in text


METRICS_TOKEN = "metrics-token-0123456789abcdef"


#: Callers ``app`` (no operator) and ``boss`` (an operator) of the metrics tests.
METRICS_CALLERS = {
    "app": 'source = "api"\n',
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
}
METRICS_KEYS = {name: f"{name}-key-0123456789" for name in METRICS_CALLERS}


@pytest.mark.parametrize(
    "settings",
    [
        {"metrics_token": METRICS_TOKEN},
        {"api_metrics_port": 9464},  # served without a key there: here it asks
        {"metrics_token": METRICS_TOKEN, "api_metrics_port": 9464},
    ],
)
def test_metrics_need_the_token_or_an_operator_key_once_either_is_set(tmp_path, settings):
    rt = keyed_runtime(tmp_path, METRICS_CALLERS, METRICS_KEYS, **settings)
    try:
        with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
            token = settings.get("metrics_token")
            for sent in ({}, {"Authorization": "Bearer not-it"}, {"Authorization": "Basic eDp5"}):
                r = c.get("/metrics", headers=sent)
                body = assert_problem(r, 401)
                assert r.headers["www-authenticate"] == "Bearer"
                assert "/metrics needs" in body["detail"] and "operator's API key" in body["detail"]
                assert ("FLEET_METRICS_TOKEN" in body["detail"]) == (token is not None)
                assert "fleet_tenant" not in r.text
            no_operator = c.get("/metrics", headers={"Authorization": "Bearer app-key-0123456789"})
            assert "is not an operator" in assert_problem(no_operator, 403)["detail"]
            boss = c.get("/metrics", headers={"Authorization": "Bearer boss-key-0123456789"})
            assert boss.status_code == 200 and "fleet_backlog_up 1.0" in boss.text
            if token is not None:
                scraped = c.get("/metrics", headers={"Authorization": f"Bearer {token}"})
                assert scraped.status_code == 200 and "fleet_tenant_backlog_tasks" in scraped.text
    finally:
        rt.close()


def test_an_open_api_with_a_metrics_token_asks_for_it(tmp_path):
    rt = keyed_runtime(tmp_path, metrics_token=METRICS_TOKEN)
    try:
        with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
            assert_problem(c.get("/metrics"), 401)
            assert c.get("/v1/tasks").status_code == 200  # the rest of an open API stays open
            ok = c.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
            assert ok.status_code == 200 and "fleet_backlog_up 1.0" in ok.text
    finally:
        rt.close()


def test_metrics_without_a_token_answer_anyone_as_before_and_a_keyed_api_warns(tmp_path, caplog):
    rt = keyed_runtime(tmp_path, METRICS_CALLERS, METRICS_KEYS)
    try:
        with (
            caplog.at_level("WARNING", logger="fleet.api.metrics_auth"),
            TestClient(create_app(rt, run_embedded=False)) as c,
        ):
            assert c.get("/metrics").status_code == 200
    finally:
        rt.close()
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "fleet.api.metrics_auth"]
    assert "FLEET_METRICS_TOKEN" in warned and "--metrics-port" in warned


def test_openapi_names_the_operations_and_documents_problems(client):
    spec = client.get("/openapi.json").json()
    ops = {
        op["operationId"]: (path, method, op)
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    for name in ("SubmitTask", "GetTask", "ListTasks", "CancelTask", "ListConversationMessages"):
        assert name in ops
    path, method, submit_op = ops["SubmitTask"]
    assert (path, method) == ("/v1/tasks", "post")
    assert set(submit_op["responses"]) >= {"202", "401", "403", "422", "503"}
    assert "application/problem+json" in submit_op["responses"]["422"]["content"]
    body = submit_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = spec["components"]["schemas"][body.rsplit("/", 1)[1]]
    assert set(schema["properties"]) == {
        "deployment",
        "input",
        "conversationKey",
        "labels",
        "idempotencyKey",
        "delivery",
        "resourceId",
        "priority",
    }
    assert schema["additionalProperties"] is False
    assert ops["ListConversationMessages"][0] == "/v1/conversations/{conversationKey}/messages"


def test_an_open_api_accepts_anyone_as_api(tmp_path):
    runtime = keyed_runtime(tmp_path)
    try:
        with TestClient(create_app(runtime, run_embedded=False)) as c:
            r = c.post(
                "/v1/tasks", json={"deployment": "chat", "input": "x", "conversationKey": "k"}
            )
            assert r.status_code == 202 and r.json()["conversation"] == "api:k"
    finally:
        runtime.close()


def test_a_body_past_the_limit_is_refused_before_it_is_read(client):
    from fleet.constants import MAX_REQUEST_BYTES

    big = {"deployment": "chat", "input": "x" * (MAX_REQUEST_BYTES + 10)}
    r = client.post("/v1/tasks", json=big, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 413  # before authentication: nothing was parsed
    assert r.headers["content-type"] == "application/problem+json"

    def chunks():
        yield b'{"deployment": "chat", "input": "'
        for _ in range(MAX_REQUEST_BYTES // 65536 + 2):
            yield b"x" * 65536
        yield b'"}'

    streamed = client.post(
        "/v1/tasks", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413


@pytest.mark.parametrize(("public", "status"), [(False, 401), (True, 202)])
def test_an_unsigned_trigger_without_callers_is_closed_unless_public(tmp_path, public, status):
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS)
    triggers = runtime.config.root / "triggers"
    triggers.mkdir()
    (triggers / "hook.toml").write_text(
        f'deployment = "chat"\ninput = "/text"\npublic = {str(public).lower()}\n'
    )
    runtime.close()
    runtime = build(Settings(home=tmp_path / "home", config_dir=runtime.config.root))
    try:
        with TestClient(create_app(runtime, run_embedded=False)) as c:
            r = c.post("/v1/triggers/hook", json={"text": "hi"})
            assert r.status_code == status, r.text
            count = len(runtime.store.list_tasks(TaskFilter()))
            assert count == (1 if public else 0)
    finally:
        runtime.close()
