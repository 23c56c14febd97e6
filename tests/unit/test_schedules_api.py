"""CreateSchedule, ListSchedules, GetSchedule, DeleteSchedule over HTTP on an embedded SQLite
runtime: a schedule is its caller's (another tenant can neither see, list nor delete it), bad
values answer 422 naming the field, never 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.runtime import Runtime
from tests.support.callers import auth, keyed_runtime

KEYS = {name: f"{name}-key-0123456789" for name in ("acme", "bravo", "acme-two")}
CALLERS = {
    "acme": 'source = "api"\n',
    "bravo": 'source = "api"\n',
    "acme-two": 'source = "api"\ntenant = "acme"\ndeployments = ["chat"]\n',
}
PROBLEM = "application/problem+json"
DIGEST = {
    "name": "digest",
    "deployment": "chat",
    "cron": "0 8 * * 1-5",
    "timezone": "Europe/Berlin",
    "input": "Write today's digest.",
    "conversation": "daily-digest",
    "catchUp": "none",
}

#: A schedule of acme's in its config (``schedules/pulse.toml``).
PULSE = 'deployment = "chat"\nevery = "15m"\ninput = "pulse"\ncaller = "acme"\n'


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, folders={"schedules": {"pulse": PULSE}})
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        yield c


def test_create_list_get_delete(client: TestClient) -> None:
    r = client.post("/v1/schedules", json=DIGEST, headers=auth(KEYS, "acme"))
    assert r.status_code == 201, r.text
    made = r.json()
    assert r.headers["location"] == "/v1/schedules/digest"
    assert made["scope"] == "api:acme" and made["tenant"] == "acme" and made["caller"] == "acme"
    assert made["cron"] == "0 8 * * 1-5" and made["catchUp"] == "none"
    assert made["overlap"] == "skip" and made["source"] == "api" and made["state"] == "new"
    assert made["nextTick"].endswith(":00:00Z")  # 08:00 Berlin is 06:00 or 07:00 UTC
    listed = client.get("/v1/schedules", headers=auth(KEYS, "acme")).json()["schedules"]
    # acme's config/schedules/pulse.toml too, shown before any beat stored it (nothing written)
    assert [(s["name"], s["state"]) for s in listed] == [("digest", "new"), ("pulse", "unsynced")]
    assert client.get("/v1/schedules/digest", headers=auth(KEYS, "acme")).json() == made
    pulse = client.get("/v1/schedules/pulse", headers=auth(KEYS, "acme")).json()
    assert pulse | {"createdAt": None} == listed[1] | {"createdAt": None}
    assert client.get("/v1/schedules/pulse", headers=auth(KEYS, "bravo")).status_code == 404
    assert client.delete("/v1/schedules/digest", headers=auth(KEYS, "acme")).status_code == 204
    again = client.delete("/v1/schedules/digest", headers=auth(KEYS, "acme"))
    assert again.status_code == 404 and again.headers["content-type"] == PROBLEM


def test_another_tenant_can_neither_see_list_nor_delete_it(client: TestClient) -> None:
    assert client.post("/v1/schedules", json=DIGEST, headers=auth(KEYS, "acme")).status_code == 201
    # acme's other caller shares acme's tenant and scope: it sees acme's schedules
    mates = client.get("/v1/schedules", headers=auth(KEYS, "acme-two")).json()["schedules"]
    assert [s["name"] for s in mates] == ["digest", "pulse"]
    assert client.get("/v1/schedules", headers=auth(KEYS, "bravo")).json() == {"schedules": []}
    theirs = client.get("/v1/schedules/digest", headers=auth(KEYS, "bravo"))
    missing = client.get("/v1/schedules/nothing", headers=auth(KEYS, "bravo"))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace("digest", "nothing") == missing.json()["detail"]
    gone = client.delete("/v1/schedules/digest", headers=auth(KEYS, "bravo"))
    assert gone.status_code == 404
    assert gone.json()["detail"] == theirs.json()["detail"]
    # the same name is free in bravo's own scope, and acme's schedule is untouched
    mine = client.post("/v1/schedules", json=DIGEST, headers=auth(KEYS, "bravo"))
    assert mine.status_code == 201 and mine.json()["scope"] == "api:bravo"
    kept = client.get("/v1/schedules/digest", headers=auth(KEYS, "acme"))
    assert kept.status_code == 200 and kept.json()["scope"] == "api:acme"


def test_a_file_schedule_is_its_callers_and_is_not_deleted_over_the_api(
    rt: Runtime, client: TestClient
) -> None:
    from fleet.dispatch.schedules import Scheduler

    Scheduler(rt.dispatcher).sync()
    listed = client.get("/v1/schedules", headers=auth(KEYS, "acme")).json()["schedules"]
    assert [(s["name"], s["source"], s["every"]) for s in listed] == [("pulse", "file", 900.0)]
    assert client.get("/v1/schedules", headers=auth(KEYS, "bravo")).json() == {"schedules": []}
    r = client.delete("/v1/schedules/pulse", headers=auth(KEYS, "acme"))
    assert r.status_code == 409 and "config/schedules/pulse.toml" in r.json()["detail"]
    taken = client.post(
        "/v1/schedules", json={**DIGEST, "name": "pulse"}, headers=auth(KEYS, "acme")
    )
    assert taken.status_code == 409 and "config/schedules" in taken.json()["detail"]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"cron": "0 8 * * 1-8"}, "cron", "day of week 8 is out of range 0-7"),
        ({"cron": "0 8 * *"}, "cron", "has 4 fields"),
        ({"cron": None, "every": "500ms"}, "every", "at least 1s"),
        ({"cron": None, "every": "often"}, "every", "expected a duration"),
        ({"every": "15m"}, "body", "exactly one of cron"),
        ({"timezone": "Europe/Berlinn"}, "timezone", "'Europe/Berlinn' is not a time zone name"),
        ({"overlap": "wait"}, "overlap", "'skip' or 'queue'"),
        ({"catchUp": "all"}, "catchUp", "'latest' or 'none'"),
        ({"endAt": "2027-06-30T00:00:00"}, "endAt", "timezone"),
        ({"name": "Daily Digest"}, "name", "lowercase letters"),
        ({"input": ""}, "input", "at least 1 character"),
        ({"deployment": "nope"}, "deployment", "no deployment named 'nope'; yours: "),
        ({"conversation": ""}, "conversation", "must be 1-"),
        ({"cadence": "daily"}, "cadence", "Extra inputs"),
    ],
)
def test_bad_values_answer_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str, says: str
) -> None:
    body = {k: v for k, v in {**DIGEST, **change}.items() if v is not None}
    r = client.post("/v1/schedules", json=body, headers=auth(KEYS, "acme"))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["invalidParams"][0]["name"] == field, problem
    assert says in problem["detail"], problem


def test_an_end_before_the_first_tick_is_refused_naming_the_field_as_sent(
    client: TestClient,
) -> None:
    """The caller sent ``endAt``: the detail names ``endAt``, never the stored ``end_at``."""
    body = {**DIGEST, "endAt": "2020-01-01T00:00:00Z"}
    r = client.post("/v1/schedules", json=body, headers=auth(KEYS, "acme"))
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["invalidParams"][0]["name"] == "endAt"
    assert problem["detail"] == (
        "endAt 2020-01-01T00:00:00+00:00 is not after the first tick: it would never fire; "
        "give a later time or leave it out"
    )
    listed = client.get("/v1/schedules", headers=auth(KEYS, "acme")).json()["schedules"]
    assert "digest" not in [s["name"] for s in listed]


def test_a_deployment_the_caller_may_not_use_is_forbidden(client: TestClient) -> None:
    body = {**DIGEST, "deployment": "solo"}
    r = client.post("/v1/schedules", json=body, headers=auth(KEYS, "acme-two"))
    assert r.status_code == 403 and "may not use deployment 'solo'" in r.json()["detail"]
    # nor may its ticks continue a conversation of another source's scope
    body = {**DIGEST, "conversation": "webhook:gh:7"}
    r = client.post("/v1/schedules", json=body, headers=auth(KEYS, "acme"))
    assert r.status_code == 403 and r.json()["invalidParams"][0]["name"] == "conversation"
    assert "belongs to scope 'webhook:gh'" in r.json()["detail"]


def test_the_clis_remote_schedules_go_through_the_api(client: TestClient) -> None:
    import httpx

    from fleet.cli.schedules import RemoteSchedules
    from fleet.errors import Conflict, InputError, NotFound
    from fleet.sdk.client import FleetClient

    def forward(request: httpx.Request) -> httpx.Response:
        r = client.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)

    transport = httpx.MockTransport(forward)
    with FleetClient("http://fleet.test", KEYS["bravo"], transport=transport) as fc:
        remote = RemoteSchedules(fc)
        body = {k: v for k, v in DIGEST.items() if k != "catchUp"} | {"catchUp": None}
        made = remote.add(body, None)
        assert made["scope"] == "api:bravo" and made["catchUp"] == "latest"
        assert [s["name"] for s in remote.ls()] == ["digest"]
        with pytest.raises(Conflict):
            remote.add(body, None)
        with pytest.raises(InputError, match="day of week 8"):
            remote.add({**body, "name": "other", "cron": "0 8 * * 1-8"}, None)
        remote.rm("digest", None)
        with pytest.raises(NotFound, match="no schedule named 'digest'"):
            remote.rm("digest", None)


def test_an_embedded_server_fires_its_schedules(rt: Runtime) -> None:
    """No beat embedded: ``fleet serve`` fires the ticks and runs their tasks itself."""
    from fleet.store import TaskFilter
    from tests.support.fleet import wait_for

    def ticked() -> list[Any]:
        found = rt.store.list_tasks(TaskFilter(limit=100))
        return [t for t in found if t.labels.get("schedule") == "pulse2" and t.status.terminal]

    with TestClient(create_app(rt), raise_server_exceptions=False) as c:
        body = {"name": "pulse2", "deployment": "chat", "every": "1s", "input": "tick"}
        assert c.post("/v1/schedules", json=body, headers=auth(KEYS, "bravo")).status_code == 201
        done = wait_for(ticked, 20, what="a tick's task run to its end")
    assert done[0].result is not None and done[0].scope == "api:bravo"
    assert done[0].labels["tick"].endswith("Z")
