"""Graceful shutdown with real processes: SIGTERM on a worker mid-run hands the task to another
worker at once (no lease TTL, no sweeper), finished steps are replayed, never redone; `fleet
serve` answers a request that is in flight when it gets SIGTERM.

PostgreSQL, Redis and two Celery workers (`-P prefork`) are real; no sweeper runs and the lease
TTL is long, so only the hand-back can move the task in time. A test tool appends a line to a
file per call, so side effects are counted across processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fleet.domain import shutdown
from fleet.domain.journal import UNKNOWN_RESULT
from fleet.domain.values import TERMINAL, TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180), pytest.mark.serial]

#: Long enough that a recovery by lease expiry would miss every deadline below.
TTL = 60.0
#: The grace period the workers get (FLEET_SHUTDOWN_GRACE).
GRACE = 4.0
#: The acceptance bound: the task completes within this of the grace period.
SLACK = 2.0
AGENTS = {
    "hanger": """
        tools = ["tests.support.shop_tools:count_then_hang"]
        model = "echo"
    """,
    # a slow model step, then a counted tool that is not safe to retry
    "counter": """
        tools = ["tests.support.shop_tools:count"]
        [model]
        provider = "echo"
        delay_ms = 1500
    """,
}
DEPLOYMENTS = {name: f'agent = "{name}"\n' for name in AGENTS}


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "side-effects.txt"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(
    tmp_path: Path, pg_url: str, redis_url: str, config: Path, counter: Path
) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=TTL,
        shutdown_grace=GRACE,
        test_counter=counter,
    )


def side_effects(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def holder(fleet: Fleet, rt: Runtime, task_id: uuid.UUID) -> Proc:
    """The worker (main process) whose pool process holds the task."""
    with rt.store.read() as conn:
        worker = conn.execute(
            s.tasks.select().with_only_columns(s.tasks.c.worker).where(s.tasks.c.id == task_id)
        ).scalar()
    assert worker, "the task has no holder"
    group = os.getpgid(int(worker.rpartition(":")[2]))
    return next(p for p in fleet.procs if p.pid == group)


def tool_outputs(rt: Runtime, run_id: uuid.UUID) -> list[tuple[str, bool, object]]:
    with rt.store.read() as conn:
        found = conn.execute(
            s.traces.select()
            .where(s.traces.c.run_id == run_id, s.traces.c.kind == "tool")
            .order_by(s.traces.c.step)
        ).all()
    return [(r.status, r.replayed, r.output) for r in found]


def finished(rt: Runtime, task_id: uuid.UUID) -> object:
    task = rt.store.get_task(task_id)
    return task.status in TERMINAL and task


def sigterm(proc: Proc, *, group: bool) -> float:
    """Send SIGTERM to the worker's main process (as Kubernetes does) or its whole group (as
    systemd does); returns when."""
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    return time.monotonic()


@pytest.mark.parametrize("group", [False, True], ids=["main-process", "process-group"])
def test_sigterm_mid_tool_hands_the_task_to_the_other_worker_at_once(
    rt: Runtime, fleet: Fleet, counter: Path, group: bool
) -> None:
    a, b = fleet.worker("a"), fleet.worker("b")
    task = rt.dispatcher.submit("hanger", '/tool count_then_hang {"seconds": 1.5}').task
    wait_for(lambda: side_effects(counter), 30, what="the tool to start")
    first = holder(fleet, rt, task.id)
    other = b if first is a else a
    sent = sigterm(first, group=group)

    done = wait_for(lambda: finished(rt, task.id), GRACE + SLACK, what="the task on the other")
    assert time.monotonic() - sent <= GRACE + SLACK
    assert done.status == TaskStatus.SUCCEEDED, done.error  # type: ignore[attr-defined]
    assert len(side_effects(counter)) == 1  # the tool ran once: its result was replayed
    runs = rt.store.runs_of(task.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    assert runs[0].error == shutdown.HANDED_BACK
    assert os.getpgid(int(str(runs[1].worker).rpartition(":")[2])) == other.pid
    assert tool_outputs(rt, runs[1].id) == [("finished", True, "hung up")]
    first.popen.wait(GRACE + SLACK)  # and the stopped worker is gone
    assert "abandoned" not in first.log()


def test_a_step_still_running_when_the_grace_ends_is_abandoned_and_not_redone(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    a, b = fleet.worker("a"), fleet.worker("b")
    task = rt.dispatcher.submit("hanger", '/tool count_then_hang {"seconds": 120}').task
    wait_for(lambda: side_effects(counter), 30, what="the tool to start")
    first = holder(fleet, rt, task.id)
    sent = sigterm(first, group=False)

    done = wait_for(lambda: finished(rt, task.id), GRACE + SLACK, what="the task on the other")
    assert time.monotonic() - sent <= GRACE + SLACK
    assert done.status == TaskStatus.SUCCEEDED, done.error  # type: ignore[attr-defined]
    # The unsafe call was in flight: not called again; the model is told its outcome is unknown.
    assert len(side_effects(counter)) == 1
    runs = rt.store.runs_of(task.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    assert runs[0].error == shutdown.ABANDONED
    assert tool_outputs(rt, runs[1].id) == [("finished", False, UNKNOWN_RESULT)]
    first.popen.wait(SLACK)
    assert "abandoned mid-step" in first.log()
    other = b if first is a else a
    # the worker that took the task over goes on
    assert other.popen.poll() is None, f"{other.name} exited:\n{other.log()[-2000:]}"


def test_sigterm_before_an_unsafe_call_leaves_the_call_to_the_next_worker(
    rt: Runtime, fleet: Fleet, counter: Path
) -> None:
    """SIGTERM during the model step that asks for an unsafe tool: the run hands back at the
    boundary before the call, which never began: the next worker makes it (once), and the
    model is not told its outcome is unknown."""
    a, b = fleet.worker("a"), fleet.worker("b")
    task = rt.dispatcher.submit("counter", "/tool count {}").task
    wait_for(lambda: rt.store.runs_of(task.id), 30, what="the run to start")
    time.sleep(0.5)  # in the model step (1.5 s)
    first = holder(fleet, rt, task.id)
    sigterm(first, group=False)

    done = wait_for(lambda: finished(rt, task.id), 30, what="the task on the other")
    assert done.status == TaskStatus.SUCCEEDED, done.error  # type: ignore[attr-defined]
    runs = rt.store.runs_of(task.id)
    assert [(r.attempt, r.status, r.error) for r in runs] == [
        (1, "interrupted", shutdown.HANDED_BACK),
        (2, "succeeded", None),
    ]
    assert tool_outputs(rt, runs[0].id) == []  # no call journaled as begun
    assert tool_outputs(rt, runs[1].id) == [("finished", False, "counted")]
    assert [line.split()[1] for line in side_effects(counter)] == [str(runs[1].id)]
    other = b if first is a else a
    assert os.getpgid(int(str(runs[1].worker).rpartition(":")[2])) == other.pid


def refused(port: int) -> bool:
    """Does the port refuse connections (serve has stopped accepting)?"""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def test_serve_answers_a_submission_in_flight_when_it_gets_sigterm(
    rt: Runtime, fleet: Fleet
) -> None:
    url = fleet.serve()
    api = next(p for p in fleet.procs if p.name == "api")
    port = int(url.rpartition(":")[2])
    body = json.dumps({"deployment": "hanger", "input": "hello"}).encode()
    head = (
        "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=GRACE + SLACK) as sock:
        sock.sendall(head + body[:10])  # the request is in flight ...
        api.popen.send_signal(signal.SIGTERM)  # ... when serve is told to stop
        wait_for(lambda: refused(port), GRACE, what="serve to stop accepting connections")
        sock.sendall(body[10:])
        answer = b""
        while not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"202", answer
    task_id = uuid.UUID(json.loads(rest.partition(b"\r\n\r\n")[2])["id"])
    # serve ends once the request is answered (uvicorn raises the signal again as it exits)
    assert api.popen.wait(GRACE + SLACK) in (0, -signal.SIGTERM)
    assert rt.store.get_task(task_id).status == TaskStatus.QUEUED
    # Its wake-up was sent before serve exited: a worker started now runs it (no sweeper runs).
    fleet.worker("late")
    done = wait_for(lambda: finished(rt, task_id), 30, what="the task to run")
    assert done.status == TaskStatus.SUCCEEDED, done.error  # type: ignore[attr-defined]


def test_sigterm_to_the_whole_group_logs_no_lost_worker(rt: Runtime, fleet: Fleet) -> None:
    """systemd (or a terminal's Ctrl-C, or ``kill -- -PGID``) signals every process of the
    worker: pool processes between drains end as the worker stops, and nothing is lost, so
    nothing reads as a crash in the log (no ``WorkerLostError``, no "exited prematurely")."""
    worker = fleet.worker("w", concurrency=4)
    tasks = [rt.dispatcher.submit("hanger", f"hi {n}", key=f"k{n}").task for n in range(60)]
    wait_for(
        lambda: sum(rt.store.get_task(t.id).status.terminal for t in tasks) >= 10,
        60,
        what="work to flow",
    )
    sigterm(worker, group=True)  # while wake-ups are still being handed to pool processes
    worker.popen.wait(GRACE + 30)
    log = worker.log()
    for crash in ("WorkerLostError", "exited prematurely", "exited with", "Traceback"):
        assert crash not in log, log[-6000:]
    fleet.worker("after", concurrency=2)
    wait_for(
        lambda: all(rt.store.get_task(t.id).status == TaskStatus.SUCCEEDED for t in tasks),
        90,
        what="every task to finish on the next worker",
    )
