"""A2A for waiting tasks (pure): the state a wait shows as, the status message naming the calls,
and a caller's decision read from a message's data part."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from fleet.a2a.tasks import PENDING_APPROVALS, asks, stream_events, to_a2a
from fleet.domain import a2a
from fleet.domain.events import END, Position, RunMark, TaskEvent
from fleet.domain.values import Task, TaskStatus, TextPart
from fleet.domain.waits import Wait
from fleet.errors import InputError

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
A1, A2 = str(uuid.UUID(int=0xA1)), str(uuid.UUID(int=0xA2))
BY = "a2a:alice"
ASKS = TaskState.TASK_STATE_INPUT_REQUIRED


def wait(
    wid: str = A1,
    *,
    kind: str = "approval",
    status: str = "pending",
    expires: timedelta = timedelta(hours=1),
    decided_by: str | None = None,
    tool: str = "refund",
) -> Wait:
    return Wait(
        id=wid,
        task_id=str(uuid.UUID(int=99)),
        tenant="default",
        kind=kind,  # type: ignore[arg-type]
        call_id=f"call-{wid[-2:]}",
        tool=tool,
        arguments={"order": "A-1", "amount": 12},
        redacted=False,
        status=status,  # type: ignore[arg-type]
        requested_at=NOW - timedelta(minutes=5),
        expires_at=NOW + expires,
        decided_by=decided_by,
    )


def task(status: TaskStatus = TaskStatus.WAITING, attempts: int = 1) -> Task:
    return Task(
        id=uuid.UUID(int=99),
        deployment="shop",
        conversation_id=uuid.UUID(int=7),
        scope="a2a:alice",
        key="ctx",
        seq=1,
        status=status,
        input=(TextPart(text="refund A-1"),),
        not_before=NOW,
        max_attempts=3,
        attempts=attempts,
        created_at=NOW,
    )


# -- states --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "asks_", "state"),
    [
        (TaskStatus.WAITING, True, "input-required"),
        (TaskStatus.WAITING, False, "working"),  # a delegate, a time, or decided: resuming
        (TaskStatus.RUNNING, True, "working"),  # only a waiting task asks
        (TaskStatus.SUCCEEDED, True, "completed"),
    ],
)
def test_state_of_a_waiting_task(status, asks_, state):
    assert a2a.state(status, asks=asks_) == state


@pytest.mark.parametrize(
    ("waits", "asked"),
    [
        ([wait()], [A1]),
        ([wait(kind="delegate")], []),
        ([wait(status="approved", decided_by=BY)], []),
        ([wait(expires=timedelta(0))], []),  # past its deadline: expired, whatever the row says
        ([wait(A1), wait(A2)], [A1, A2]),
    ],
)
def test_asking(waits, asked):
    assert [w.id for w in a2a.asking(waits, NOW)] == asked


@pytest.mark.parametrize(
    ("name", "statuses"),
    [
        ("input-required", {TaskStatus.WAITING}),
        ("working", {TaskStatus.RUNNING, TaskStatus.INTERRUPTED, TaskStatus.WAITING}),
        ("submitted", {TaskStatus.QUEUED, TaskStatus.LEASED}),
        ("rejected", set()),
    ],
)
def test_statuses_listed_for_a_state(name, statuses):
    assert a2a.statuses_of(name) == statuses


def test_the_status_message_names_the_call_its_arguments_and_the_approval():
    text = a2a.asking_text([wait()])
    assert 'refund({"amount": 12, "order": "A-1"})' in text
    assert f"(approval {A1})" in text and f'"approval": "{A1}"' in text
    several = a2a.asking_text([wait(A1), wait(A2, tool="cancel")])
    assert "2 approvals" in several and A2 in several and "<approval id>" in several


# -- the A2A task and stream ------------------------------------------------------------------


def test_an_asking_task_is_input_required_with_its_approvals_as_a_data_part():
    shown = to_a2a(task(), asked=[wait()])
    assert shown.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asks(shown)
    text, data = MessageToDict(shown.status.message)["parts"]
    assert "refund(" in text["text"]
    [approval] = data["data"][PENDING_APPROVALS]
    assert approval["id"] == A1 and approval["tool"] == "refund"
    assert approval["arguments"] == {"order": "A-1", "amount": 12}
    assert MessageToDict(shown.metadata)["fleet.status"] == "waiting"
    # a row read just before the run parked still says running: the pending approval wins
    assert to_a2a(task(TaskStatus.RUNNING), asked=[wait()]).status.state == ASKS
    assert to_a2a(task(TaskStatus.SUCCEEDED), asked=[wait()]).status.state != ASKS
    # waiting with nothing to ask (a delegate, or decided and about to resume): working
    assert to_a2a(task()).status.state == TaskState.TASK_STATE_WORKING
    assert not asks(to_a2a(task()))


def test_a_waiting_event_is_input_required_only_with_what_it_asks():
    run = RunMark(uuid.UUID(int=1), 1, "waiting", "echo", None, NOW, NOW, None)
    ev = TaskEvent(Position(1, END, 1), "status", task(), TaskStatus.WAITING, NOW, run)
    [asking] = stream_events(ev, [wait()])
    assert asking.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and asks(asking)
    assert MessageToDict(asking.metadata)["fleet.data"]["status"] == "waiting"
    [past] = stream_events(ev)
    assert past.status.state == TaskState.TASK_STATE_WORKING and not asks(past)


# -- decisions ----------------------------------------------------------------------------------


def data(**values):
    return {"data": values}


@pytest.mark.parametrize(
    ("parts", "waits", "want"),
    [
        # the one pending approval need not be named; other parts are left alone
        ([data(decision="approve")], [wait()], [(A1, "approve", None)]),
        (
            [{"text": "see below"}, data(approval=A2, decision="reject", reason=" no ")],
            [wait(A1), wait(A2)],
            [(A2, "reject", "no")],
        ),
        ([data(approval=A1.upper(), decision="approve")], [wait()], [(A1, "approve", None)]),
        (
            [data(approval=A1, decision="approve"), data(approval=A2, decision="reject")],
            [wait(A1), wait(A2)],
            [(A1, "approve", None), (A2, "reject", None)],
        ),
        # sent again after it was recorded: nothing to do, no error
        ([data(decision="approve")], [wait(status="approved", decided_by=BY)], []),
        (
            [data(approval=A1, decision="reject")],
            [wait(A1, status="rejected", decided_by=BY), wait(A2)],
            [],
        ),
    ],
)
def test_decisions(parts, waits, want):
    found = a2a.decisions("t", parts, waits, NOW, by=BY)
    assert [(d.approval, d.answer, d.reason) for d in found] == want


@pytest.mark.parametrize(
    ("parts", "waits", "says"),
    [
        (
            [{"text": "yes please"}],
            [wait()],
            'task t is input-required: it waits for approval of refund({"amount": 12, "order": '
            f'"A-1"}}) (approval {A1}); answer with a data part {{"approval": "{A1}"',
        ),
        ([data(other=1)], [wait()], "task t is input-required"),  # no "decision" key
        ([{"text": "hi"}], [], "carries no decision"),
        ([data(decision="maybe")], [wait()], "must be 'approve' or 'reject', got 'maybe'"),
        ([data(decision="approve", note="x")], [wait()], "unknown keys 'note'"),
        ([data(decision="approve", reason=3)], [wait()], "reason must be a string"),
        ([data(decision="approve", reason="x" * 501)], [wait()], "at most 500"),
        ([data(decision="approve")], [wait(A1), wait(A2)], "waits for 2 approvals"),
        ([data(decision="approve", approval=7)], [wait()], "must be an approval id"),
        ([data(decision="approve", approval="nope")], [wait()], "must be an approval id"),
        ([data(decision="approve", approval=A2)], [wait(A1)], f"has no approval '{A2}'"),
        ([data(decision="approve")], [wait(kind="delegate")], "has no approval to decide"),
        (
            [data(decision="approve"), data(decision="reject")],
            [wait()],
            "decided twice in one message",
        ),
        (
            [data(decision="approve")],
            [wait(status="rejected", decided_by="a2a:bob")],
            "is rejected by a2a:bob already",
        ),
        (
            [data(decision="reject")],
            [wait(status="approved", decided_by=BY)],
            "is approved by a2a:alice already",
        ),
        ([data(decision="approve")], [wait(expires=timedelta(0))], "expired at"),
    ],
)
def test_decision_refusals(parts, waits, says):
    with pytest.raises(InputError) as err:
        a2a.decisions("t", parts, waits, NOW, by=BY)
    assert says in err.value.message


def test_a_refused_decision_among_good_ones_records_none():
    """All are checked before any is recorded: one bad part refuses the message."""
    parts = [data(approval=A1, decision="approve"), data(approval=A2, decision="nope")]
    with pytest.raises(InputError, match=r"parts\.1\.data\.decision"):
        a2a.decisions("t", parts, [wait(A1), wait(A2)], NOW, by=BY)


@pytest.mark.parametrize(
    ("parts", "yes"),
    [
        ([data(decision="approve")], True),
        ([{"text": "approve"}], False),
        ([{"data": [1]}], False),
        ([data(approval=A1)], False),
    ],
)
def test_is_decision(parts, yes):
    assert a2a.is_decision(parts) is yes
