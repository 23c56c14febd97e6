"""Memory blocks over HTTP on an embedded SQLite runtime: operator keys only, namespaces,
problem+json for bad input, 404 for an unknown block, versions with their authors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.domain.blocks import MAX_BLOCK_BYTES
from fleet.runtime import Runtime
from tests.conftest import DEPLOYMENTS
from tests.support.callers import auth, keyed_runtime

KEYS = {"boss": "boss-key-0123456789", "shop": "shop-key-0123456789", "app": "app-key-01234"}
# one customer's keys: one tenant, whose memory the operators manage
CALLERS = {
    "boss": 'source = "api"\ntenant = "acme"\noperator = true\n',
    "shop": 'source = "api"\ntenant = "acme"\noperator = true\ndeployments = ["shopchat"]\n',
    "app": 'source = "api"\ntenant = "acme"\n',
}
PROBLEM = "application/problem+json"
BLOCK = "/v1/memory/blocks/user-prefs"


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    deployments = {**DEPLOYMENTS, "shopchat": 'agent = "echo"\nnamespace = "shop"\n'}
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, deployments=deployments)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        yield c


def problem(r: object, status: int, says: str) -> dict:
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"] == PROBLEM  # type: ignore[attr-defined]
    body = r.json()  # type: ignore[attr-defined]
    assert says in body["detail"], body
    return body


OPERATIONS = (
    ("GET", "/v1/memory/blocks", {}),
    ("GET", BLOCK, {}),
    ("PUT", BLOCK, {"json": {"value": "tea"}}),
    ("GET", f"{BLOCK}/versions", {}),
)


def test_operations_are_for_operator_keys_only(rt: Runtime, client: TestClient) -> None:
    for method, path, kw in OPERATIONS:
        r = client.request(method, path, headers=auth(KEYS, "app"), **kw)
        problem(r, 403, "not an operator")
        assert client.request(method, path, **kw).status_code == 401
    assert rt.store.list_blocks(tenant="acme") == []


def test_an_operator_bound_to_deployments_reaches_only_their_namespaces(
    rt: Runtime, client: TestClient
) -> None:
    for method, path, kw in (
        ("GET", "/v1/memory/blocks?namespace=default", {}),
        *OPERATIONS[1:],
    ):
        r = client.request(method, path, headers=auth(KEYS, "shop"), **kw)
        problem(r, 403, "may not use namespace 'default'")
    put = client.put(f"{BLOCK}?namespace=shop", json={"value": "shop"}, headers=auth(KEYS, "shop"))
    assert put.status_code == 200, put.text
    client.put(BLOCK, json={"value": "default"}, headers=auth(KEYS, "boss"))
    mine = client.get("/v1/memory/blocks", headers=auth(KEYS, "shop")).json()["blocks"]
    assert [(b["namespace"], b["block"]) for b in mine] == [("shop", "user-prefs")]
    every = client.get("/v1/memory/blocks", headers=auth(KEYS, "boss")).json()["blocks"]
    assert [b["namespace"] for b in every] == ["default", "shop"]


def test_set_get_list_and_versions_with_their_authors(rt: Runtime, client: TestClient) -> None:
    first = client.put(
        BLOCK, json={"value": "likes tea", "title": "User preferences"}, headers=auth(KEYS, "boss")
    )
    assert first.status_code == 200, first.text
    assert (first.json()["version"], first.json()["namespace"]) == (1, "default")
    second = client.put(
        BLOCK, json={"value": "likes coffee", "expectedVersion": 1}, headers=auth(KEYS, "boss")
    )
    assert second.json()["version"] == 2, second.text
    got = client.get(BLOCK, headers=auth(KEYS, "boss")).json()
    assert (got["value"], got["title"], got["version"], got["bytes"]) == (
        "likes coffee",
        "User preferences",
        2,
        12,
    )
    listed = client.get("/v1/memory/blocks?namespace=default", headers=auth(KEYS, "boss")).json()
    assert [(b["block"], b["version"]) for b in listed["blocks"]] == [("user-prefs", 2)]
    assert "value" not in listed["blocks"][0]
    versions = client.get(f"{BLOCK}/versions", headers=auth(KEYS, "boss")).json()["versions"]
    assert [(v["version"], v["author"], v["value"]) for v in versions] == [
        (1, "operator:boss", "likes tea"),
        (2, "operator:boss", "likes coffee"),
    ]
    # the same store the CLI and the agents use
    assert [v.author for v in rt.store.block_history("default", "user-prefs", tenant="acme")] == [
        "operator:boss",
        "operator:boss",
    ]
    other = client.get(f"{BLOCK}?namespace=shop", headers=auth(KEYS, "boss"))
    problem(other, 404, "no memory block 'user-prefs' in namespace 'shop'")


def test_a_stale_expected_version_is_409_naming_the_current_one(
    rt: Runtime, client: TestClient
) -> None:
    client.put(BLOCK, json={"value": "one"}, headers=auth(KEYS, "boss"))
    client.put(BLOCK, json={"value": "two"}, headers=auth(KEYS, "boss"))
    stale = client.put(
        BLOCK, json={"value": "three", "expectedVersion": 1}, headers=auth(KEYS, "boss")
    )
    problem(stale, 409, "at version 2, not 1")
    fresh = client.put(
        "/v1/memory/blocks/new",
        json={"value": "x", "expectedVersion": 1},
        headers=auth(KEYS, "boss"),
    )
    problem(fresh, 409, "at version 0, not 1")
    assert rt.store.get_block("default", "user-prefs", tenant="acme").value == "two"  # type: ignore[union-attr]
    assert rt.store.get_block("default", "new", tenant="acme") is None


def test_a_value_past_the_size_cap_is_refused_with_the_sizes(
    rt: Runtime, client: TestClient
) -> None:
    client.put(BLOCK, json={"value": "small"}, headers=auth(KEYS, "boss"))
    big = "é" * (MAX_BLOCK_BYTES // 2 + 1)  # two bytes each: one character too many
    r = client.put(BLOCK, json={"value": big}, headers=auth(KEYS, "boss"))
    body = problem(r, 422, f"would be {MAX_BLOCK_BYTES + 2} bytes")
    assert f"at most {MAX_BLOCK_BYTES} bytes" in body["detail"]
    at_cap = client.put(
        BLOCK, json={"value": "é" * (MAX_BLOCK_BYTES // 2)}, headers=auth(KEYS, "boss")
    )
    assert at_cap.status_code == 200, at_cap.text


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "says"),
    [
        ("GET", "/v1/memory/blocks/nope", {}, 404, "no memory block 'nope'"),
        ("GET", "/v1/memory/blocks/nope/versions", {}, 404, "no memory block 'nope'"),
        ("GET", "/v1/memory/blocks/Bad%20Name", {}, 422, "block name 'Bad Name'"),
        ("PUT", "/v1/memory/blocks/-x", {"json": {"value": "v"}}, 422, "block name '-x'"),
        ("GET", f"{BLOCK}?namespace=Shop", {}, 422, "namespace"),
        ("GET", "/v1/memory/blocks?namespace=a%20b", {}, 422, "namespace"),
        ("PUT", BLOCK, {"json": {}}, 422, "value"),
        ("PUT", BLOCK, {"json": {"value": 5}}, 422, "value"),
        ("PUT", BLOCK, {"json": {"value": "a\u0000b"}}, 422, "NUL"),
        ("PUT", BLOCK, {"content": b'{"value": "\\ud800"}'}, 422, "surrogate"),
        ("PUT", BLOCK, {"json": {"value": "v", "expectedVersion": -1}}, 422, "expectedVersion"),
        ("PUT", BLOCK, {"json": {"value": "v", "expectedVersion": "1"}}, 422, "expectedVersion"),
        ("PUT", BLOCK, {"json": {"value": "v", "surprise": 1}}, 422, "surprise"),
        ("PUT", BLOCK, {"json": {"value": "v", "title": "t" * 201}}, 422, "title"),
        ("PUT", BLOCK, {"content": b"{"}, 400, "not valid JSON"),
    ],
)
def test_bad_input_is_problem_json(
    rt: Runtime, client: TestClient, method: str, path: str, kw: dict, status: int, says: str
) -> None:
    headers = auth(KEYS, "boss")
    if "content" in kw:
        headers["content-type"] = "application/json"
    problem(client.request(method, path, headers=headers, **kw), status, says)
    assert rt.store.list_blocks(tenant="acme") == []
