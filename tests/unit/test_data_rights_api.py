"""Export and erasure of a person's data over HTTP on an embedded SQLite runtime: who may,
what an export holds, what an erasure removes and refuses afterwards, bad input."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.domain import rights as rules
from fleet.runtime import Runtime
from tests.support.callers import auth, keyed_runtime

KEYS = {
    "boss": "boss-key-0123456789",
    "acme-ops": "acme-ops-key-0123456789",
    "privacy": "privacy-key-0123456789",
    "app": "app-key-0123456789",
}
CALLERS = {
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
    "acme-ops": 'source = "api"\noperator = true\ntenant = "acme"\n',
    "privacy": 'source = "api"\nscope = "api"\nerase = true\n',
    "app": 'source = "api"\nscope = "api"\n',
}
# boss's own tenant is its name: it names the default tenant where it acts on it
PROBLEM = "application/problem+json"
WHO = "ada@example.com/1"  # a resource id with characters a path must carry
OTHER = "bob@example.com"


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        yield c


def ran(rt: Runtime, text: str, key: str, resource: str | None, tenant: str = "default") -> None:
    adm = rt.dispatcher.submit("chat", text, key=key, resource_id=resource, tenant=tenant)
    rt.dispatcher.drain(adm.task.conversation_id, tenant=tenant)


def lines(r: object) -> list[dict]:
    assert r.status_code == 200, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"].startswith("application/x-ndjson")  # type: ignore[attr-defined]
    return [json.loads(x) for x in r.text.splitlines()]  # type: ignore[attr-defined]


def path(resource: str) -> str:
    return f"/v1/resources/{quote(resource, safe='')}"


def test_an_export_holds_the_resources_conversations_and_nothing_of_another(
    rt: Runtime, client: TestClient
) -> None:
    ran(rt, "canary-ada-1", "k1", WHO)
    ran(rt, "canary-ada-2", "k2", WHO)
    ran(rt, "canary-bob", "k3", OTHER)
    got = lines(client.get(f"{path(WHO)}/export?tenant=default", headers=auth(KEYS, "boss")))
    assert got[0]["kind"] == "export" and got[0]["resource"] == WHO
    assert {ln["kind"] for ln in got} <= set(rules.LINE_KINDS) | {"inbox"}
    text = json.dumps(got)
    assert "canary-ada-1" in text and "canary-ada-2" in text and "canary-bob" not in text
    assert sum(ln["kind"] == "conversation" for ln in got) == 2
    replies = [ln for ln in got if ln["kind"] == "message" and ln["record"]["role"] == "assistant"]
    assert len(replies) == 2


def test_an_erasure_removes_every_row_and_refuses_new_tasks_naming_the_resource(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    ran(rt, "canary-ada-1", "k1", WHO)
    ran(rt, "canary-ada-2", "k2", WHO)
    ran(rt, "canary-bob", "k3", OTHER)
    r = client.delete(path(WHO), headers=auth(KEYS, "privacy"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["counts"]["conversations"] == 2 and body["counts"]["tasks"] == 2
    assert body["counts"]["messages"] == 4 and body["refusedUntil"]
    assert list(body["counts"]) == list(rules.KINDS)
    db = sqlite3.connect(tmp_path / "home" / "fleet.db")
    dumped = "\n".join(db.iterdump())
    db.close()
    assert "canary-ada" not in dumped and "canary-bob" in dumped
    assert WHO not in dumped  # the tombstone names it by digest only
    # nor in the files' bytes: freed pages are overwritten, the write-ahead log emptied
    files = b"".join(p.read_bytes() for p in (tmp_path / "home").glob("fleet.db*"))
    assert b"canary-ada" not in files and b"canary-bob" in files
    again = client.delete(f"{path(WHO)}?tenant=default", headers=auth(KEYS, "boss"))
    assert again.status_code == 200 and again.json()["counts"]["conversations"] == 0
    refused = client.post(
        "/v1/tasks",
        json={"deployment": "chat", "input": "again", "resourceId": WHO},
        headers=auth(KEYS, "app"),
    )
    assert refused.status_code == 409 and refused.headers["content-type"] == PROBLEM
    assert "erased" in refused.json()["detail"] and WHO not in refused.json()["detail"]
    ok = client.post(
        "/v1/tasks",
        json={"deployment": "chat", "input": "fine", "resourceId": OTHER},
        headers=auth(KEYS, "app"),
    )
    assert ok.status_code in (200, 201, 202), ok.text


def test_who_may_export_and_erase(rt: Runtime, client: TestClient) -> None:
    ran(rt, "canary-ada", "k1", WHO)
    ran(rt, "canary-acme", "k9", WHO, tenant="acme")
    for method, suffix in (("GET", "/export"), ("DELETE", "")):
        r = client.request(method, path(WHO) + suffix, headers=auth(KEYS, "app"))
        assert r.status_code == 403 and r.headers["content-type"] == PROBLEM, r.text
        assert client.request(method, path(WHO) + suffix).status_code == 401
        # an operator of acme cannot reach default's; the erase caller only its own tenant
        outside = client.request(
            method, path(WHO) + suffix + "?tenant=acme", headers=auth(KEYS, "privacy")
        )
        assert outside.status_code == 404, outside.text
    mine = lines(client.get(f"{path(WHO)}/export", headers=auth(KEYS, "acme-ops")))
    assert "canary-acme" in json.dumps(mine) and "canary-ada" not in json.dumps(mine)
    r = client.get(f"{path(WHO)}/export?tenant=default", headers=auth(KEYS, "acme-ops"))
    assert r.status_code == 404
    assert (
        client.delete(f"{path(WHO)}?tenant=default", headers=auth(KEYS, "acme-ops")).status_code
        == 404
    )
    assert rt.store.resource_tenants(WHO) == ["acme", "default"], "nothing erased"


def test_a_conversation_is_exported_and_erased_alone(rt: Runtime, client: TestClient) -> None:
    ran(rt, "canary-one", "k1", WHO)
    ran(rt, "canary-two", "k2", WHO)
    got = lines(
        client.get(
            "/v1/conversations:export?deployment=chat&conversationKey=api:k1",
            headers=auth(KEYS, "privacy"),
        )
    )
    assert "canary-one" in json.dumps(got) and "canary-two" not in json.dumps(got)
    r = client.post(
        "/v1/conversations:erase",
        json={"deployment": "chat", "conversationKey": "api:k1"},
        headers=auth(KEYS, "privacy"),
    )
    assert r.status_code == 200 and r.json()["counts"]["conversations"] == 1, r.text
    assert len(rt.store.resource_conversations("default", WHO)) == 1
    # the key starts afresh (a conversation's tombstone), the resource is not refused
    again = rt.dispatcher.submit("chat", "new", key="k1", resource_id=WHO)
    assert again.fresh_after_delete is not None
    missing = client.post(
        "/v1/conversations:erase",
        json={"deployment": "chat", "conversationKey": "api:nope"},
        headers=auth(KEYS, "privacy"),
    )
    assert missing.status_code == 404


def test_bad_input_is_refused_and_changes_nothing(rt: Runtime, client: TestClient) -> None:
    ran(rt, "canary-ada", "k1", WHO)
    bad_tenant = client.delete(f"{path(WHO)}?tenant=Bad!", headers=auth(KEYS, "boss"))
    assert bad_tenant.status_code == 422 and bad_tenant.headers["content-type"] == PROBLEM
    unknown = client.delete(f"{path(WHO)}?tenant=nosuch", headers=auth(KEYS, "boss"))
    assert unknown.status_code == 422 and "no tenant named 'nosuch'" in unknown.json()["detail"]
    control = client.delete(path("x\u0007y"), headers=auth(KEYS, "boss"))
    assert control.status_code == 422, control.text
    assert rt.store.resource_tenants(WHO) == ["default"]


# -- the audit log ---------------------------------------------------------------------------


def entries(client: TestClient, who: str = "boss", **params: str) -> list[dict]:
    r = client.get("/v1/audit", params=params, headers=auth(KEYS, who))
    assert r.status_code == 200, r.text
    return r.json()["entries"]


def test_every_action_is_recorded_with_its_actor_and_no_resource_id(
    rt: Runtime, client: TestClient
) -> None:
    ran(rt, "canary-ada", "k1", WHO)
    client.get(f"{path(WHO)}/export", headers=auth(KEYS, "privacy"))
    client.delete(path(WHO), headers=auth(KEYS, "privacy"))
    client.post(
        "/v1/conversations/api:k2/reset?deployment=chat&tenant=default", headers=auth(KEYS, "boss")
    )  # 404: recorded as refused
    found = entries(client)
    assert [(e["action"], e["actor"], e["outcome"]) for e in found[:3]] == [
        ("conversation.reset", "operator:boss", "refused 404"),
        ("resource.erase", "caller:privacy", "ok"),
        ("resource.export", "caller:privacy", "ok"),
    ]
    erased = found[1]
    assert erased["tenant"] == "default" and erased["object"].startswith("resource:")
    assert erased["detail"]["counts"]["conversations"] == 1
    assert WHO not in json.dumps(found) and "canary" not in json.dumps(found)
    assert found[0]["address"] == "testclient"


def test_a_flood_of_bad_keys_is_one_entry_a_minute_per_address(client: TestClient) -> None:
    for _ in range(50):
        r = client.get("/v1/tasks", headers={"Authorization": "Bearer nope-nope-nope"})
        assert r.status_code == 401
    refused = entries(client, action="key.refused")
    assert len(refused) == 1 and refused[0]["tenant"] is None
    assert refused[0]["detail"] == {"refusals": 1} and refused[0]["actor"] == "unknown key"


def test_an_operator_sees_only_the_entries_of_tenants_it_reaches(
    rt: Runtime, client: TestClient
) -> None:
    ran(rt, "canary-acme", "k9", WHO, tenant="acme")
    client.delete(f"{path(WHO)}?tenant=acme", headers=auth(KEYS, "acme-ops"))
    client.delete(f"{path(WHO)}?tenant=default", headers=auth(KEYS, "acme-ops"))  # 404, acme's own
    client.delete(path(WHO), headers=auth(KEYS, "privacy"))
    mine = entries(client, "acme-ops")
    assert {e["tenant"] for e in mine} == {"acme"} and len(mine) == 2
    assert {e["outcome"] for e in mine} == {"ok", "refused 404"}
    assert client.get("/v1/audit?tenant=default", headers=auth(KEYS, "acme-ops")).status_code == 404
    assert client.get("/v1/audit", headers=auth(KEYS, "privacy")).status_code == 403
    everyone = entries(client)
    assert {e["tenant"] for e in everyone} == {"acme", "default"}
    assert entries(client, action="resource", actor="caller:privacy")[0]["tenant"] == "default"
