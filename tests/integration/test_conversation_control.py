"""Conversation control through the store and the dispatcher (SQLite and PostgreSQL): steer
into a run's inbox, signals, requeue when the run ends first, interrupts, the queue cap,
collect's max_wait and max_merged, and the per-submission delivery mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from fleet.config import Settings
from fleet.domain import lifecycle as rules
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict, InputError, QueueFull
from fleet.runtime import Runtime, build
from fleet.store import Started
from fleet.store import schema as s
from tests.conftest import write_config

AGENTS = {"a": 'model = "echo"\n'}
DEPLOYMENTS = {
    "steer": 'agent = "a"\n[conversations]\nqueue_mode = "steer"\n',
    "intr": 'agent = "a"\n[conversations]\nqueue_mode = "interrupt"\n',
    "plain": 'agent = "a"\n',
    "capped": 'agent = "a"\n[conversations]\nmax_queued = 2\n',
    "dropper": 'agent = "a"\n[conversations]\nmax_queued = 2\non_full = "drop_oldest"\n',
    "merger": 'agent = "a"\n[conversations]\nmax_queued = 2\non_full = "merge"\n',
    "burst": 'agent = "a"\n[conversations]\nqueue_mode = "collect"\ndebounce = "2s"\n'
    'max_wait = "5s"\nmax_merged = 3\n',
}


@pytest.fixture
def rt(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    yield runtime
    runtime.close()


def claim(rt: Runtime, conv: uuid.UUID) -> Started:
    started = rt.store.start_next(
        conv,
        "w",
        rt.dispatcher.clock(),
        history_items=lambda _: 20,
        prepare=rt.dispatcher._prepare,
    )
    assert isinstance(started, Started)
    return started


def settle(rt: Runtime, started: Started, reply: str = "r", **kw):
    outcome = Outcome(TaskStatus.SUCCEEDED, reply, None, {}, **kw)
    return rt.store.settle(started.task, started.run_id, outcome, rt.dispatcher.clock())


def inbox(rt: Runtime) -> list[tuple[str, str, uuid.UUID | None]]:
    ib = s.run_inbox
    with rt.store.read() as conn:
        found = conn.execute(
            select(ib.c.source, ib.c.status, ib.c.requeued_task_id).order_by(ib.c.id)
        ).all()
    return [tuple(r) for r in found]  # type: ignore[misc]


def test_steer_goes_into_the_running_run_and_idle_conversations_queue(rt: Runtime) -> None:
    idle = rt.dispatcher.submit("steer", "first", key="k")
    assert idle.delivered_to == "queued" and idle.task.seq == 1
    started = claim(rt, idle.task.conversation_id)
    steered = rt.dispatcher.submit("steer", "more context", key="k", idempotency_key="s-1")
    assert steered.delivered_to == "run" and steered.task.id == idle.task.id
    assert rt.store.get_task(idle.task.id).inbox == 1
    # the boundary takes it, journaled as the run's step
    signals = rt.store.checkpoint(
        started.task, started.run_id, [], rt.dispatcher.clock(), take_inbox_as=2
    )
    assert [i.text for i in signals.taken] == ["more context"]
    assert inbox(rt) == [("steer", "delivered", None)]
    final, nxt, _ = settle(rt, started, "echo done", inbox=("more context",))
    assert final == TaskStatus.SUCCEEDED and nxt is None
    said = [(m.role, m.content) for m in rt.store.messages(idle.task.conversation_id)]
    assert said == [("user", "first"), ("user", "more context"), ("assistant", "echo done")]
    # a repeat of the steered submission answers the task it went into
    again = rt.dispatcher.submit("steer", "more context", key="k", idempotency_key="s-1")
    assert again.duplicate and again.task.id == idle.task.id


def test_a_message_the_run_did_not_take_becomes_the_next_task(rt: Runtime) -> None:
    first = rt.dispatcher.submit("steer", "first", key="k").task
    started = claim(rt, first.conversation_id)
    a = rt.dispatcher.submit("steer", "one", key="k", idempotency_key="i-1")
    b = rt.dispatcher.submit("steer", "two", key="k")
    assert (a.delivered_to, b.delivered_to) == ("run", "run")
    final, nxt, _ = settle(rt, started)
    assert final == TaskStatus.SUCCEEDED
    tasks = (
        rt.store.list_tasks_of(first.conversation_id)
        if hasattr(rt.store, "list_tasks_of")
        else None
    )
    del tasks
    requeued = [r[2] for r in inbox(rt)]
    assert [r[1] for r in inbox(rt)] == ["requeued", "requeued"]
    made = [rt.store.get_task(t) for t in requeued if t is not None]
    assert [(t.seq, t.input[0].text, t.status) for t in made] == [  # type: ignore[union-attr]
        (2, "one", TaskStatus.QUEUED),
        (3, "two", TaskStatus.QUEUED),
    ]
    assert nxt is not None and nxt.task_id == made[0].id  # the drain goes on with them
    assert rt.store.get_task(first.id).inbox == 0
    dup = rt.dispatcher.submit("steer", "one", key="k", idempotency_key="i-1")
    assert dup.duplicate and dup.task.id == made[0].id  # the key now names its own task


def test_messages_steered_into_a_run_of_an_older_generation_are_cancelled(rt: Runtime) -> None:
    """reset --cancel-running: the stopped run's settle commits, the reset commits, then its
    inbox is requeued (here by the sweeper, as after a worker died between the two): the
    messages belong to the old generation and must not become tasks of the new one."""
    first = rt.dispatcher.submit("steer", "first", key="k").task
    claim(rt, first.conversation_id)
    assert rt.dispatcher.submit("steer", "old news", key="k").delivered_to == "run"
    with rt.store.tx() as conn:  # the settle of the stopped run, without its requeue
        conn.execute(
            s.tasks.update()
            .where(s.tasks.c.id == first.id)
            .values(status=TaskStatus.CANCELLED.value, finished_at=rt.dispatcher.clock())
        )
    reset = rt.store.reset_conversation(first.conversation_id, rt.dispatcher.clock())
    assert reset.generation == 1
    rt.dispatcher.sweep()
    assert inbox(rt) == [("steer", "cancelled", None)]
    with rt.store.read() as conn:
        why = conn.execute(select(s.run_inbox.c.error)).scalar_one()
        tasks = conn.execute(select(s.tasks.c.id)).scalars().all()
    assert why == rules.RESET_REASON
    assert tasks == [first.id]  # nothing queued in the new generation
    assert rt.store.get_task(first.id).inbox == 0  # and the sweeper is done with it


def test_steer_after_the_run_ended_is_a_new_task(rt: Runtime) -> None:
    first = rt.dispatcher.submit("steer", "first", key="k").task
    settle(rt, claim(rt, first.conversation_id))
    late = rt.dispatcher.submit("steer", "late", key="k")
    assert late.delivered_to == "queued" and late.task.seq == 2


def test_the_sweeper_requeues_what_a_lost_worker_left_in_an_inbox(rt: Runtime) -> None:
    first = rt.dispatcher.submit("steer", "first", key="k").task
    started = claim(rt, first.conversation_id)
    rt.dispatcher.submit("steer", "stranded", key="k")
    # the task ended without the requeue (a worker died in between): simulate it directly
    with rt.store.tx() as conn:
        conn.execute(
            s.tasks.update().where(s.tasks.c.id == first.id).values(status="succeeded", worker=None)
        )
    del started
    assert rt.store.inbox_orphans() == [(first.id, first.conversation_id)]
    rt.dispatcher.sweep()
    assert rt.store.inbox_orphans() == []
    (row,) = inbox(rt)
    assert row[1] == "requeued" and rt.store.get_task(row[2]).input[0].text == "stranded"  # type: ignore[arg-type,union-attr]


def test_signals_reach_running_tasks_only(rt: Runtime) -> None:
    task = rt.dispatcher.submit("plain", "first", key="k").task
    with pytest.raises(Conflict, match="is queued: signals reach running tasks only"):
        rt.dispatcher.signal(task.id, "hello")
    claim(rt, task.conversation_id)
    assert rt.dispatcher.signal(task.id, "hello", caller="ops").id == task.id
    assert inbox(rt) == [("signal", "pending", None)]
    with pytest.raises(InputError):
        rt.dispatcher.signal(task.id, "")


def test_interrupt_asks_the_running_task_to_stop_and_queues_the_new_input(rt: Runtime) -> None:
    first = rt.dispatcher.submit("intr", "long job", key="k").task
    idle = rt.dispatcher.submit("intr", "queued behind", key="k")
    assert idle.interrupted is None  # nothing was running yet
    started = claim(rt, first.conversation_id)
    newer = rt.dispatcher.submit("intr", "never mind, do this", key="k")
    assert newer.interrupted == first.id and newer.delivered_to == "queued"
    signals = rt.store.checkpoint(started.task, started.run_id, [], rt.dispatcher.clock())
    assert signals.interrupt
    outcome = Outcome(TaskStatus.SUPERSEDED, "partial", "interrupted by a newer message", {})
    final = rt.store.settle(started.task, started.run_id, outcome, rt.dispatcher.clock()).status
    done = rt.store.get_task(first.id)
    assert (final, done.status, done.reply) == (
        TaskStatus.SUPERSEDED,
        TaskStatus.SUPERSEDED,
        "partial",
    )
    assert rt.store.runs_of(first.id)[0].status == "interrupted"
    assert [m.content for m in rt.store.messages(first.conversation_id)] == ["long job", "partial"]
    assert rt.dispatcher.cancel(first.id).effect == "finished"  # cancelling it is a no-op


def test_the_queue_cap_rejects_and_stores_nothing(rt: Runtime) -> None:
    for i in range(2):
        rt.dispatcher.submit("capped", f"m{i}", key="k")
    with pytest.raises(QueueFull) as info:
        rt.dispatcher.submit("capped", "m2", key="k", idempotency_key="x")
    assert "already has 2 queued tasks (max_queued = 2)" in info.value.message
    assert info.value.status == 429
    assert len(rt.store.list_tasks(_filter("capped"))) == 2
    with rt.store.read() as conn:
        assert conn.execute(select(s.idempotency_keys.c.key)).all() == []


def test_the_queue_cap_can_drop_the_oldest_visibly(rt: Runtime) -> None:
    a = rt.dispatcher.submit("dropper", "a", key="k").task
    hinted: list[uuid.UUID] = []
    rt.dispatcher.hints.changed = hinted.append  # type: ignore[method-assign]
    rt.dispatcher.submit("dropper", "b", key="k")
    c = rt.dispatcher.submit("dropper", "c", key="k")
    assert c.dropped == a.id and c.task.seq == 3
    assert hinted == [a.id], "the dropped task's streams are told at once"
    gone = rt.store.get_task(a.id)
    assert gone.status == TaskStatus.CANCELLED
    assert gone.error == "dropped: queue full (max_queued; on_full = 'drop_oldest')"


def test_over_http_a_dropped_task_says_why_in_get_task_and_the_metric_counts_it(
    rt: Runtime,
) -> None:
    from fastapi.testclient import TestClient
    from prometheus_client import REGISTRY

    from fleet.api.app import create_app

    def dropped() -> float:
        value = REGISTRY.get_sample_value(
            "fleet_tasks_dropped_total", {"deployment": "dropper", "reason": "queue_full"}
        )
        return value or 0.0

    before = dropped()
    with TestClient(create_app(rt, run_embedded=False)) as client:
        answers = [
            client.post(
                "/v1/tasks", json={"deployment": "dropper", "input": m, "conversationKey": "d"}
            )
            for m in ("a", "b", "c")
        ]
        assert [a.status_code for a in answers] == [202, 202, 202]
        oldest = answers[0].json()["id"]
        assert [a.json()["dropped"] for a in answers] == [None, None, oldest]
        assert dropped() == before + 1
        got = client.get(f"/v1/tasks/{oldest}")
        assert got.status_code == 200
        assert got.json()["status"] == "cancelled"
        assert got.json()["error"] == "dropped: queue full (max_queued; on_full = 'drop_oldest')"
        kept = [client.get(f"/v1/tasks/{a.json()['id']}").json()["status"] for a in answers[1:]]
        assert kept == ["queued", "queued"]


def test_the_queue_cap_can_merge_into_the_newest(rt: Runtime) -> None:
    rt.dispatcher.submit("merger", "a", key="k")
    b = rt.dispatcher.submit("merger", "b", key="k").task
    c = rt.dispatcher.submit("merger", "c", key="k")
    assert c.merged and c.task.id == b.id and c.task.submissions == 2
    assert [p.text for p in c.task.input] == ["b", "c"]  # type: ignore[union-attr]


def test_collect_is_bounded_by_max_wait_and_max_merged(rt: Runtime) -> None:
    clock = FakeClock(rt.dispatcher.clock())
    rt.dispatcher.clock = clock
    first = rt.dispatcher.submit("burst", "p0", key="k").task
    start = first.not_before
    clock.advance(1.8)
    second = rt.dispatcher.submit("burst", "p1", key="k").task
    assert second.id == first.id and second.not_before == start + timedelta(seconds=1.8)
    clock.advance(1.8)
    third = rt.dispatcher.submit("burst", "p2", key="k").task
    # 3.6 s after the first + 2 s debounce = 5.6 s: capped at max_wait (5 s after the first)
    assert third.not_before == first.created_at + timedelta(seconds=5)
    assert third.submissions == 3
    fourth = rt.dispatcher.submit("burst", "p3", key="k").task
    assert fourth.id != first.id and fourth.seq == 2  # max_merged = 3


def test_delivery_overrides_the_mode_for_one_submission(rt: Runtime) -> None:
    first = rt.dispatcher.submit("plain", "first", key="k").task
    claim(rt, first.conversation_id)
    steered = rt.dispatcher.submit("plain", "btw", key="k", delivery="steer")
    assert steered.delivered_to == "run"
    queued = rt.dispatcher.submit("plain", "later", key="k")
    assert queued.delivered_to == "queued"
    with pytest.raises(InputError, match="delivery must be one of followup, collect"):
        rt.dispatcher.submit("plain", "x", key="k", delivery="shout")


class FakeClock:
    def __init__(self, now) -> None:
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _filter(deployment: str):
    from fleet.store import TaskFilter

    return TaskFilter(deployment=deployment)


def test_over_http_a_full_queue_is_a_429_and_signals_answer_where_they_went(rt: Runtime) -> None:
    from fastapi.testclient import TestClient
    from prometheus_client import REGISTRY

    from fleet.api.app import create_app

    def dropped(reason: str) -> float:
        value = REGISTRY.get_sample_value(
            "fleet_tasks_dropped_total", {"deployment": "capped", "reason": reason}
        )
        return value or 0.0

    before = dropped("rejected")
    with TestClient(create_app(rt, run_embedded=False)) as client:
        for i in range(2):
            ok = client.post(
                "/v1/tasks", json={"deployment": "capped", "input": f"m{i}", "conversationKey": "h"}
            )
            assert ok.status_code == 202 and ok.json()["deliveredTo"] == "queued"
        full = client.post(
            "/v1/tasks", json={"deployment": "capped", "input": "m2", "conversationKey": "h"}
        )
        assert full.status_code == 429
        assert full.headers["content-type"].startswith("application/problem+json")
        assert "max_queued = 2" in full.json()["detail"]
        task_id = ok.json()["id"]
        refused = client.post(f"/v1/tasks/{task_id}/signal", json={"input": "psst"})
        assert refused.status_code == 409 and "is queued" in refused.json()["detail"]
        bad = client.post(f"/v1/tasks/{task_id}/signal", json={"text": "psst"})
        assert bad.status_code == 422
        steer = client.post(
            "/v1/tasks",
            json={"deployment": "plain", "input": "a", "conversationKey": "s", "delivery": "x"},
        )
        assert steer.status_code == 422
    assert dropped("rejected") == before + 1
