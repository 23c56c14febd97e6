"""Handing a running task back at worker shutdown (the store's side), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from fleet.domain import shutdown
from fleet.domain.runs import TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import LeaseLost
from fleet.store import Store
from tests.integration.test_store import T0, ok, start, sub


def test_a_handed_back_task_resumes_at_once_and_never_fails_for_it(store: Store) -> None:
    t1 = store.admit(sub("a", max_attempts=1), T0).task
    store.admit(sub("b"), T0)
    old = start(store, t1.conversation_id, T0, worker="w1")
    assert old is not None
    step = TraceRow(1, "model", "echo", None, {"content": "x"}, None, {}, T0, 1.0)
    store.checkpoint(old.task, old.run_id, [step], T0)
    # its last attempt: a lost worker would fail it, a hand-back does not
    assert store.hand_back(t1.id, old.task.fence, "handed back", T0) == TaskStatus.INTERRUPTED
    assert store.hand_back(t1.id, old.task.fence, "again", T0) is None  # fenced: once
    with pytest.raises(LeaseLost):  # the old run can write nothing more
        store.checkpoint(old.task, old.run_id, [], T0)
    new = start(store, t1.conversation_id, T0, worker="w2")
    assert new is not None and new.task.id == t1.id and new.task.attempts == 2
    assert new.context == old.context  # the frozen context, and the journal, are kept
    assert [r.step for r in store.journal(t1.id)] == [1]
    store.settle(new.task, new.run_id, ok("done"), T0)
    runs = store.runs_of(t1.id)
    assert [(r.attempt, r.status, r.error) for r in runs] == [
        (1, "interrupted", "handed back"),
        (2, "succeeded", None),
    ]


def test_a_cancel_requested_before_the_hand_back_wins(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    assert store.cancel(t1.id, T0).effect == "requested"
    assert store.hand_back(t1.id, started.task.fence, "handed back", T0) == TaskStatus.CANCELLED
    assert store.get_task(t1.id).status == TaskStatus.CANCELLED


@pytest.mark.parametrize(
    ("reason", "journal"),
    [
        (shutdown.HANDED_BACK, [(1, "finished")]),
        (shutdown.ABANDONED, [(1, "finished"), (2, "started")]),
    ],
    ids=["handed-back-at-the-boundary", "abandoned-mid-step"],
)
def test_a_call_marked_begun_by_a_run_handed_back_at_that_boundary_never_began(
    store: Store, reason: str, journal: list[tuple[int, str]]
) -> None:
    """0.2.0 journaled an unsafe call as started, then handed its run back at that commit,
    before the call: the retry's journal leaves the mark out (the call runs). A run abandoned
    mid-step keeps it: that call was in flight."""
    t1 = store.admit(sub("a"), T0).task
    old = start(store, t1.conversation_id, T0, worker="w1")
    assert old is not None
    model = TraceRow(1, "model", "echo", None, {"content": ""}, None, {}, T0, 1.0)
    mark = TraceRow(2, "tool", "count", {}, None, None, {}, T0, 0.0, "started", "call_1")
    store.checkpoint(old.task, old.run_id, [model, mark], T0)
    assert store.hand_back(t1.id, old.task.fence, reason, T0) == TaskStatus.INTERRUPTED
    assert [(r.step, r.status) for r in store.journal(t1.id)] == journal
