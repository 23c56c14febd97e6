"""Tracing in real Celery prefork workers: set up after the fork, flushed at process shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.support.fleet import running_fleet, wait_for
from tests.support.otlp import Receiver, otlp_receiver

#: serial: a warm shutdown is bounded by the clock, and with three other test processes on two
#: cores one has taken over 30 s.
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120), pytest.mark.serial]


@pytest.fixture
def rt(tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path) -> Iterator[Runtime]:
    runtime = build(
        Settings(
            home=tmp_path / "home", database_url=pg_url, redis_url=redis_url, config_dir=config_dir
        )
    )
    yield runtime
    runtime.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as r:
        yield r


def test_worker_processes_export_their_runs_when_they_shut_down(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path, rt: Runtime, receiver: Receiver
) -> None:
    otel = dict(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        OTEL_SERVICE_NAME="fleet-worker",
        # no timed export while the test runs: only the shutdown flush can deliver the spans
        OTEL_BSP_SCHEDULE_DELAY="600000",
        PYTHONFAULTHANDLER="1",
    )
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config_dir
    ) as fleet:
        for var in [k for k in fleet.env if k.startswith("OTEL_")]:
            del fleet.env[var]
        fleet.env.update(otel)
        worker = fleet.worker("w1", concurrency=2)
        tasks = [
            rt.dispatcher.submit(
                "tooly", "/tool current_time", key=f"k{i}", labels={"n": str(i)}
            ).task
            for i in range(4)
        ]

        def finished() -> bool:
            return all(rt.store.get_task(t.id).status.terminal for t in tasks)

        wait_for(finished, 60, what="the tasks to finish")
        assert {rt.store.get_task(t.id).status for t in tasks} == {TaskStatus.SUCCEEDED}
        assert receiver.posts == []  # still buffered in the pool processes

        os.kill(worker.pid, signal.SIGTERM)  # warm shutdown, as a process manager sends it
        try:
            worker.popen.wait(30)
        except subprocess.TimeoutExpired:
            worker.signal(signal.SIGABRT)  # faulthandler prints where each process stands
            worker.popen.wait(10)
            raise AssertionError(
                f"warm shutdown took over 30 s:\n{worker.log()[-12000:]}"
            ) from None
        assert worker.popen.returncode == 0, worker.log()[-3000:]

    spans = receiver.spans()
    runs = {a["fleet.task.id"]: (a, r) for name, a, r in spans if name == "invoke_agent tools"}
    assert set(runs) == {str(t.id) for t in tasks}
    assert {r["service.name"] for _, r in runs.values()} == {"fleet-worker"}
    assert sorted(a["fleet.label.n"] for a, _ in runs.values()) == ["0", "1", "2", "3"]
    assert sorted(name for name, _, _ in spans).count("execute_tool current_time") == 4
