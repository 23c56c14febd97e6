"""Task events read from the store (SQLite and PostgreSQL): a follower that reads after its last
event at every stage of a task's life, and one that reconnects anywhere, see each event once."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from fleet.domain.events import Position
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus
from fleet.store import Store
from tests.integration.test_run_reads import MODEL_CALL, TOOL_CALL, row, start
from tests.integration.test_store import T0, sub


def test_a_follower_sees_every_event_once_through_a_crash_and_a_retry(store: Store) -> None:
    task = store.admit(sub("hello"), T0).task
    seen: list[str] = []
    marks: list[object] = []
    after: Position | None = None

    def poll() -> list[str]:
        nonlocal after
        marks.append(store.event_marks([task.id])[task.id])
        _, events = store.task_events(task.id, after)
        if events:
            after = events[-1].position
        ids = [f"{e.id} {e.kind} {e.status.value if e.status else ''}".strip() for e in events]
        seen.extend(ids)
        return ids

    assert poll() == ["0.0.0 status queued"]
    assert poll() == []
    first = start(store, task.conversation_id, "host:1")
    assert poll() == ["1.0.0 status running"]
    store.checkpoint(first.task, first.run_id, [MODEL_CALL], T0)
    assert poll() == ["1.1.0 step"]
    started = row(2, "tool", "lookup", input=TOOL_CALL.input, status="started", call_id="call_1")
    store.checkpoint(first.task, first.run_id, [started], T0)
    assert poll() == []  # in flight: not shown yet
    assert marks[-1] != marks[-2], "a journaled call changes the mark"
    store.recover(task.id, first.task.fence, "worker lost", T0)
    assert poll() == ["1.2.0 step", "1.end.1 status interrupted"]
    second = start(store, task.conversation_id, "host:2")
    store.checkpoint(
        second.task, second.run_id, [dataclasses.replace(MODEL_CALL, replayed=True)], T0
    )
    assert poll() == ["2.0.0 status running", "2.1.0 step"]
    store.checkpoint(second.task, second.run_id, [started], T0)
    assert poll() == []
    done = dataclasses.replace(TOOL_CALL, status="finished")
    store.checkpoint(second.task, second.run_id, [done], T0)  # the call's result, in place
    assert marks[-1] != marks[-2], "a call finishing in place changes the mark"
    assert poll() == ["2.2.0 step"]
    final: TraceRow = row(3, "model", "echo", output={"content": "done", "finish_reason": "stop"})
    outcome = Outcome(TaskStatus.SUCCEEDED, "done", None, {"steps": 3}, traces=[final])
    store.settle(second.task, second.run_id, outcome, T0 + timedelta(seconds=5))
    assert poll() == [
        "2.3.0 step",
        "2.end.0 reply",
        "2.end.2 status succeeded",
        "2.end.3 end succeeded",
    ]
    assert poll() == []
    assert marks[-1] == marks[-2], "nothing changed, the same mark"

    # Reconnecting after any event gives exactly what followed it.
    _, everything = store.task_events(task.id)
    assert [e.id for e in everything] == [s.split()[0] for s in seen]
    for i, ev in enumerate(everything):
        _, rest = store.task_events(task.id, ev.position)
        assert [e.id for e in rest] == [e.id for e in everything[i + 1 :]]
        if ev.kind == "step":  # after a delta of that step: the step's event comes next
            _, rest = store.task_events(
                task.id, Position.delta(ev.position.attempt, ev.position.step, 5)
            )
            assert [e.id for e in rest] == [e.id for e in everything[i:]]
    step_two = next(e for e in everything if e.id == "2.2.0")
    assert step_two.step is not None and step_two.step.output == TOOL_CALL.output


def test_a_follower_after_a_steps_deltas_gets_that_steps_event(store: Store) -> None:
    """A stream that sent step n's text (``1.n.d<s>``) reads step n's own event next: it
    stands for that text (a read that skipped step n lost it)."""
    task = store.admit(sub("hello"), T0).task
    first = start(store, task.conversation_id, "host:1")
    store.checkpoint(first.task, first.run_id, [MODEL_CALL], T0)
    _, events = store.task_events(task.id, Position.delta(1, 1, 7))
    assert [e.id for e in events] == ["1.1.0"]
    final: TraceRow = row(2, "model", "echo", output={"content": "done", "finish_reason": "stop"})
    outcome = Outcome(TaskStatus.SUCCEEDED, "done", None, {"steps": 2}, traces=[final])
    store.settle(first.task, first.run_id, outcome, T0 + timedelta(seconds=5))
    _, events = store.task_events(task.id, Position.delta(1, 2, 3))
    assert [e.id for e in events] == ["1.2.0", "1.end.0", "1.end.2", "1.end.3"]
    _, events = store.task_events(task.id, Position.parse("1.2.x1"))  # a later release's id
    assert [e.id for e in events] == ["1.2.0", "1.end.0", "1.end.2", "1.end.3"]


def test_marks_of_several_tasks_in_one_read_and_a_missing_one(store: Store) -> None:
    a = store.admit(sub("a", key="a"), T0).task
    b = store.admit(sub("b", key="b"), T0).task
    missing = a.id.__class__(int=12345)
    marks = store.event_marks([a.id, b.id, missing])
    assert set(marks) == {a.id, b.id}
    assert marks[a.id] == ("queued", 0, 0, 0)
    store.cancel(b.id, T0)
    assert store.event_marks([b.id])[b.id][0] == "cancelled"
    _, events = store.task_events(b.id)
    assert [e.kind for e in events] == ["status", "status", "end"]


def test_the_loops_marks_read_answers_as_the_stores_and_no_thread_runs_a_poll(
    store: Store,
) -> None:
    """On PostgreSQL the hub reads marks on its loop (``LoopMarks``): the same marks as
    ``event_marks`` (journal rows, finished ones, a missing task), and a hub given it polls
    without ever calling the store's threaded read."""
    import asyncio
    import uuid

    from fleet.api.event_hub import EventHub, Follower, LoopMarks

    if store.dialect != "postgresql":
        pytest.skip("the loop's read is PostgreSQL's")
    a = store.admit(sub("a", key="la"), T0).task
    b = store.admit(sub("b", key="lb"), T0).task
    first = start(store, b.conversation_id, "host:1")
    started = row(2, "tool", "lookup", input=TOOL_CALL.input, status="started", call_id="c1")
    store.checkpoint(first.task, first.run_id, [MODEL_CALL, started], T0)
    missing = uuid.UUID(int=54321)
    ids = [a.id, b.id, missing]
    expected = store.event_marks(ids)
    assert expected == {a.id: ("queued", 0, 0, 0), b.id: ("running", 1, 2, 1)}

    class NoThreadedReads:
        """The store, but its threaded marks read fails the test."""

        def __getattr__(self, name: str) -> Any:
            if name == "event_marks":
                raise AssertionError("a poll ran on the thread pool")
            return getattr(store, name)

    async def scenario() -> None:
        marks = LoopMarks.for_store(store)
        assert marks is not None
        assert await marks(ids) == expected
        hub = EventHub(NoThreadedReads(), marks=marks)  # type: ignore[arg-type]
        follower = Follower()
        async with asyncio.timeout(10), hub.watch(b.id, follower):
            while hub.polls < 2:  # the first read, then an idle one
                follower.changed = False  # (as a stream does once it has read)
                await follower.wait(until=asyncio.get_running_loop().time() + 0.05)
        await hub.close()

    asyncio.run(scenario())
