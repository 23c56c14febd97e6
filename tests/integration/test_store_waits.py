"""Parking a run and deciding its waits (the store's side), on SQLite and PostgreSQL: fenced,
holding no worker, due again only when nothing is pending (or at the deadline), decisions
final, redacted arguments shown as stored, interrupts and cancels ending pending waits."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus
from fleet.domain.waits import Request
from fleet.errors import Conflict, LeaseLost, NotFound
from fleet.store import Store
from fleet.store.operator import ConversationFilter
from tests.integration.test_store import T0, ok, start, sub
from tests.support.fleet import wait_for

WAITING = Outcome(TaskStatus.WAITING, None, None, {"steps": 1})


def parked(store: Store, *requests: Request, key: str = "k1"):
    task = store.admit(sub("refund", key=key, max_attempts=1), T0).task
    run = start(store, task.conversation_id, T0, worker="w1")
    assert run is not None
    step = TraceRow(1, "model", "echo", None, {"content": ""}, None, {}, T0, 1.0)
    store.checkpoint(run.task, run.run_id, [step], T0)
    head = store.park(run.task, run.run_id, requests, WAITING, T0)
    return task, run, head


def approval(call: str, **args: object) -> Request:
    return Request("approval", call, "refund", dict(args), 3600.0)


def test_a_parked_task_holds_nothing_and_is_due_at_its_deadline(store: Store) -> None:
    task, run, head = parked(store, approval("c1", order=7))
    now = store.get_task(task.id)
    assert now.status == TaskStatus.WAITING
    assert head is not None and head.task_id == task.id
    assert head.not_before == T0 + timedelta(hours=1)  # not claimable before its deadline
    assert now.max_attempts == 2  # the wait used up no attempt
    assert store.active() == []  # no lease, no worker: nothing for the sweeper to recover
    figures = store.tenant_figures(T0)[task.tenant]
    assert (figures.queued, figures.waiting, figures.running) == (0, 1, 0)  # its own state
    assert store.waiting_tasks(task.tenant) == 1  # still counted by max_queued_tasks
    assert start(store, task.conversation_id, T0 + timedelta(minutes=5)) is None
    [wait] = store.waits_of(task.id, pending=True)
    assert (wait.tool, wait.arguments, wait.redacted) == ("refund", {"order": 7}, False)
    assert [r.status for r in store.runs_of(task.id)] == ["waiting"]
    with pytest.raises(LeaseLost):  # fenced: the parked run writes nothing more
        store.park(run.task, run.run_id, [], WAITING, T0)
    resumed = start(store, task.conversation_id, T0 + timedelta(hours=1, seconds=1))
    assert resumed is not None and resumed.task.id == task.id and resumed.task.attempts == 2


def test_a_waiting_conversation_is_waiting_not_stuck_and_holds_no_due_work(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    later = store.admit(sub("still there?", key="k1"), T0 + timedelta(seconds=1)).task
    soon = T0 + timedelta(minutes=10)  # the follow-up waits behind the approval, not for a worker
    (row,) = store.conversations(ConversationFilter(), soon)
    assert (row.state, row.reason, row.pending.waiting) == ("waiting", "", 2)
    assert row.pending.oldest_due is None and row.pending.resumes_at == T0 + timedelta(hours=1)
    figures = store.tenant_figures(soon)[task.tenant]
    assert (figures.queued, figures.waiting, figures.oldest_due) == (1, 1, None)
    assert store.waiting_tasks(task.tenant) == 2
    assert all(b.oldest is None for b in store.backlog(soon))
    assert store.figures(["refund"], soon)["refund"].oldest_due_s == 0.0
    (first,) = store.waits_of(task.id, pending=True)
    store.decide(task.id, uuid.UUID(first.id), "approved", soon, by="ann", reason=None)
    late = soon + timedelta(minutes=3)  # due to resume, and no worker took it: that is stuck
    (row,) = store.conversations(ConversationFilter(), late)
    assert (row.state, row.reason) == ("stuck", "due 3m ago, not resumed")
    assert store.tenant_figures(late)[task.tenant].oldest_due == later.not_before
    backlog = {b.status: b.oldest for b in store.backlog(late)}
    assert backlog[TaskStatus.WAITING] == soon and backlog[TaskStatus.QUEUED] == later.not_before


def test_secrets_in_the_arguments_are_redacted_before_they_are_stored(store: Store) -> None:
    task, _, _ = parked(store, approval("c1", key="sk-test-secret-value-1234567890"))
    [wait] = store.waits_of(task.id)
    assert "sk-test-secret-value-1234567890" not in str(wait.arguments)
    assert wait.redacted


def test_decisions_make_the_task_due_once_none_is_pending_and_are_final(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"), approval("c2"))
    first, second = store.waits_of(task.id, pending=True)
    wait, due = store.decide(task.id, uuid.UUID(first.id), "approved", T0, by="ann", reason=None)
    assert wait.status == "approved" and wait.decided_by == "ann" and not due
    assert store.get_task(task.id).not_before > T0
    wait, due = store.decide(task.id, uuid.UUID(second.id), "rejected", T0, by="bob", reason="no")
    assert wait.status == "rejected" and wait.reason == "no" and due
    assert store.get_task(task.id).not_before == T0
    with pytest.raises(Conflict, match="rejected by bob already"):
        store.decide(task.id, uuid.UUID(second.id), "approved", T0, by="eve", reason=None)
    with pytest.raises(NotFound):
        store.decide(task.id, uuid.uuid4(), "approved", T0, by="eve", reason=None)


def test_an_expired_approval_cannot_be_decided(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    [wait] = store.waits_of(task.id, pending=True)
    late = T0 + timedelta(hours=2)
    assert wait.decision(late) is not None and wait.decision(late).status == "expired"  # type: ignore[union-attr]
    with pytest.raises(Conflict, match="expired"):
        store.decide(task.id, uuid.UUID(wait.id), "approved", late, by="ann", reason=None)


def test_an_interrupt_rejects_pending_approvals_and_makes_the_task_due(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    newer = store.admit(sub("never mind", mode="interrupt"), T0)
    assert newer.interrupted == task.id
    now = store.get_task(task.id)
    assert now.interrupt_requested and now.not_before == T0
    assert [w.status for w in store.waits_of(task.id)] == ["interrupted"]


def test_a_cancel_ends_the_waiting_task_and_its_waits(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    assert store.cancel(task.id, T0).effect == "cancelled"
    assert store.get_task(task.id).status == TaskStatus.CANCELLED
    assert [w.status for w in store.waits_of(task.id)] == ["cancelled"]
    assert store.pending_approvals() == []


def test_a_delegate_wait_ends_when_its_task_ends(store: Store) -> None:
    child = store.admit(sub("child", key="k2"), T0).task
    task, _, _ = parked(store, Request("delegate", "c1", "call_agent", {}, 60.0, str(child.id)))
    assert store.release_delegate_waits(T0) == []  # the delegate has not ended
    run = start(store, child.conversation_id, T0)
    assert run is not None
    store.settle(run.task, run.run_id, ok("42"), T0)
    [woken] = store.release_delegate_waits(T0, target=child.id)
    assert woken.id == task.id and woken.not_before == T0
    assert [w.status for w in store.waits_of(task.id)] == ["done"]


def test_pending_approvals_are_listed_per_tenant_and_scope(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    assert [w.task_id for w, _ in store.pending_approvals()] == [str(task.id)]
    assert store.pending_approvals(tenants={"other"}) == []
    assert store.pending_approvals(scope="webhook:x") == []


def test_a_reset_cancels_a_waiting_task_and_ends_its_waits(store: Store) -> None:
    task, _, _ = parked(store, approval("c1"))
    store.reset_conversation(task.conversation_id, T0)
    assert store.get_task(task.id).status == TaskStatus.CANCELLED
    assert [w.status for w in store.waits_of(task.id)] == ["cancelled"]


def test_the_asking_filter_counts_exactly_the_tasks_asking_for_a_decision_now(
    store: Store,
) -> None:
    from fleet.store import TaskFilter

    asking, _, _ = parked(store, approval("c1"), key="a")
    short = Request("approval", "c1", "refund", {}, 60.0)  # past its deadline at T0 + 2 min
    expired, _, _ = parked(store, short, key="b")
    delegated = Request("delegate", "c1", "call_agent", {}, 3600.0, str(uuid.uuid4()))
    other, _, _ = parked(store, delegated, key="c")
    queued = store.admit(sub("refund", key="d"), T0).task
    later = T0 + timedelta(minutes=2)

    def ids(yes: bool, **more: object) -> set[uuid.UUID]:
        flt = TaskFilter(deployment="chat", asking=(yes, later), **more)  # type: ignore[arg-type]
        found = {t.id for t in store.list_tasks(flt)}
        assert store.count_tasks(flt) == len(found)
        return found

    assert ids(True) == {asking.id}
    assert ids(False) == {expired.id, other.id, queued.id}
    assert ids(True, limit=1) == {asking.id}
    waiting = frozenset({TaskStatus.WAITING})
    assert ids(False, statuses=waiting) == {expired.id, other.id}


def test_a_delegate_ending_while_its_caller_parks_is_never_missed(store: Store) -> None:
    """The race: the caller's park looks at its delegate (not ended), the delegate's settle
    commits and its release finds no wait (the park's is not committed yet), then the park
    commits. The park reads the delegate's row locked, so it waits for the settle under way
    and sees it ended (without the lock, the wait stays pending: the caller never resumes)."""
    import threading

    from sqlalchemy import event, text

    if store.dialect != "postgresql":
        pytest.skip("SQLite runs one writer at a time: no such interleaving")
    child = store.admit(sub("child", key="child"), T0).task
    assert start(store, child.conversation_id, T0, worker="w2") is not None
    caller = store.admit(sub("refund", key="caller", max_attempts=1), T0).task
    run = start(store, caller.conversation_id, T0, worker="w1")
    assert run is not None
    wait = Request("delegate", "c1", "call_agent", {}, 3600.0, str(child.id))

    parking = threading.current_thread()  # set to the parking thread below
    at_commit, go = threading.Event(), threading.Event()

    def hold(conn: object) -> None:  # the park's commit waits until the test lets it go
        if threading.current_thread() is parking:
            at_commit.set()
            go.wait(30)

    settle = store.engine.connect()
    tx = settle.begin()  # the delegate's settle under way: its row updated, not committed
    settle.execute(text("UPDATE tasks SET status = 'succeeded' WHERE id = :id"), {"id": child.id})
    event.listen(store.engine, "commit", hold)
    failed: list[BaseException] = []

    def park() -> None:
        try:
            store.park(run.task, run.run_id, [wait], WAITING, T0)
        except BaseException as exc:  # raised again below
            failed.append(exc)

    parker = threading.Thread(target=park)
    parking = parker
    try:
        parker.start()

        def blocked_on_the_lock() -> bool:
            with store.engine.connect() as conn:
                return bool(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database()"
                        )
                    ).scalar()
                )

        wait_for(lambda: at_commit.is_set() or blocked_on_the_lock(), 30, what="the park")
        tx.commit()  # the settle commits; its release looks for waits now
        store.release_delegate_waits(T0, target=child.id)
        go.set()
        parker.join(30)
    finally:
        go.set()
        event.remove(store.engine, "commit", hold)
        settle.close()
    assert not failed, failed
    assert [w.status for w in store.waits_of(caller.id)] == ["done"]
    assert store.get_task(caller.id).not_before == T0  # due: it resumes
