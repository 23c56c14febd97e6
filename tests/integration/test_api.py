"""The HTTP API against `fleet serve`, real Celery workers, PostgreSQL and Redis.

Also the CLI talking to that server (``--server``), the worker metrics port, and outages cut
with a proxy in front of PostgreSQL and Redis (nothing shared is ever stopped).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import make_url

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.runtime import Runtime, build
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for
from tests.support.proxy import proxy

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

OPS_KEY, BOT_KEY = "ops-key-0123456789abcdef", "bot-key-0123456789abcdef"
PROBLEM = "application/problem+json"


def write_callers(config: Path) -> Path:
    folder = config / "callers"
    folder.mkdir(exist_ok=True)
    for name, source, key in (("ops", "api", OPS_KEY), ("bot", "a2a", BOT_KEY)):
        digest = hashlib.sha256(key.encode()).hexdigest()
        (folder / f"{name}.toml").write_text(f'source = "{source}"\nkey_sha256 = "{digest}"\n')
    return config


@pytest.fixture
def config(config_dir: Path) -> Path:
    return write_callers(config_dir)


def settings_for(tmp: Path, database_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(tmp, database_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return settings_for(tmp_path, pg_url, redis_url, config)


@dataclass
class Api:
    fleet: Fleet
    url: str
    http: httpx.Client

    def submit(self, **body: object) -> dict:
        r = self.http.post("/v1/tasks", json={"deployment": "chat", "input": "hello", **body})
        assert r.status_code == 202, r.text
        return r.json()

    def finished(self, task_id: str, wait: float = 30) -> dict:
        r = self.http.get(f"/v1/tasks/{task_id}", params={"wait": wait}, timeout=wait + 10)
        assert r.status_code == 200, r.text
        task = r.json()
        assert task["status"] in ("succeeded", "failed", "cancelled"), task
        return task


@pytest.fixture
def api(fleet: Fleet) -> Iterator[Api]:
    fleet.worker("w1", concurrency=2)
    url = fleet.serve()
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {OPS_KEY}"}, timeout=30
    ) as http:
        yield Api(fleet, url, http)


def assert_problem(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["detail"] and "Traceback" not in r.text
    return body


# -- submit, wait, continue ---------------------------------------------------------------------


def test_submit_wait_and_continue_the_conversation_with_the_scoped_key(api: Api) -> None:
    first = api.submit(input="my order is late", conversationKey="ticket-4711")
    assert first["conversation"] == "api:ops:ticket-4711" and first["seq"] == 1  # ops' tenant
    done = api.finished(first["id"])
    assert done["status"] == "succeeded"
    assert done["reply"] == "echo: my order is late [history: 0]"
    again = api.submit(input="it was order 1234", conversationKey=done["conversation"])
    assert (again["conversation"], again["seq"]) == ("api:ops:ticket-4711", 2)
    assert api.finished(again["id"])["reply"] == "echo: it was order 1234 [history: 2]"
    messages = api.http.get(
        "/v1/conversations/api:ticket-4711/messages", params={"deployment": "chat"}
    ).json()["messages"]
    assert [(m["role"], m["taskId"]) for m in messages] == [
        ("user", first["id"]),
        ("assistant", first["id"]),
        ("user", again["id"]),
        ("assistant", again["id"]),
    ]
    listed = api.http.get("/v1/tasks", params={"conversationKey": "api:ticket-4711"}).json()
    assert [t["id"] for t in listed["tasks"]] == [first["id"], again["id"]]


def test_get_task_long_polls_until_the_run_finishes(api: Api) -> None:
    task = api.submit(deployment="sleepy", input="slow one")
    r = api.http.get(f"/v1/tasks/{task['id']}", params={"wait": 0})
    assert r.json()["status"] in ("queued", "leased", "running")
    done = api.finished(task["id"], wait=30)
    assert done["status"] == "succeeded" and done["startedAt"] and done["finishedAt"]


def test_collect_answers_with_merged_into(api: Api) -> None:
    first = api.submit(deployment="burst", input="part 1", conversationKey="burst-1")
    second = api.submit(deployment="burst", input="part 2", conversationKey="burst-1")
    assert first["mergedInto"] is None
    assert second["mergedInto"] == first["id"] == second["id"]
    done = api.finished(first["id"])
    assert done["status"] == "succeeded" and done["submissions"] == 2
    assert [p["text"] for p in done["input"]] == ["part 1", "part 2"]


def test_an_idempotency_key_makes_one_task(api: Api) -> None:
    first = api.submit(input="once", idempotencyKey="delivery-42")
    again = api.submit(input="once", idempotencyKey="delivery-42")
    assert again["id"] == first["id"] and again["duplicate"] is True
    api.finished(first["id"])
    later = api.submit(input="once", idempotencyKey="delivery-42")
    assert later["id"] == first["id"] and later["status"] == "succeeded"
    assert len(api.http.get("/v1/tasks").json()["tasks"]) == 1


def test_cancel_a_queued_task_behind_a_running_one(api: Api, rt: Runtime) -> None:
    running = api.submit(deployment="sleepy", input="first", conversationKey="c")
    queued = api.submit(deployment="sleepy", input="second", conversationKey="c")
    r = api.http.post(f"/v1/tasks/{queued['id']}/cancel")
    assert r.status_code == 200 and r.json()["effect"] == "cancelled"
    assert api.finished(running["id"])["status"] == "succeeded"
    assert api.finished(queued["id"])["status"] == "cancelled"
    assert rt.store.runs_of(uuid.UUID(queued["id"])) == []


# -- who may do what ------------------------------------------------------------------------------


def test_callers_only_see_and_continue_their_own_scope(api: Api, rt: Runtime) -> None:
    anonymous = httpx.post(f"{api.url}/v1/tasks", json={"deployment": "chat", "input": "x"})
    assert_problem(anonymous, 401)
    assert anonymous.headers["www-authenticate"] == "Bearer"
    theirs = rt.dispatcher.submit("chat", "private", scope="a2a:bot", key="ctx-1").task
    assert_problem(api.http.get(f"/v1/tasks/{theirs.id}"), 404)
    assert_problem(api.http.post(f"/v1/tasks/{theirs.id}/cancel"), 404)
    forbidden = api.http.post(
        "/v1/tasks", json={"deployment": "chat", "input": "x", "conversationKey": "a2a:bot:ctx-1"}
    )
    assert assert_problem(forbidden, 403)["invalidParams"][0]["name"] == "conversationKey"
    other_source = httpx.get(f"{api.url}/v1/tasks", headers={"Authorization": f"Bearer {BOT_KEY}"})
    assert_problem(other_source, 403)
    assert api.http.get("/v1/tasks").json()["tasks"] == []


def test_bad_input_is_a_422_problem_naming_the_field(api: Api) -> None:
    r = api.http.post(
        "/v1/tasks", json={"deployment": "chat", "input": "x", "labels": {"a b": "c"}}
    )
    body = assert_problem(r, 422)
    assert body["invalidParams"][0]["name"].startswith("labels")
    r = api.http.get("/v1/tasks/not-a-task")
    assert assert_problem(r, 422)["invalidParams"][0]["name"] == "id"
    # a key JSON escapes as a lone surrogate (no UTF-8 form) is quoted back, not a 500
    raw = b'{"deployment": "chat", "input": "ok", "labels": {"\\ud800": "v"}}'
    r = api.http.post("/v1/tasks", content=raw, headers={"Content-Type": "application/json"})
    assert assert_problem(r, 422)["invalidParams"][0]["name"] == "labels.\ud800"
    # an empty conversation key is refused, not taken for a new conversation's
    r = api.http.get("/v1/conversations//messages", params={"deployment": "chat"})
    assert r.status_code in (404, 422) and "api:" not in r.text, r.text
    # a body that is not UTF-8 is a 400 naming the body
    r = api.http.post(
        "/v1/tasks", content=b'{"input": "\xff"}', headers={"Content-Type": "application/json"}
    )
    assert assert_problem(r, 400)["invalidParams"][0]["name"] == "body"


# -- the CLI through the server -----------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli(*args: str, server: str, key: str = OPS_KEY) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FLEET_SERVER": server,
        "FLEET_API_KEY": key,
        # Proof that it never touches a store: neither of these is usable.
        "FLEET_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/none",
        "FLEET_CONFIG_DIR": "/nonexistent",
    }
    env.pop("FLEET_REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_cli_talks_to_the_server(api: Api) -> None:
    first = cli("run", "chat", "hello", "-c", "t1", "--label", "team=cli", server=api.url)
    assert (first.returncode, first.stdout.strip()) == (0, "echo: hello [history: 0]"), first.stderr
    second = cli("run", "chat", "again", "-c", "api:t1", "--json", server=api.url)
    assert second.returncode == 0, second.stderr
    task = json.loads(second.stdout)
    assert task["reply"] == "echo: again [history: 2]" and task["conversation"] == "api:ops:t1"
    assert task["duplicate"] is False and task["mergedInto"] is None
    listed = cli("tasks", "ls", "-c", "api:t1", "--json", server=api.url)
    tasks = json.loads(listed.stdout)
    assert [t["seq"] for t in tasks] == [1, 2] and tasks[0]["labels"] == {"team": "cli"}
    shown = cli("tasks", "show", task["id"], server=api.url)
    assert shown.returncode == 0 and "succeeded" in shown.stdout
    cancelled = cli("tasks", "cancel", task["id"], server=api.url)
    assert cancelled.returncode == 0 and "already succeeded" in cancelled.stdout
    # the short id `tasks ls` prints works through the server too (ListTasks?idPrefix=)
    short = cli("tasks", "show", task["id"][:8], server=api.url)
    assert short.returncode == 0 and task["id"] in short.stdout, short.stderr
    assert "echo: again [history: 2]" in short.stdout
    prefixed = cli("tasks", "cancel", task["id"][:13].upper(), "--json", server=api.url)
    assert prefixed.returncode == 0, prefixed.stderr
    assert json.loads(prefixed.stdout)["task"]["id"] == task["id"]
    r = api.http.get("/v1/tasks", params={"idPrefix": task["id"][:6]})
    assert task["id"] in [t["id"] for t in r.json()["tasks"]], r.text
    r = api.http.get("/v1/tasks", params={"idPrefix": "zz"})
    assert assert_problem(r, 422)["invalidParams"][0]["name"] == "idPrefix"


def test_cli_errors_from_the_server_keep_the_exit_codes(api: Api) -> None:
    missing = cli("tasks", "show", str(uuid.uuid4()), server=api.url)
    assert missing.returncode == 2
    assert missing.stderr.startswith("fleet: no task with id") and missing.stderr.count("\n") == 1
    bad_key = cli("tasks", "ls", server=api.url, key="wrong")
    assert (bad_key.returncode, bad_key.stderr) == (2, "fleet: unknown API key\n")
    bad_input = cli("run", "chat", "x", "-c", "a2a:bot:ctx", server=api.url)
    assert bad_input.returncode == 2 and "belongs to scope" in bad_input.stderr
    unfinished = cli("run", "sleepy", "slow", "--timeout", "0.2", server=api.url)
    assert unfinished.returncode == 1 and "is still" in unfinished.stderr
    down = cli("tasks", "ls", server=f"http://127.0.0.1:{closed_port()}")
    assert down.returncode == 1 and down.stderr.startswith("fleet: cannot reach")


# -- metrics --------------------------------------------------------------------------------------


def metric(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_from_the_api_and_from_a_worker_metrics_port(fleet: Fleet, tmp_path: Path) -> None:
    port = closed_port()
    argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", "2", "--metrics-port", str(port)]
    env = {k: v for k, v in fleet.env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    worker = Proc("mworker", argv, env, tmp_path / "m.log")
    fleet.procs.append(worker)
    worker.wait_log(r"ready\.")
    url = fleet.serve()
    headers = {"Authorization": f"Bearer {OPS_KEY}"}
    ids = []
    for i in range(3):
        r = httpx.post(
            f"{url}/v1/tasks",
            json={"deployment": "chat", "input": f"m{i}"},
            headers=headers,
        )
        ids.append(r.json()["id"])
    for task_id in ids:
        httpx.get(f"{url}/v1/tasks/{task_id}", params={"wait": 30}, headers=headers, timeout=40)
    api_text = httpx.get(f"{url}/metrics").text
    assert metric(api_text, 'fleet_tasks_submitted_total{deployment="chat",outcome="new"}') == 3
    assert metric(api_text, 'fleet_backlog_tasks{deployment="chat",status="queued"}') == 0
    assert metric(api_text, "fleet_backlog_up") == 1

    def worker_counts() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        done = metric(text, 'fleet_tasks_finished_total{deployment="chat",status="succeeded"}')
        return text if done == 3 else None

    text = wait_for(worker_counts, 20, what="the worker's metrics to count 3 finished runs")
    assert metric(text, 'fleet_tasks_started_total{deployment="chat"}') == 3
    assert metric(text, 'fleet_queue_wait_seconds_count{deployment="chat"}') == 3
    assert (
        metric(text, 'fleet_run_duration_seconds_count{deployment="chat",status="succeeded"}') == 3
    )
    # two processes of 100 runs in flight each (the default --runs), summed, all free again
    load = wait_for(
        lambda: (
            (text := httpx.get(f"http://127.0.0.1:{port}/metrics").text)
            and metric(text, "fleet_worker_runs_in_flight") == 0
            and text
        ),
        10,
        what="the runs to leave the worker's gauges",
    )
    assert metric(load, "fleet_worker_free_slots") == 200


# -- outages --------------------------------------------------------------------------------------


def test_an_outage_is_503_with_retry_after_and_readyz_names_it(
    tmp_path: Path, pg_url: str, redis_url: str, config: Path
) -> None:
    pg, rd = make_url(pg_url), make_url(redis_url)
    with (
        proxy(pg.host or "127.0.0.1", pg.port or 5432) as db_proxy,
        proxy(rd.host or "127.0.0.1", rd.port or 6379) as redis_proxy,
    ):
        settings = Settings(
            **settings_for(
                tmp_path,
                pg.set(host="127.0.0.1", port=db_proxy.port).render_as_string(hide_password=False),
                f"redis://127.0.0.1:{redis_proxy.port}/{rd.database or 0}",
                config,
            )
        )
        runtime = build(settings)
        auth = {"Authorization": f"Bearer {OPS_KEY}"}
        try:
            with TestClient(create_app(runtime), raise_server_exceptions=False) as c:
                c.headers.update(auth)
                task = c.post("/v1/tasks", json={"deployment": "chat", "input": "x"})
                assert task.status_code == 202
                assert c.get("/readyz").json()["status"] == "ready"

                redis_proxy.cut()
                down = assert_problem(c.get("/readyz"), 503)
                assert "redis" in down["detail"] and down["checks"]["database"] == "ok"
                # Admission is committed before the wake-up; the sweeper sends it later.
                assert (
                    c.post("/v1/tasks", json={"deployment": "chat", "input": "y"}).status_code
                    == 202
                )

                db_proxy.cut()
                for r in (
                    c.post("/v1/tasks", json={"deployment": "chat", "input": "z"}),
                    c.get(f"/v1/tasks/{task.json()['id']}"),
                    c.get("/v1/tasks"),
                ):
                    assert_problem(r, 503)
                    assert int(r.headers["retry-after"]) > 0
                ready = assert_problem(c.get("/readyz"), 503)
                assert "database" in ready["detail"]
                assert c.get("/healthz").json() == {"status": "ok"}
        finally:
            runtime.close()
