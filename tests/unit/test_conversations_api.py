"""The lifecycle operations over HTTP on an embedded SQLite runtime: operator keys only,
problem+json for bad input, 404 that creates nothing, 409 while a run is active."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet import views
from fleet.api.app import create_app
from fleet.runtime import Runtime
from tests.support.callers import auth, keyed_runtime

KEYS = {"boss": "boss-key-0123456789", "narrow": "narrow-key-0123456789", "app": "app-key-01234"}
# the operators reach every tenant; the conversations below are the default tenant's
CALLERS = {
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
    "narrow": 'source = "api"\noperator = true\ntenants = ["*"]\ndeployments = ["chat"]\n',
    "app": 'source = "api"\n',
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
        yield c


def ran(rt: Runtime, text: str, key: str = "k") -> None:
    adm = rt.dispatcher.submit("chat", text, key=key)
    rt.dispatcher.drain(adm.task.conversation_id)


def problem(r: object, status: int, says: str) -> dict:
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"] == PROBLEM  # type: ignore[attr-defined]
    body = r.json()  # type: ignore[attr-defined]
    assert says in body["detail"], body
    return body


def test_operations_are_for_operator_keys_only(rt: Runtime, client: TestClient) -> None:
    ran(rt, "hi")
    for method, path, kw in (
        ("GET", "/v1/conversations", {}),
        ("GET", "/v1/conversations/api:k?deployment=chat", {}),
        ("POST", "/v1/conversations/api:k/reset?deployment=chat", {"json": {}}),
        ("DELETE", "/v1/conversations/api:k?deployment=chat", {}),
        ("POST", "/v1/conversations:prune", {"json": {"dryRun": True}}),
    ):
        r = client.request(method, path, headers=auth(KEYS, "app"), **kw)
        problem(r, 403, "not an operator")
        assert client.request(method, path, **kw).status_code == 401
    narrow = client.get("/v1/conversations/api:k?deployment=solo", headers=auth(KEYS, "narrow"))
    problem(narrow, 403, "may not use deployment 'solo'")
    assert rt.dispatcher.lifecycle.show("chat", "k").generation == 0


def test_get_lists_and_shows_and_an_unknown_key_is_404_creating_nothing(
    rt: Runtime, client: TestClient
) -> None:
    ran(rt, "hi")
    listed = client.get("/v1/conversations?deployment=chat", headers=auth(KEYS, "boss")).json()
    assert [c["conversation"] for c in listed["conversations"]] == ["api:k"]
    shown = client.get("/v1/conversations/api:k?deployment=chat", headers=auth(KEYS, "boss")).json()
    assert (shown["generation"], shown["messages"], shown["activeTask"]) == (0, 2, None)
    missing = client.get("/v1/conversations/api:nope?deployment=chat", headers=auth(KEYS, "boss"))
    problem(missing, 404, "no conversation 'api:nope'")
    assert rt.store.lookup("chat", "api", "nope", tenant="default") is None
    assert len(rt.store.conversations(_all(), datetime.now(UTC))) == 1


def _all():
    from fleet.store.operator import ConversationFilter

    return ConversationFilter()


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "says"),
    [
        ("GET", "/v1/conversations/api:k", {}, 422, "deployment"),
        ("GET", "/v1/conversations/api:k?deployment=nope", {}, 422, "no deployment named 'nope'"),
        ("GET", "/v1/conversations/a2a:a%20b:k?deployment=chat", {}, 422, "scope"),
        ("GET", "/v1/conversations/api:%01?deployment=chat", {}, 422, "control characters"),
        ("GET", "/v1/conversations?state=sleepy", {}, 422, "state"),
        (
            "POST",
            "/v1/conversations/api:k/reset?deployment=chat",
            {"json": {"keepNotes": "yes"}},
            422,
            "keepNotes",
        ),
        (
            "POST",
            "/v1/conversations/api:k/reset?deployment=chat",
            {"json": {"surprise": 1}},
            422,
            "surprise",
        ),
        ("POST", "/v1/conversations:prune", {"json": {"olderThan": "soon"}}, 422, "soon"),
        ("POST", "/v1/conversations:prune", {"json": {"olderThan": "0d"}}, 422, "more than 0"),
        ("POST", "/v1/conversations:prune", {"json": {"deployment": "x"}}, 422, "'x'"),
        ("POST", "/v1/conversations:prune", {"content": b"{"}, 400, "not valid JSON"),
        (
            "DELETE",
            "/v1/conversations/api:k?deployment=chat&cancelRunning=maybe",
            {},
            422,
            "cancelRunning",
        ),
    ],
)
def test_bad_input_is_problem_json(
    rt: Runtime, client: TestClient, method: str, path: str, kw: dict, status: int, says: str
) -> None:
    ran(rt, "hi")
    headers = auth(KEYS, "boss")
    if "content" in kw:
        headers["content-type"] = "application/json"
    problem(client.request(method, path, headers=headers, **kw), status, says)


def test_reset_delete_and_prune(rt: Runtime, client: TestClient) -> None:
    ran(rt, "one")
    queued = rt.dispatcher.submit("chat", "waiting", key="k").task
    r = client.post(
        "/v1/conversations/api:k/reset?deployment=chat", json={}, headers=auth(KEYS, "boss")
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["generation"], body["previousGeneration"]) == (1, 0)
    assert body["cancelled"] == [str(queued.id)]
    dry = client.post("/v1/conversations:prune", json={"dryRun": True}, headers=auth(KEYS, "boss"))
    assert dry.json()["total"] == 0
    gone = client.delete("/v1/conversations/api:k?deployment=chat", headers=auth(KEYS, "boss"))
    assert gone.status_code == 200, gone.text
    assert gone.json()["deletedBy"] == "operator:boss"
    assert gone.json()["tenant"] == "default"
    # the conversation was the default tenant's (the open CLI's): its next task starts fresh
    fresh = views.admission_json(rt.dispatcher.submit("chat", "hi", key="k"))
    assert fresh["freshAfterDelete"] == gone.json()["deletedAt"]
    assert "starts it fresh" in fresh["notice"]
    # boss's own key k is another conversation (its tenant's): no tombstone of it
    own = client.post(
        "/v1/tasks",
        json={"deployment": "chat", "input": "hi", "conversationKey": "k"},
        headers=auth(KEYS, "boss"),
    ).json()
    assert own["conversation"] == "api:boss:k" and "freshAfterDelete" not in own


def test_reset_while_a_run_is_active_is_409(rt: Runtime, client: TestClient) -> None:
    adm = rt.dispatcher.submit("chat", "busy", key="k")
    rt.store.start_next(
        adm.task.conversation_id,
        "w",
        datetime.now(UTC),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    for method, path in (
        ("POST", "/v1/conversations/api:k/reset?deployment=chat"),
        ("DELETE", "/v1/conversations/api:k?deployment=chat"),
    ):
        r = client.request(method, path, headers=auth(KEYS, "boss"))
        problem(r, 409, "cancelRunning")


#: Tenant acme's app and operator, tenant bravo's operator (each operator reaches its own).
TENANT_CALLERS = {
    "acme-app": 'source = "api"\ntenant = "acme"\n',
    "acme-ops": 'source = "api"\ntenant = "acme"\noperator = true\n',
    "bravo-ops": 'source = "api"\ntenant = "bravo"\noperator = true\n',
}
TENANT_KEYS = {name: f"{name}-key-0123456789" for name in TENANT_CALLERS}


def test_a_bare_key_is_the_callers_own_tenants_on_every_endpoint(tmp_path: Path) -> None:
    rt = keyed_runtime(tmp_path, TENANT_CALLERS, TENANT_KEYS)

    def key(who: str) -> dict[str, str]:
        return auth(TENANT_KEYS, who)

    try:
        with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
            body = {"deployment": "chat", "input": "acme's secret", "conversationKey": "secret-a"}
            task = c.post("/v1/tasks", json=body, headers=key("acme-app")).json()
            rt.dispatcher.drain(rt.store.get_task(uuid.UUID(task["id"])).conversation_id)
            conv = "/v1/conversations/secret-a"
            for who in ("acme-app", "acme-ops"):  # the caller's API and the operator's agree
                said = c.get(f"{conv}/messages?deployment=chat", headers=key(who)).json()
                assert said["conversation"] == "api:acme:secret-a" and len(said["messages"]) == 2
                listed = c.get("/v1/tasks?conversationKey=secret-a", headers=key(who)).json()
                assert [t["id"] for t in listed["tasks"]] == [task["id"]]
            shown = c.get(f"{conv}?deployment=chat", headers=key("acme-ops")).json()
            assert (shown["tenant"], shown["conversation"]) == ("acme", "api:acme:secret-a")
            # bravo's operator: its own bare key is bravo's; acme's is out of its reach
            missing = "no conversation 'api:bravo:secret-a' in deployment 'chat'"
            for method, path in (
                ("GET", f"{conv}?deployment=chat"),
                ("POST", f"{conv}/reset?deployment=chat"),
                ("DELETE", f"{conv}?deployment=chat"),
            ):
                problem(c.request(method, path, headers=key("bravo-ops")), 404, missing)
            for path in (
                f"{conv}/messages?deployment=chat",
                "/v1/conversations/api:acme:secret-a?deployment=chat",
                f"{conv}?deployment=chat&tenant=acme",
            ):
                problem(c.get(path, headers=key("bravo-ops")), 404, "no conversation")
            none = c.get("/v1/tasks?conversationKey=secret-a", headers=key("bravo-ops")).json()
            assert none["tasks"] == []
            reset = c.post(f"{conv}/reset?deployment=chat", json={}, headers=key("acme-ops"))
            assert reset.status_code == 200 and reset.json()["generation"] == 1, reset.text
            gone = c.delete(f"{conv}?deployment=chat", headers=key("acme-ops"))
            assert gone.status_code == 200 and gone.json()["tenant"] == "acme", gone.text
    finally:
        rt.close()
