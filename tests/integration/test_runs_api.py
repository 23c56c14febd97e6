"""A run retried after its worker was killed mid-tool-call, read back through ListTaskRuns, GetRun
and `fleet --server … tasks show --context --trace` (real PostgreSQL, Redis, Celery workers)."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fleet.api.run_schemas import RunList, RunView
from fleet.domain.journal import UNKNOWN_RESULT
from fleet.domain.redaction import Redactor
from fleet.store import Store
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.integration.test_api import OPS_KEY, cli, write_callers
from tests.support.fleet import Fleet, running_fleet, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

#: ``stubborn`` is a plain function, so retrying it is unsafe: it is journaled before it runs.
AGENT = 'model = "echo"\ntools = ["tests.support.shop_tools:stubborn"]\n'
TTL, SWEEP = 2.0, 1.0


@dataclass
class Setup:
    fleet: Fleet
    url: str
    http: httpx.Client
    store: Store


@pytest.fixture
def setup(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Setup]:
    config = write_config(
        tmp_path / "config",
        {**AGENTS, "hang": AGENT},
        {**DEPLOYMENTS, "hang": 'agent = "hang"\n'},
    )
    write_callers(config)
    store = Store.open(pg_url, Redactor(()))
    with (
        running_fleet(
            tmp_path,
            database_url=pg_url,
            redis_url=redis_url,
            config_dir=config,
            lease_ttl=TTL,
            sweep_interval=SWEEP,
        ) as fleet,
        httpx.Client(headers={"Authorization": f"Bearer {OPS_KEY}"}, timeout=30) as http,
    ):
        fleet.beat()
        fleet.worker("a")
        url = fleet.serve()
        http.base_url = httpx.URL(url)
        yield Setup(fleet, url, http, store)
    store.dispose()


def test_a_retried_run_shows_the_lost_call_and_the_replayed_steps(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    http, store = setup.http, setup.store
    r = http.post(
        "/v1/tasks", json={"deployment": "hang", "input": '/tool stubborn {"seconds": 60}'}
    )
    assert r.status_code == 202, r.text
    task_id = r.json()["id"]

    def in_flight() -> uuid.UUID | None:
        runs = store.list_runs(uuid.UUID(task_id))
        if not runs:
            return None
        steps = store.get_run(runs[0].id).steps
        return runs[0].id if [s.status for s in steps] == ["finished", "started"] else None

    first_run = wait_for(in_flight, 30, what="the tool call to be journaled as started")
    worker = store.list_runs(uuid.UUID(task_id))[0].worker
    assert worker is not None
    setup.fleet.worker("b")
    os.kill(int(worker.rpartition(":")[2]), signal.SIGKILL)
    done = http.get(f"/v1/tasks/{task_id}", params={"wait": 60}, timeout=90).json()
    assert done["status"] == "succeeded", done

    listed = http.get(f"/v1/tasks/{task_id}/runs")
    assert listed.status_code == 200, listed.text
    RunList.model_validate(listed.json())
    runs = listed.json()["runs"]
    assert [(r["attempt"], r["status"], r["replayedSteps"]) for r in runs] == [
        (1, "interrupted", []),
        (2, "succeeded", [1]),
    ]
    assert runs[0]["id"] == str(first_run) and runs[0]["worker"] == worker
    assert runs[1]["worker"] not in (None, worker) and runs[0]["error"]
    assert runs[1]["context"] == runs[0]["context"]  # the retry's context is the frozen one

    lost, retried = (http.get(f"/v1/runs/{r['id']}").json() for r in runs)
    for run in (lost, retried):
        RunView.model_validate(run)
    assert [(s["step"], s["kind"], s["status"], s["replayed"]) for s in lost["steps"]] == [
        (1, "model", "finished", False),
        (2, "tool", "started", False),
    ]
    assert lost["steps"][1]["tool"]["result"] is None
    assert lost["steps"][1]["tool"]["arguments"] == {"seconds": 60}
    assert [(s["step"], s["kind"], s["replayed"]) for s in retried["steps"]] == [
        (1, "model", True),
        (2, "tool", False),
        (3, "model", False),
    ]
    unknown = retried["steps"][1]
    assert unknown["tool"]["result"] == UNKNOWN_RESULT and unknown["error"]
    assert unknown["tool"]["callId"] == lost["steps"][1]["tool"]["callId"]

    # the CLI through the server: the same runs, as tables (wide: no cell wraps) and as JSON
    monkeypatch.setenv("COLUMNS", "300")
    shown = cli("tasks", "show", task_id, "--context", "--trace", server=setup.url)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.count("· steps") == 2 and out.count("· context") == 2
    assert "in flight" in out.split("attempt 2 · steps")[0].split("attempt 1 · steps")[1]
    assert "replayed" in out.split("attempt 2 · steps")[1]
    as_json = cli("tasks", "show", task_id, "--context", "--trace", "--json", server=setup.url)
    assert as_json.returncode == 0, as_json.stderr
    full = [http.get(f"/v1/runs/{r['id']}", params={"include": "messages"}).json() for r in runs]
    assert json.loads(as_json.stdout)["runs"] == full
