"""ListTenants / GetTenant over HTTP on an embedded SQLite runtime, and the per-tenant gauges of
``/metrics``: operator keys only, each sees the tenants it reaches (another's answers 404 like an
unknown one), and the figures are what was submitted, run and refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.cli.tenants import RemoteTenants
from fleet.config import Settings
from fleet.errors import FleetError
from fleet.runtime import Runtime, build
from fleet.sdk.client import FleetClient
from fleet.store.quotas import TenantFigures
from fleet.views.tenants import count_text, tenant_json
from tests.conftest import write_config
from tests.support.callers import auth, keyed_runtime

KEYS = {
    name: f"{name}-key-0123456789"
    for name in ("acme-app", "bravo-app", "acme-ops", "boss", "plain")
}
CALLERS = {
    "acme-app": 'source = "api"\ntenant = "acme"\n',
    "bravo-app": 'source = "api"\ntenant = "bravo"\n',
    # an operator of acme alone (an operator's reach is its own tenant unless it lists more)
    "acme-ops": 'source = "api"\ntenant = "acme"\noperator = true\n',
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
    "plain": 'source = "api"\ntenant = "bravo"\n',
}
TENANTS = {"acme": "weight = 3\nmax_queued_tasks = 2\ntokens_per_day = 100000\n"}
PROBLEM = "application/problem+json"


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, folders={"tenants": TENANTS})
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        yield c


def submit(client: TestClient, who: str, key: str) -> int:
    r = client.post(
        "/v1/tasks",
        json={"deployment": "chat", "input": "hi", "conversationKey": key},
        headers=auth(KEYS, who),
    )
    return r.status_code


def by_name(body: dict) -> dict[str, dict]:
    return {t["tenant"]: t for t in body["tenants"]}


def workload(rt: Runtime, client: TestClient) -> int:
    """acme: two queued (its cap), one refused; bravo: one run to its end, one running. Returns
    the tokens bravo's finished run used, as the run itself recorded them."""
    assert [submit(client, "acme-app", k) for k in ("a", "b", "c")] == [202, 202, 429]
    done = rt.dispatcher.submit("chat", "first", scope="api:bravo", key="x", tenant="bravo")
    rt.dispatcher.drain(done.task.conversation_id)
    busy = rt.dispatcher.submit("chat", "second", scope="api:bravo", key="y", tenant="bravo")
    rt.store.start_next(
        busy.task.conversation_id,
        "w",
        datetime.now(UTC),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    runs = rt.store.runs_of(done.task.id)
    used = sum(r.usage["prompt_tokens"] + r.usage["completion_tokens"] for r in runs)
    assert used > 0
    return used


def test_an_operator_sees_only_the_tenants_it_reaches(rt: Runtime, client: TestClient) -> None:
    workload(rt, client)
    own = client.get("/v1/tenants", headers=auth(KEYS, "acme-ops"))
    assert own.status_code == 200, own.text
    assert [t["tenant"] for t in own.json()["tenants"]] == ["acme"]
    everyone = client.get("/v1/tenants", headers=auth(KEYS, "boss")).json()
    assert [t["tenant"] for t in everyone["tenants"]] == ["acme", "boss", "bravo", "default"]
    assert client.get("/v1/tenants/acme", headers=auth(KEYS, "acme-ops")).json()["tenant"] == "acme"


def test_another_tenant_answers_404_exactly_like_an_unknown_one(
    rt: Runtime, client: TestClient
) -> None:
    workload(rt, client)  # bravo has tasks: it exists, just not for acme's operator
    other = client.get("/v1/tenants/bravo", headers=auth(KEYS, "acme-ops"))
    unknown = client.get("/v1/tenants/nobody", headers=auth(KEYS, "acme-ops"))
    for r, name in ((other, "bravo"), (unknown, "nobody")):
        assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
        assert r.json()["detail"] == f"no tenant {name!r}"
    assert {k: v for k, v in other.json().items() if k != "detail"} == {
        k: v for k, v in unknown.json().items() if k != "detail"
    }
    assert client.get("/v1/tenants/bravo", headers=auth(KEYS, "boss")).status_code == 200
    assert client.get("/v1/tenants/nobody", headers=auth(KEYS, "boss")).status_code == 404


def test_tenants_are_for_operator_keys_only(client: TestClient) -> None:
    for path in ("/v1/tenants", "/v1/tenants/bravo"):
        r = client.get(path, headers=auth(KEYS, "plain"))
        assert r.status_code == 403 and r.headers["content-type"] == PROBLEM
        assert "not an operator" in r.json()["detail"]
        assert client.get(path).status_code == 401


def test_the_figures_are_what_was_submitted_run_and_refused(
    rt: Runtime, client: TestClient
) -> None:
    used = workload(rt, client)
    shown = by_name(client.get("/v1/tenants", headers=auth(KEYS, "boss")).json())
    acme, bravo = shown["acme"], shown["bravo"]
    assert acme["weight"] == 3 and bravo["weight"] == 1
    assert acme["quotas"] == {"max_queued_tasks": 2, "tokens_per_day": 100000}
    assert bravo["quotas"] == {}
    assert (acme["queued"], acme["running"], acme["conversationsRunning"]) == (2, 0, 0)
    assert (bravo["queued"], bravo["running"], bravo["conversationsRunning"]) == (0, 1, 1)
    assert acme["refusedToday"] == 1 and bravo["refusedToday"] == 0
    assert (acme["tokensToday"], acme["tokensPerDay"]) == (0, 100000)
    assert (bravo["tokensToday"], bravo["tokensPerDay"]) == (used, None)
    assert 0 <= acme["oldestDueSeconds"] < 60 and bravo["oldestDueSeconds"] == 0
    resets = datetime.fromisoformat(acme["budgetResetsAt"].replace("Z", "+00:00"))
    assert (resets.hour, resets.minute, resets.tzinfo) == (0, 0, UTC)
    assert timedelta(0) < resets - datetime.now(UTC) <= timedelta(days=1)
    assert client.get("/v1/tenants/bravo", headers=auth(KEYS, "boss")).json() == bravo
    # embedded: refusals are kept in the store, so another process (the CLI) sees them too
    other = build(rt.settings)
    try:
        assert other.dispatcher.quotas.refusals() == {"acme": 1}
    finally:
        other.close()


def test_an_open_api_shows_every_tenant(tmp_path: Path) -> None:
    rt = build(Settings(home=tmp_path / "home", config_dir=write_config(tmp_path / "config")))
    try:
        rt.dispatcher.submit("chat", "hi", key="k")
        with TestClient(create_app(rt, run_embedded=False)) as client:
            body = client.get("/v1/tenants").json()
    finally:
        rt.close()
    assert [(t["tenant"], t["queued"]) for t in body["tenants"]] == [("default", 1)]


def test_the_clients_tenant_calls_go_through_the_api(rt: Runtime, client: TestClient) -> None:
    workload(rt, client)

    def forward(request: httpx.Request) -> httpx.Response:
        r = client.request(request.method, str(request.url), headers=dict(request.headers))
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)

    transport = httpx.MockTransport(forward)
    with FleetClient("http://fleet.test", KEYS["acme-ops"], transport=transport) as fc:
        remote = RemoteTenants(fc)
        assert [t["tenant"] for t in remote.ls()] == ["acme"]
        assert remote.show("acme")["queued"] == 2
        with pytest.raises(FleetError, match="no tenant 'bravo'"):
            remote.show("bravo")


