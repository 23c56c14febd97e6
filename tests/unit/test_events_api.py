"""StreamTaskEvents over an embedded SQLite runtime: the stream, resuming it, scopes and errors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.dispatch.embedded import run_until_done
from fleet.runtime import Runtime
from fleet.sdk.client import Event, parse_sse
from tests.support.asgi import StreamClient
from tests.support.callers import keyed_runtime
from tests.unit.test_api_problems import CALLERS, KEYS, as_, assert_problem

TOOLS = '/tool current_time {}\n/tool wait {"seconds": 0}'


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


def stream(client: TestClient, task_id: str, **headers: str) -> list[Event]:
    with client.stream("GET", f"/v1/tasks/{task_id}/events", headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return list(parse_sse(r.iter_lines()))


def test_a_finished_task_streams_its_history_and_ends(rt: Runtime, client: TestClient) -> None:
    r = client.post("/v1/tasks", json={"deployment": "tooly", "input": TOOLS})
    task_id = r.json()["id"]
    assert rt.local_waker is not None
    run_until_done(rt.dispatcher, rt.local_waker, uuid.UUID(task_id), 30)

    events = stream(client, task_id)
    assert [(e.id, e.kind) for e in events] == [
        ("0.0.0", "status"),
        ("1.0.0", "status"),
        ("1.1.0", "step"),
        ("1.2.0", "step"),
        ("1.3.0", "step"),
        ("1.4.0", "step"),
        ("1.end.0", "reply"),
        ("1.end.2", "status"),
        ("1.end.3", "end"),
    ]
    queued, running, model, tool = events[:4]
    assert queued.data["status"] == "queued" and queued.data["runId"] is None
    assert running.data["status"] == "running" and running.data["attempt"] == 1
    assert running.data["runId"] and running.data["worker"] and running.data["model"] == "echo"
    assert model.data["kind"] == "model" and model.data["model"]["toolCalls"][0]["name"] == (
        "current_time"
    )
    assert tool.data["kind"] == "tool" and tool.data["name"] == "current_time"
    assert tool.data["tool"]["arguments"] == {} and tool.data["durationMs"] >= 0
    assert events[6].data["reply"].startswith("echo: ")
    assert events[-1].data["task"]["status"] == "succeeded"
    # the same shape GetRun gives a step
    run = client.get(f"/v1/runs/{running.data['runId']}").json()
    assert {k: v for k, v in tool.data.items() if k not in ("taskId", "attempt", "runId")} == (
        run["steps"][1]
    )

    # resuming: after any event, exactly the rest; Last-Event-ID wins over ?after=
    for i, ev in enumerate(events):
        assert ev.id is not None
        rest = stream(client, task_id, **{"Last-Event-ID": ev.id})
        assert [e.id for e in rest] == [e.id for e in events[i + 1 :]]
    r2 = client.get(f"/v1/tasks/{task_id}/events", params={"after": "1.3.0"})
    assert [e.id for e in parse_sse(r2.text.splitlines())] == [e.id for e in events[5:]]


def test_a_cancelled_queued_task_ends_its_stream(client: TestClient) -> None:
    task_id = client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}).json()["id"]
    client.post(f"/v1/tasks/{task_id}/cancel")
    events = stream(client, task_id)
    assert [(e.kind, e.data.get("status")) for e in events] == [
        ("status", "queued"),
        ("status", "cancelled"),
        ("end", None),
    ]
    assert events[1].data["error"] == "cancelled by request"


def test_events_are_in_the_callers_scope(rt: Runtime, client: TestClient) -> None:
    hooked = rt.dispatcher.submit("chat", "from a hook", scope="webhook:gh", key="k").task
    mine = client.post("/v1/tasks", json={"deployment": "tooly", "input": "x"}).json()["id"]
    missing = str(uuid.uuid4())
    hidden = assert_problem(client.get(f"/v1/tasks/{hooked.id}/events"), 404, field="id")
    gone = assert_problem(client.get(f"/v1/tasks/{missing}/events"), 404, field="id")
    assert hidden["detail"].replace(str(hooked.id), "X") == gone["detail"].replace(missing, "X")
    assert_problem(client.get(f"/v1/tasks/{mine}/events", headers=as_("narrow")), 404)
    assert_problem(client.get(f"/v1/tasks/{mine}/events", headers=as_("bot")), 403)
    assert_problem(client.get(f"/v1/tasks/{mine}/events", headers={"Authorization": ""}), 401)


@pytest.mark.parametrize(
    ("headers", "params", "field"),
    [
        ({"Last-Event-ID": "banana"}, {}, "Last-Event-ID"),
        ({}, {"after": "1.2"}, "after"),
    ],
)
def test_a_bad_event_id_is_422_naming_it(
    client: TestClient, headers: dict[str, str], params: dict[str, str], field: str
) -> None:
    task_id = client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}).json()["id"]
    r = client.get(f"/v1/tasks/{task_id}/events", headers=headers, params=params)
    body = assert_problem(r, 422, field=field)
    assert "event id" in body["detail"]


def test_openapi_names_the_operation(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/tasks/{id}/events"]["get"]
    assert op["operationId"] == "StreamTaskEvents"
    assert "text/event-stream" in op["responses"]["200"]["content"]


def test_streams_past_the_process_limit_are_refused_with_503(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.api import events

    monkeypatch.setattr(events, "MAX_STREAMS", 0)
    task_id = client.post("/v1/tasks", json={"deployment": "chat", "input": "x"}).json()["id"]
    r = client.get(f"/v1/tasks/{task_id}/events")
    body = assert_problem(r, 503)
    assert "retry later" in body["detail"] and r.headers["Retry-After"]


def test_an_idle_stream_holds_none_of_the_routes_frames(rt: Runtime, client: TestClient) -> None:
    """Streams are sent after the route returned (``StreamHandoff``): while they idle, the app
    holds no FastAPI exit stack, request or route frame of theirs (each stream held six exit
    stacks before), and they still end when their client goes away."""
    import asyncio
    import gc
    from contextlib import AsyncExitStack
    from typing import Any

    from starlette.requests import Request

    app = create_app(rt, run_embedded=False)
    ids = [
        client.post("/v1/tasks", json={"deployment": "chat", "input": f"t{i}"}).json()["id"]
        for i in range(20)
    ]

    async def go() -> None:
        async with asyncio.timeout(30), app.router.lifespan_context(app):
            hub = app.state.event_hub
            gone = asyncio.Event()
            sent: list[list[dict[str, Any]]] = []

            async def one(task_id: str) -> None:
                client = StreamClient(gone)
                sent.append(client.sent)
                path = f"/v1/tasks/{task_id}/events"
                scope = {
                    "type": "http",
                    "asgi": {"version": "3.0"},
                    "http_version": "1.1",
                    "method": "GET",
                    "scheme": "http",
                    "path": path,
                    "raw_path": path.encode(),
                    "root_path": "",
                    "query_string": b"",
                    "headers": [(b"authorization", f"Bearer {KEYS['ops']}".encode())],
                    "client": ("127.0.0.1", 1),
                    "server": ("127.0.0.1", 80),
                }
                await app(scope, client.receive, client.send)

            streams = [asyncio.create_task(one(t)) for t in ids]
            while not (
                hub.followers == len(ids)
                and all(any(b"event: status" in m.get("body", b"") for m in s) for s in sent)
            ):
                await asyncio.sleep(0.01)
            gc.collect()
            alive = gc.get_objects()
            assert sum(isinstance(o, AsyncExitStack) for o in alive) < len(ids)
            assert sum(isinstance(o, Request) for o in alive) < len(ids)
            assert all(s[0]["status"] == 200 for s in sent)
            gone.set()
            await asyncio.gather(*streams)
            assert hub.followers == 0
            assert all(
                s[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
                for s in sent
            )

    asyncio.run(go())
