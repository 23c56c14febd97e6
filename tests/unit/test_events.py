"""Task events derived from records (pure): positions, order, resuming after any of them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from fleet.domain.events import END, Position, RunMark, derive
from fleet.domain.values import Step, Task, TaskStatus, TextPart
from fleet.errors import InputError

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
R1, R2 = uuid.UUID(int=1), uuid.UUID(int=2)


def task(status: TaskStatus, *, reply: str | None = None, attempts: int = 0) -> Task:
    return Task(
        id=uuid.UUID(int=99),
        deployment="chat",
        conversation_id=uuid.UUID(int=7),
        scope="api",
        key="k",
        seq=1,
        status=status,
        input=(TextPart(text="hi"),),
        not_before=T0,
        max_attempts=3,
        attempts=attempts,
        created_at=T0,
        finished_at=T0 + timedelta(seconds=9) if status.terminal else None,
        result={"reply": reply} if reply is not None else None,
        error="boom" if status == TaskStatus.FAILED else None,
    )


def run(rid: uuid.UUID, attempt: int, status: str) -> RunMark:
    return RunMark(rid, attempt, status, "echo", "h:1", T0, None, "worker lost")


def step(n: int, *, kind: str = "model", status: str = "finished") -> Step:
    return Step(
        step=n,
        kind=kind,
        name="echo" if kind == "model" else "lookup",
        status=status,
        input=None,
        output=None,
        error=None,
        usage={},
        started_at=T0 + timedelta(seconds=n),
        duration_ms=1.0,
        call_id=None,
        replayed=False,
    )


def shape(events: list) -> list[tuple[str, str, str | None]]:
    return [(e.id, e.kind, e.status.value if e.status else None) for e in events]


CASES = {
    "queued": (task(TaskStatus.QUEUED), [], [], [("0.0.0", "status", "queued")]),
    "cancelled while queued": (
        task(TaskStatus.CANCELLED),
        [],
        [],
        [
            ("0.0.0", "status", "queued"),
            ("0.end.2", "status", "cancelled"),
            ("0.end.3", "end", "cancelled"),
        ],
    ),
    "running, a tool call in flight is held back": (
        task(TaskStatus.RUNNING, attempts=1),
        [run(R1, 1, "running")],
        [(R1, step(1)), (R1, step(2, kind="tool", status="started"))],
        [("0.0.0", "status", "queued"), ("1.0.0", "status", "running"), ("1.1.0", "step", None)],
    ),
    "succeeded with an inbox delivery": (
        task(TaskStatus.SUCCEEDED, reply="done", attempts=1),
        [run(R1, 1, "succeeded")],
        [(R1, step(2, kind="inbox")), (R1, step(1)), (R1, step(3))],
        [
            ("0.0.0", "status", "queued"),
            ("1.0.0", "status", "running"),
            ("1.1.0", "step", None),
            ("1.2.0", "inbox", None),
            ("1.3.0", "step", None),
            ("1.end.0", "reply", None),
            ("1.end.2", "status", "succeeded"),
            ("1.end.3", "end", "succeeded"),
        ],
    ),
    "interrupted, the lost call shown, then retried": (
        task(TaskStatus.RUNNING, attempts=2),
        [run(R2, 2, "running"), run(R1, 1, "interrupted")],
        [(R1, step(1)), (R1, step(2, kind="tool", status="started")), (R2, step(1))],
        [
            ("0.0.0", "status", "queued"),
            ("1.0.0", "status", "running"),
            ("1.1.0", "step", None),
            ("1.2.0", "step", None),
            ("1.end.1", "status", "interrupted"),
            ("2.0.0", "status", "running"),
            ("2.1.0", "step", None),
        ],
    ),
    "waiting for an approval, then resumed": (
        task(TaskStatus.RUNNING, attempts=2),
        [run(R1, 1, "waiting"), run(R2, 2, "running")],
        [(R1, step(1)), (R1, step(2, kind="wait")), (R2, step(1))],
        [
            ("0.0.0", "status", "queued"),
            ("1.0.0", "status", "running"),
            ("1.1.0", "step", None),
            ("1.2.0", "step", None),
            ("1.end.1", "status", "waiting"),
            ("2.0.0", "status", "running"),
            ("2.1.0", "step", None),
        ],
    ),
    "failed after its last attempt was lost": (
        task(TaskStatus.FAILED, attempts=1),
        [run(R1, 1, "interrupted")],
        [(uuid.UUID(int=5), step(1))],  # a step of a run not read (yet): ignored
        [
            ("0.0.0", "status", "queued"),
            ("1.0.0", "status", "running"),
            ("1.end.1", "status", "interrupted"),
            ("1.end.2", "status", "failed"),
            ("1.end.3", "end", "failed"),
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_events_in_order(name: str) -> None:
    t, runs, steps, want = CASES[name]
    assert shape(derive(t, runs, steps)) == want


@pytest.mark.parametrize("name", list(CASES))
def test_resuming_after_any_event_gives_exactly_the_rest(name: str) -> None:
    t, runs, steps, _ = CASES[name]
    everything = derive(t, runs, steps)
    for i, ev in enumerate(everything):
        again = derive(t, runs, steps, Position.parse(ev.id))
        assert shape(again) == shape(everything[i + 1 :])


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.0.0", Position(0, 0, 0)),
        ("2.15.0", Position(2, 15, 0)),
        ("3.end.2", Position(3, END, 2)),
        (" 1.2.0 ", Position(1, 2, 0)),
    ],
)
def test_event_ids_parse(text: str, want: Position) -> None:
    assert Position.parse(text) == want
    assert Position.parse(str(want)) == want


@pytest.mark.parametrize("text", ["", "1.2", "a.b.c", "1.2.3.4", "1.-2.0", "9999999999.0.0"])
def test_a_foreign_event_id_is_a_clear_error(text: str) -> None:
    with pytest.raises(InputError) as err:
        Position.parse(text)
    assert err.value.field == "Last-Event-ID"
    assert "event id" in err.value.message


def test_positions_order_steps_before_the_end_phase() -> None:
    assert Position(1, 999_999) < Position(1, END, 0) < Position(2, 0, 0)
