"""Event waits, the store's side, on SQLite and PostgreSQL: an event resolves the pending waits
of its name and key in its tenant and scope and makes their tasks due; a repeated id changes
nothing; an event kept from before a wait is taken when the wait is stored, once per task;
and, on PostgreSQL, an event and a wait stored at the same moment (or two sends of one id) in
two transactions never miss each other nor fail."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from fleet.domain import event_waits as rules
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import Task, TaskStatus
from fleet.domain.waits import Request
from fleet.store import Started, Store
from tests.integration.test_store import T0, start, sub

WAITING = Outcome(TaskStatus.WAITING, None, None, {"steps": 1})
LOOKBACK = timedelta(minutes=15)


def running(store: Store, key: str) -> Started:
    """A task of its own conversation, its run started and one step stored (ready to park)."""
    task = store.admit(sub("pay", key=key, max_attempts=1), T0).task
    run = start(store, task.conversation_id, T0, worker="w1")
    assert run is not None
    step = TraceRow(1, "model", "echo", None, {"content": ""}, None, {}, T0, 1.0)
    store.checkpoint(run.task, run.run_id, [step], T0)
    return run


def wait(call: str, key: str, name: str = "payment.cleared") -> Request:
    return Request("event", call, "wait_for_event", {}, 3600.0, event=name, key=key)


def park(store: Store, run: Started, *requests: Request, now: datetime = T0) -> Task:
    store.park(run.task, run.run_id, requests, WAITING, now, events_since=now - LOOKBACK)
    return store.get_task(run.task.id)


def event(
    key: str,
    event_id: str,
    *,
    now: datetime = T0,
    tenant: str = "default",
    scope: str | None = "api",
    data: object = None,
) -> rules.Event:
    return rules.Event(event_id, tenant, scope, "payment.cleared", key, data, now, "test")


def test_an_event_resolves_the_waits_of_its_key_and_a_repeat_changes_nothing(
    store: Store,
) -> None:
    mine, other = running(store, "k1"), running(store, "k2")
    park(store, mine, wait("c1", "o-1"))
    park(store, other, wait("c1", "o-2"))
    later = T0 + timedelta(seconds=5)
    sent, woken = store.send_event(event("o-1", "e1", now=later, data={"amount": 20}))
    assert (sent.resolved, sent.duplicate) == (1, False)
    assert [t.id for t in woken] == [mine.task.id]
    assert store.get_task(mine.task.id).not_before == later  # due now
    [done] = store.waits_of(mine.task.id)
    assert (done.status, done.event_id, done.data, done.decided_at) == (
        "done",
        "e1",
        {"amount": 20},
        later,
    )
    assert [w.status for w in store.waits_of(other.task.id)] == ["pending"]  # another key
    again, woken = store.send_event(event("o-2", "e1", now=later, data={"x": 1}))
    assert (again.duplicate, again.event.key, again.event.data, woken) == (
        True,
        "o-1",
        {"amount": 20},
        [],
    )
    assert [w.status for w in store.waits_of(other.task.id)] == ["pending"]


def test_walls_another_tenant_or_scope_resolves_nothing_an_operators_event_does(
    store: Store,
) -> None:
    run = running(store, "k1")
    park(store, run, wait("c1", "o-1"))
    for ev in (event("o-1", "a", tenant="other", scope=None), event("o-1", "b", scope="a2a:x")):
        assert store.send_event(ev)[0].resolved == 0
    assert store.send_event(event("o-1", "c", scope=None))[0].resolved == 1


def test_a_kept_event_is_taken_when_its_wait_is_stored_once_per_task(store: Store) -> None:
    store.send_event(event("o-1", "old", now=T0 - LOOKBACK - timedelta(seconds=1)))
    store.send_event(event("o-1", "early", now=T0 - timedelta(minutes=1), data={"n": 1}))
    run = running(store, "k1")
    # two waits of one task for the same name and key: the first takes the kept event, the
    # other waits for the next one (never the one its task read, never one past the window)
    parked = park(store, run, wait("c1", "o-1"), wait("c2", "o-1"))
    assert parked.status == TaskStatus.WAITING and parked.not_before > T0
    first, second = store.waits_of(run.task.id)
    assert (first.status, first.event_id, first.data) == ("done", "early", {"n": 1})
    assert second.status == "pending"
    sent, woken = store.send_event(event("o-1", "next", now=T0 + timedelta(seconds=1)))
    assert sent.resolved == 1 and [t.id for t in woken] == [run.task.id]
    assert [e.id for e in store.events_kept("default", "payment.cleared", "o-1")] == [
        "old",
        "early",
        "next",
    ]
    assert store.prune_events(T0 - LOOKBACK) == 1  # the one past the window


def test_a_wait_past_its_deadline_takes_no_event(store: Store) -> None:
    run = running(store, "k1")
    park(store, run, wait("c1", "o-1"))
    late = T0 + timedelta(hours=2)
    assert store.send_event(event("o-1", "late", now=late))[0].resolved == 0


def _pg(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite runs one writer at a time: no such interleaving")


def test_an_event_and_its_wait_stored_at_once_never_miss_each_other(store: Store) -> None:
    _pg(store)
    runs = [running(store, f"k{i}") for i in range(30)]
    with ThreadPoolExecutor(2) as pool:
        for i, run in enumerate(runs):
            gate = threading.Barrier(2)

            def parking(run: Started = run, gate: threading.Barrier = gate) -> None:
                gate.wait()
                park(store, run, wait("c1", f"o-{run.task.id}"))

            def sending(run: Started = run, gate: threading.Barrier = gate, i: int = i) -> None:
                gate.wait()
                store.send_event(event(f"o-{run.task.id}", f"e{i}"))

            for f in [pool.submit(parking), pool.submit(sending)]:
                f.result()
    # whichever committed first, the other saw it: every wait took its event
    assert all([w.status for w in store.waits_of(r.task.id)] == ["done"] for r in runs)


def test_two_sends_of_one_id_at_once_answer_once_and_a_repeat(store: Store) -> None:
    _pg(store)
    with ThreadPoolExecutor(2) as pool:
        for i in range(20):
            gate = threading.Barrier(2)

            def send(key: str, gate: threading.Barrier = gate, i: int = i) -> bool:
                gate.wait()
                return store.send_event(event(key, f"same-{i}"))[0].duplicate

            answers = sorted(f.result() for f in [pool.submit(send, "a"), pool.submit(send, "b")])
            assert answers == [False, True]
