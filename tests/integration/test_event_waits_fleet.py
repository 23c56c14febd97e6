"""Event waits on real workers (PostgreSQL, Redis, Celery processes): a run parked by
``wait_for_event`` holds no worker (another conversation's task runs on the only worker process
meanwhile) and resumes at once with the event's data when the event comes; a repeated event id
changes nothing; an event sent before the wait (within the lookback window) resolves it when it
starts, one older than the window does not; the timeout resumes it, told that none came; another
tenant's (or another scope's) event does not reach it; and 100 parked waits survive every worker
being killed (SIGKILL), each resumed exactly once with its own event's data."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fleet.domain import event_waits
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TTL, SWEEP = 2.0, 1.0
TENANT = "default"
EVENT = "payment.cleared"
AGENTS = {
    "listener": """
        model = "echo"
        tools = [{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1h" }]
    """,
    "plain": 'model = "echo"\n',
}
DEPLOYMENTS = {
    "orders": 'agent = "listener"\n',
    "helper": 'agent = "plain"\n',
}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=TTL, sweep_interval=SWEEP)


def wait_input(key: str, timeout: str = "1h", event: str = EVENT) -> str:
    return "/tool wait_for_event " + json.dumps({"event": event, "key": key, "timeout": timeout})


def send(
    rt: Runtime,
    key: str,
    data: Any,
    event_id: str | None = None,
    *,
    tenant: str = TENANT,
    scope: str | None = "api",
    name: str = EVENT,
    ago: float = 0.0,
) -> event_waits.Sent:
    """Send an event as ``POST /v1/events`` does, through the test's own dispatcher (``ago``:
    received that many seconds in the past)."""
    event = event_waits.new_event(
        name=name,
        key=key,
        data=data,
        event_id=event_id,
        tenant=tenant,
        scope=scope,
        sender="test",
        now=rt.dispatcher.clock() - timedelta(seconds=ago),
        max_bytes=16384,
    )
    return rt.dispatcher.waiting.send_event(event)


def task_when(
    rt: Runtime, task_id: uuid.UUID, ok: Callable[[Task], bool], timeout: float, what: str
) -> Task:
    """The task once ``ok`` holds for it (polled)."""

    def found() -> Task | None:
        task = rt.store.get_task(task_id)
        return task if ok(task) else None

    task = wait_for(found, timeout, what=f"task {task_id} {what}")
    assert task is not None
    return task


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 60) -> Task:
    return task_when(rt, task_id, lambda t: t.status.terminal, timeout, "to finish")


def waiting(rt: Runtime, task_id: uuid.UUID) -> Task:
    return task_when(rt, task_id, lambda t: t.status == TaskStatus.WAITING, 30, "to wait")


def tool_results(rt: Runtime, task_id: uuid.UUID) -> list[Any]:
    return [
        r["output"]
        for r in rt.store.traces_of(task_id)
        if r["kind"] == "tool" and r["name"] == "wait_for_event" and r["status"] != "started"
    ]


def runs(rt: Runtime, task_id: uuid.UUID) -> list[str]:
    return [r.status for r in rt.store.runs_of(task_id)]


def arrived(key: str, data: Any) -> str:
    return event_waits.arrived_result(EVENT, key, data)


def test_a_run_waiting_for_an_event_holds_no_worker_and_resumes_at_once_when_it_comes(
    rt: Runtime, fleet: Fleet
) -> None:
    # no beat (no sweeper): the event's own wake-up resumes the run
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("orders", wait_input("o-1"), key="o-1").task
    parked = waiting(rt, task.id)
    assert parked.scope == "api" and parked.tenant == TENANT
    [wait] = rt.store.waits_of(task.id, pending=True)
    assert (wait.kind, wait.tool, wait.event, wait.event_key) == (
        "event",
        "wait_for_event",
        EVENT,
        "o-1",
    )
    assert runs(rt, task.id) == ["waiting"]

    # the only worker process (one run slot) runs another conversation's task meanwhile
    other = rt.dispatcher.submit("helper", "meanwhile", key="other").task
    helped = finished(rt, other.id)
    assert helped.status == TaskStatus.SUCCEEDED, helped.error
    assert helped.reply is not None and helped.reply.startswith("echo: meanwhile")
    assert rt.store.get_task(task.id).status == TaskStatus.WAITING

    began = time.monotonic()
    sent = send(rt, "o-1", {"amount": 20, "currency": "EUR"}, "evt-1")
    assert (sent.resolved, sent.duplicate) == (1, False)
    wait_for(lambda: len(rt.store.runs_of(task.id)) == 2, 30, interval=0.01, what="the resume")
    started_after = time.monotonic() - began
    done = finished(rt, task.id)
    finished_after = time.monotonic() - began
    assert done.status == TaskStatus.SUCCEEDED, done.error
    waited, resumed = rt.store.runs_of(task.id)
    assert (waited.status, resumed.status) == ("waiting", "succeeded")
    assert resumed.finished_at is not None
    received = sent.event.received_at
    print(
        f"\nevent -> resume: run started {started_after:.3f}s (stored "
        f"{(resumed.started_at - received).total_seconds():.3f}s), finished "
        f"{finished_after:.3f}s (stored {(resumed.finished_at - received).total_seconds():.3f}s)"
    )
    assert helped.finished_at is not None and helped.finished_at < resumed.started_at
    assert resumed.started_at >= received
    [output] = tool_results(rt, task.id)
    assert output == arrived("o-1", {"amount": 20, "currency": "EUR"})
    assert '"amount": 20' in output
    [ended] = rt.store.waits_of(task.id)
    assert (ended.status, ended.event_id, ended.data, ended.decided_by) == (
        "done",
        "evt-1",
        {"amount": 20, "currency": "EUR"},
        "test",
    )

    # the same id again (even with other data, or for another key) changes nothing
    again = send(rt, "o-1", {"amount": 999}, "evt-1")
    assert again.duplicate is True
    assert again.event.data == {"amount": 20, "currency": "EUR"}  # the first one's
    # nothing new resolved: a repeat answers the first one's count (``Sent``)
    assert again.resolved == sent.resolved == 1
    later = rt.dispatcher.submit("orders", wait_input("o-2"), key="o-2").task
    waiting(rt, later.id)
    repeat = send(rt, "o-2", {"amount": 999}, "evt-1")
    assert repeat.duplicate is True and repeat.event.key == "o-1"
    assert [e.id for e in rt.store.events_kept(TENANT, EVENT, "o-1")] == ["evt-1"]
    assert rt.store.events_kept(TENANT, EVENT, "o-2") == []
    # a message to the resumed task's conversation runs after anything the repeats woke there
    follow = rt.dispatcher.submit("orders", "and then", key="o-1").task
    assert follow.conversation_id == task.conversation_id
    assert finished(rt, follow.id).status == TaskStatus.SUCCEEDED
    assert runs(rt, task.id) == ["waiting", "succeeded"]
    assert tool_results(rt, task.id) == [output]
    assert rt.store.get_task(later.id).status == TaskStatus.WAITING
    assert [w.status for w in rt.store.waits_of(later.id)] == ["pending"]


def test_an_event_sent_before_the_wait_within_the_lookback_resolves_it(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a", concurrency=1)
    # older than the lookback window (15 min): kept, but no wait takes it
    stale = send(rt, "o-1", {"amount": 1}, "evt-stale", ago=16 * 60)
    early = send(rt, "o-1", {"amount": 30}, "evt-early")
    assert (stale.resolved, early.resolved) == (0, 0)
    task = rt.dispatcher.submit("orders", wait_input("o-1"), key="o-1").task
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    # it parked, took the kept event in the same transaction, and resumed at once
    assert runs(rt, task.id) == ["waiting", "succeeded"]
    assert tool_results(rt, task.id) == [arrived("o-1", {"amount": 30})]
    [wait] = rt.store.waits_of(task.id)
    assert (wait.status, wait.event_id) == ("done", "evt-early")
    kept = rt.store.events_kept(TENANT, EVENT, "o-1")
    assert [e.id for e in kept] == ["evt-stale", "evt-early"]
    # repeats change nothing and answer each one's count (``Sent``): the wait that took it
    assert send(rt, "o-1", {}, "evt-early").resolved == 1
    assert send(rt, "o-1", {}, "evt-stale").resolved == 0


def test_the_timeout_resumes_the_run_told_that_no_event_came(rt: Runtime, fleet: Fleet) -> None:
    # no beat: a short wait's own wake-up at its deadline resumes it (the sweeper: long ones)
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("orders", wait_input("o-1", "2s"), key="o-1").task
    waiting(rt, task.id)
    [wait] = rt.store.waits_of(task.id, pending=True)
    done = finished(rt, task.id, 30)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    waited, resumed = rt.store.runs_of(task.id)
    assert (waited.status, resumed.status) == ("waiting", "succeeded")
    assert resumed.started_at >= wait.expires_at
    [output] = tool_results(rt, task.id)
    assert output.startswith("timed out"), output
    assert output == event_waits.ended_result(EVENT, "o-1", 2, "expired")
    assert [w.status for w in rt.store.waits_of(task.id)] == ["expired"]
    # an event after the timeout resolves nothing (and is kept)
    late = send(rt, "o-1", {"amount": 5}, "evt-late")
    assert late.resolved == 0
    assert runs(rt, task.id) == ["waiting", "succeeded"]


def test_another_tenants_or_scopes_event_does_not_resolve_the_wait(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a", concurrency=1)
    task = rt.dispatcher.submit("orders", wait_input("o-1"), key="o-1").task
    waiting(rt, task.id)
    # an operator's event (every scope) of another tenant, and one of another scope of this one
    foreign = send(rt, "o-1", {"amount": 666}, "evt-x", tenant="other", scope=None)
    sideways = send(rt, "o-1", {"amount": 777}, "evt-y", scope="someone-else")
    assert (foreign.resolved, foreign.duplicate) == (0, False)
    assert (sideways.resolved, sideways.duplicate) == (0, False)
    kept = wait_for(
        lambda: rt.store.events_kept("other", EVENT, "o-1"), 10, what="the other tenant's event"
    )
    assert [(e.id, e.tenant, e.data) for e in kept] == [("evt-x", "other", {"amount": 666})]
    # the only worker process is free (it runs a task sent after them) and the wait pends
    other = rt.dispatcher.submit("helper", "meanwhile", key="other").task
    assert finished(rt, other.id).status == TaskStatus.SUCCEEDED
    assert rt.store.get_task(task.id).status == TaskStatus.WAITING
    assert [w.event_id for w in rt.store.waits_of(task.id, pending=True)] == [None]
    assert runs(rt, task.id) == ["waiting"]
    # the same id in this tenant is another event (ids are unique per tenant)
    right = send(rt, "o-1", {"amount": 20}, "evt-x")
    assert (right.resolved, right.duplicate) == (1, False)
    done = finished(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    assert runs(rt, task.id) == ["waiting", "succeeded"]
    assert tool_results(rt, task.id) == [arrived("o-1", {"amount": 20})]


def test_a_hundred_parked_waits_survive_every_worker_killed_and_resume_once_each(
    rt: Runtime, fleet: Fleet
) -> None:
    # no beat: the events' own wake-ups resume every run
    first = [fleet.worker(name, concurrency=4, ready=False) for name in ("a", "b")]
    for proc in first:
        proc.wait_log(r"ready\.")
    tasks = [
        rt.dispatcher.submit("orders", wait_input(f"o-{i}"), key=f"o-{i}").task for i in range(100)
    ]
    wait_for(
        lambda: (
            len(
                rt.store.list_tasks(
                    TaskFilter(deployment="orders", status=TaskStatus.WAITING, limit=200)
                )
            )
            == 100
        ),
        60,
        interval=0.1,
        what="100 tasks to wait",
    )
    assert all(len(rt.store.waits_of(t.id, pending=True)) == 1 for t in tasks)
    for proc in first:
        proc.signal(signal.SIGKILL)  # the whole worker: main and pool processes
        proc.popen.wait(10)
    # half the events come while no worker is alive: their wake-ups wait in the broker
    sent = [send(rt, f"o-{i}", {"amount": i}, f"evt-{i}") for i in range(50)]
    fleet.worker("c", concurrency=4)
    sent += [send(rt, f"o-{i}", {"amount": i}, f"evt-{i}") for i in range(50, 100)]
    assert [(s.resolved, s.duplicate) for s in sent] == [(1, False)] * 100
    for t in tasks:
        done = finished(rt, t.id)
        assert done.status == TaskStatus.SUCCEEDED, done.error
    lags = [
        (rt.store.runs_of(t.id)[1].started_at - s.event.received_at).total_seconds()
        for t, s in zip(tasks, sent, strict=True)
    ]
    for label, half in (("no worker alive", lags[:50]), ("worker alive", lags[50:])):
        ordered = sorted(half)
        median, slowest = ordered[25], ordered[-1]
        print(f"\n50 events ({label}) -> resume: median {median:.3f}s, slowest {slowest:.3f}s")
    for i, t in enumerate(tasks):
        assert runs(rt, t.id) == ["waiting", "succeeded"], t.id
        assert tool_results(rt, t.id) == [arrived(f"o-{i}", {"amount": i})], t.id
        [wait] = rt.store.waits_of(t.id)
        assert (wait.status, wait.event_id) == ("done", f"evt-{i}")
