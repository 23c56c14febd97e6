"""StreamTaskEvents against `fleet serve` and a real worker: a client that disconnects mid-run and
reconnects with Last-Event-ID receives every event once; streams end at the per-connection limit
and the client carries on from its last id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet.sdk.client import Event, FleetClient, parse_sse
from tests.conftest import write_config
from tests.e2e.test_cli_live import SLOW
from tests.e2e.test_cli_live import _check as check
from tests.e2e.test_cli_live import _live_run as live_run
from tests.support.fleet import Fleet, running_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

#: One model step asking for three tool calls (two of them take a second), then the reply.
SLOW_TOOLS = '/tool wait {"seconds": 1}\n/tool wait {"seconds": 1}\n/tool current_time {}'


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, redis_url: str) -> Iterator[Fleet]:
    config = write_config(tmp_path / "config")
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config, sweep_interval=1.0
    ) as fleet:
        fleet.worker("w1", concurrency=1)
        yield fleet
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def base(fleet: Fleet) -> str:
    return fleet.serve(FLEET_EVENT_STREAM_MAX="2s")


def test_fleet_run_against_the_store_shows_steps_live(fleet: Fleet, tmp_path: Path) -> None:
    """``fleet run --live`` in fleet mode (PostgreSQL, a worker) follows the store."""
    env = {k: v for k, v in fleet.env.items() if k != "FLEET_LOG_LEVEL"}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    check(*live_run(["run", "tooly", SLOW, "--live"], env, cwd))


def test_a_client_that_reconnects_mid_run_gets_every_event_once(base: str) -> None:
    with FleetClient(base) as client:
        task = client.submit("tooly", SLOW_TOOLS)
        first: list[Event] = []
        for ev in client.events(task["id"], 60):
            first.append(ev)
            if ev.kind == "step":
                break  # disconnect after the first step, while a tool call runs
        assert client.get_task(task["id"])["status"] == "running", "disconnected mid-run"
        rest = list(client.events(task["id"], 60, after=first[-1].id))
        everything = list(client.events(task["id"], 10))  # once ended: all at once

    got = [e.id for e in first + rest]
    assert len(got) == len(set(got)), f"an event came twice: {got}"
    assert got == [e.id for e in everything]
    assert [e.kind for e in everything] == [
        "status", "status", "step", "step", "step", "step", "step", "reply", "status", "end",
    ]  # fmt: skip
    assert [e.data.get("name") for e in everything if e.kind == "step"] == [
        "echo",
        "wait",
        "wait",
        "current_time",
        "echo",
    ]
    assert everything[-1].data["task"]["status"] == "succeeded"


def test_a_stream_ends_at_its_limit_and_the_client_resumes(base: str) -> None:
    """FLEET_EVENT_STREAM_MAX is 2 s here; the run takes longer, so the client reconnects."""
    with FleetClient(base) as client:
        task = client.submit("tooly", '/tool wait {"seconds": 5}')
        # one connection: the server ends it before the task ends, without an `end` event
        with httpx.stream("GET", f"{base}/v1/tasks/{task['id']}/events", timeout=30) as r:
            cut = list(parse_sse(r.iter_lines()))
        assert cut and cut[-1].kind != "end", [e.id for e in cut]
        events = list(client.events(task["id"], 60))
    ids = [e.id for e in events]
    assert ids == ["0.0.0", "1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.end.0", "1.end.2", "1.end.3"]
