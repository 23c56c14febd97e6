"""The error class a task's end stores, on SQLite and PostgreSQL: a settle stores its outcome's
(or its words'), a success none, a cancel requested meanwhile ``cancelled``; a worker lost on
the last attempt ``lost`` (and a retry after an earlier loss none); a cancel of a queued task
``cancelled``."""

from __future__ import annotations

from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.store import Store
from tests.integration.test_store import T0, ok, start, sub


def test_a_settle_stores_why_it_failed_and_a_success_nothing(store: Store) -> None:
    first = store.admit(sub("a", key="k1"), T0).task
    run = start(store, first.conversation_id, T0)
    assert run is not None
    failed = Outcome(
        TaskStatus.FAILED, None, "model m failed: HTTP 429", {}, error_class="rate_limit"
    )
    store.settle(run.task, run.run_id, failed, T0)
    assert store.get_task(first.id).error_class == "rate_limit"

    words = store.admit(sub("b", key="k2"), T0).task
    run = start(store, words.conversation_id, T0)
    assert run is not None
    store.settle(
        run.task, run.run_id, Outcome(TaskStatus.FAILED, None, "step limit reached", {}), T0
    )
    assert store.get_task(words.id).error_class == "step_limit"

    fine = store.admit(sub("c", key="k3"), T0).task
    run = start(store, fine.conversation_id, T0)
    assert run is not None
    store.settle(run.task, run.run_id, ok("hi"), T0)
    assert store.get_task(fine.id).error_class is None


def test_a_cancel_requested_meanwhile_wins_with_its_class(store: Store) -> None:
    task = store.admit(sub("a"), T0).task
    run = start(store, task.conversation_id, T0)
    assert run is not None
    store.cancel(task.id, T0)  # running: asked to stop
    store.settle(run.task, run.run_id, ok("late"), T0)
    found = store.get_task(task.id)
    assert (found.status, found.error_class) == (TaskStatus.CANCELLED, "cancelled")


def test_a_lost_worker_on_the_last_attempt_is_lost_and_an_earlier_loss_nothing(
    store: Store,
) -> None:
    task = store.admit(sub("a", key="k1", max_attempts=2), T0).task
    run = start(store, task.conversation_id, T0)
    assert run is not None
    assert store.recover(task.id, run.task.fence, "worker lost", T0) == TaskStatus.INTERRUPTED
    assert store.get_task(task.id).error_class is None  # it runs again
    run = start(store, task.conversation_id, T0)
    assert run is not None
    assert store.recover(task.id, run.task.fence, "worker lost", T0) == TaskStatus.FAILED
    assert store.get_task(task.id).error_class == "lost"


def test_a_queued_task_cancelled_is_cancelled(store: Store) -> None:
    store.admit(sub("a"), T0)
    queued = store.admit(sub("b"), T0).task
    store.cancel(queued.id, T0)
    assert store.get_task(queued.id).error_class == "cancelled"