def test_metrics_have_per_tenant_gauges_for_configured_tenants(
    rt: Runtime, client: TestClient
) -> None:
    used = workload(rt, client)
    rt.dispatcher.submit("chat", "stray", scope="agent:chat", key="s", tenant="ghost")
    text = client.get("/metrics").text
    assert 'fleet_tenant_backlog_tasks{status="queued",tenant="acme"} 2.0' in text
    assert 'fleet_tenant_backlog_tasks{status="running",tenant="bravo"} 1.0' in text
    assert 'fleet_tenant_backlog_tasks{status="queued",tenant="default"} 0.0' in text
    assert f'fleet_tenant_tokens_today{{tenant="bravo"}} {float(used)}' in text
    assert 'fleet_tenant_tokens_today{tenant="acme"} 0.0' in text
    # a tenant no file or caller names is never a label of its own
    assert 'fleet_tenant_backlog_tasks{status="queued",tenant="other"} 1.0' in text
    assert "ghost" not in text


def test_oldest_due_counts_only_what_is_due_and_counts_shorten() -> None:
    from fleet.config.tenants import TenantConfig

    now = datetime(2026, 12, 2, 23, 30, tzinfo=UTC)
    ahead = TenantFigures("acme", queued=1, oldest_due=now + timedelta(minutes=5))
    behind = TenantFigures("acme", queued=1, oldest_due=now - timedelta(seconds=90))
    cfg = TenantConfig(name="acme")
    assert tenant_json(cfg, ahead, 0, now)["oldestDueSeconds"] == 0
    assert tenant_json(cfg, behind, None, now)["oldestDueSeconds"] == 90
    assert tenant_json(cfg, None, None, now)["budgetResetsAt"] == "2026-12-03T00:00:00Z"
    assert [count_text(n) for n in (9999, 12345, 999_999, 2_000_000, 10**12)] == [
        "9,999",
        "12.3k",
        "1M",
        "2M",
        "1,000G",
    ]


def test_openapi_names_both_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ops = {
        op["operationId"]: (path, method, set(op["responses"]))
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    assert ops["ListTenants"][:2] == ("/v1/tenants", "get")
    assert ops["GetTenant"][:2] == ("/v1/tenants/{tenant}", "get")
    assert ops["GetTenant"][2] >= {"200", "401", "403", "404"}


def test_a_task_waiting_for_an_approval_is_waiting_not_queued_or_stuck(tmp_path: Path) -> None:
    from tests.support import approvals

    rt = approvals.approvals_runtime(tmp_path)
    try:
        with TestClient(create_app(rt, run_embedded=False)) as client:
            parked = approvals.park(rt, client, "alpha")
            behind = client.post(
                "/v1/tasks",
                json={"deployment": "shop", "input": "still there?", "conversationKey": "k"},
                headers=approvals.auth("alpha"),
            )
            assert behind.status_code == 202, behind.text
            boss = approvals.auth("boss")
            alpha = client.get("/v1/tenants/alpha", headers=boss).json()
            (listed,) = client.get("/v1/conversations", headers=boss).json()["conversations"]
            only = client.get("/v1/conversations?state=waiting", headers=boss).json()
            text = client.get("/metrics").text
    finally:
        rt.close()
    assert (alpha["queued"], alpha["waiting"], alpha["running"]) == (1, 1, 0)
    assert alpha["oldestDueSeconds"] == 0  # the follow-up waits for the approval, not a worker
    assert (listed["state"], listed["reason"], listed["waiting"]) == ("waiting", None, 2)
    assert [c["conversation"] for c in only["conversations"]] == [parked.conversation]
    assert 'fleet_tenant_backlog_tasks{status="waiting",tenant="alpha"} 1.0' in text
    assert 'fleet_tenant_backlog_tasks{status="queued",tenant="alpha"} 1.0' in text
