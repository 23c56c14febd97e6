"""Named statements of the hot path, built once (procrastinate keeps its SQL in one file too).

Building a Core statement per call costs more than running it on a local database, so the
statements a task's lease, checkpoint and settle use are module constants with bind parameters.
Status sets are rendered inline (no expanding IN parameters), so every statement caches whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    null,
    select,
    update,
)

from fleet.domain.values import ACTIVE, CLAIMABLE, UNFINISHED, TaskStatus
from fleet.store import rows
from fleet.store import schema as s

t = s.tasks
r = s.runs
m = s.messages


def status_in(column: Any, statuses: Iterable[TaskStatus]) -> ColumnElement[bool]:
    """``column IN ('a', 'b')`` with literals: one cached statement, no per-call expansion."""
    return column.in_([literal_column(f"'{st.value}'") for st in statuses])  # type: ignore[no-any-return]


def _unfinished_of(conversation: Any) -> ColumnElement[bool]:
    return and_(t.c.conversation_id == conversation, status_in(t.c.status, UNFINISHED))


_HEAD_ID = (
    select(t.c.id)
    .where(_unfinished_of(bindparam("b_conv")))
    .order_by(t.c.seq)
    .limit(1)
    .scalar_subquery()
)

#: Claim the conversation's lowest unfinished task if it is claimable and due: a new fencing
#: number, and its run opens in the same transaction (so the task goes straight to running).
CLAIM = (
    update(t)
    .where(
        t.c.id == _HEAD_ID,
        status_in(t.c.status, CLAIMABLE),
        t.c.not_before <= bindparam("b_now"),
    )
    .values(
        status=TaskStatus.RUNNING.value,
        fence=t.c.fence + 1,
        attempts=t.c.attempts + 1,
        leased_at=bindparam("b_now"),
        started_at=func.coalesce(t.c.started_at, bindparam("b_now", type_=s.UTCDateTime())),
        worker=bindparam("b_worker"),
    )
    .returning(*rows.TASK_COLUMNS)
)

#: The lowest unfinished task of a conversation (what blocks or waits).
HEAD = (
    select(t.c.id, t.c.status, t.c.not_before, t.c.fence)
    .where(_unfinished_of(bindparam("b_conv")))
    .order_by(t.c.seq)
    .limit(1)
)

#: Newest messages of a conversation's current generation.
HISTORY = (
    select(
        m.c.id,
        m.c.role,
        m.c.content,
        m.c.delivery,
        select(t.c.seq).where(t.c.id == m.c.task_id).scalar_subquery().label("seq"),
    )
    .where(m.c.conversation_id == bindparam("b_conv"), m.c.generation == bindparam("b_gen"))
    .order_by(m.c.id.desc())
    .limit(bindparam("b_limit"))
)

#: The frozen context of a task's latest run (a retry replays it).
FROZEN = (
    select(r.c.context)
    .where(r.c.task_id == bindparam("b_task"))
    .order_by(r.c.attempt.desc())
    .limit(1)
)

#: A write of a run: the task still has the claim's fencing number and that run is still open
#: (the run id makes a fencing number handed out twice harmless: see ``pg.CLAIM_AND_START``).
_FENCED = and_(
    t.c.id == bindparam("b_task"),
    t.c.fence == bindparam("b_fence"),
    t.c.status == TaskStatus.RUNNING.value,
    exists().where(
        r.c.id == bindparam("b_run"),
        r.c.task_id == t.c.id,
        r.c.status == TaskStatus.RUNNING.value,
    ),
)

#: Step boundary: is the run still ours, was a cancel or interrupt requested, is mail waiting?
CHECKPOINT = (
    update(t)
    .where(_FENCED)
    .values(fence=t.c.fence)
    .returning(t.c.cancel_requested, t.c.interrupt_requested, t.c.inbox)
)

#: Finish the task; a cancel requested meanwhile wins over the run's outcome.
SETTLE = (
    update(t)
    .where(_FENCED)
    .values(
        status=case(
            (t.c.cancel_requested, TaskStatus.CANCELLED.value), else_=bindparam("b_status")
        ),
        error=case((t.c.cancel_requested, "cancelled by request"), else_=bindparam("b_error")),
        error_class=case(
            (t.c.cancel_requested, "cancelled"), else_=bindparam("b_error_class", type_=String())
        ),
        result=case((t.c.cancel_requested, null()), else_=bindparam("b_result", type_=s.JSONType)),
        finished_at=bindparam("b_now"),
        worker=None,
    )
    .returning(t.c.status, t.c.generation, t.c.input, t.c.inbox, t.c.push_pending)
)

CLOSE_RUN = (
    update(r)
    .where(r.c.id == bindparam("b_run"))
    .values(
        status=bindparam("b_status"),
        usage=bindparam("b_usage", type_=s.JSONType),
        details=bindparam("b_details", type_=s.JSONType),
        error=bindparam("b_error"),
        finished_at=bindparam("b_now"),
    )
)

INSERT_RUN = r.insert()
INSERT_MESSAGES = m.insert()


def _upsert_traces() -> dict[str, Any]:
    """Journal rows; a tool call journaled as started gets its result in place."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    out: dict[str, Any] = {}
    for dialect, insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert)):
        stmt = insert(s.traces)
        out[dialect] = stmt.on_conflict_do_update(
            index_elements=["run_id", "step"],
            set_={
                name: stmt.excluded[name]
                for name in ("output", "error", "usage", "duration_ms", "status")
            },
        )
    return out


#: ``UPSERT_TRACES[dialect]``
UPSERT_TRACES = _upsert_traces()


def _take_back(*, last_attempt_fails: bool) -> Any:
    """A fenced update that ends an active task's lease: claimable again (``interrupted``), or
    finished when a cancel was requested meanwhile (that wins) or, if ``last_attempt_fails``,
    when it has used its last attempt."""
    cancelled = t.c.cancel_requested
    out_of_attempts = t.c.attempts >= t.c.max_attempts
    statuses: list[tuple[ColumnElement[bool], str]] = [(cancelled, TaskStatus.CANCELLED.value)]
    classes: list[tuple[ColumnElement[bool], str]] = [(cancelled, "cancelled")]
    finishes: ColumnElement[bool] = cancelled
    if last_attempt_fails:
        statuses.append((out_of_attempts, TaskStatus.FAILED.value))
        classes.append((out_of_attempts, "lost"))
        finishes = cancelled | out_of_attempts
    return (
        update(t)
        .where(
            t.c.id == bindparam("b_task"),
            t.c.fence == bindparam("b_fence"),
            status_in(t.c.status, ACTIVE),
        )
        .values(
            status=case(*statuses, else_=TaskStatus.INTERRUPTED.value),
            error=case((cancelled, "cancelled by request"), else_=bindparam("b_reason")),
            error_class=case(*classes, else_=null()),
            finished_at=case((finishes, bindparam("b_now", type_=s.UTCDateTime())), else_=null()),
            worker=None,
        )
        .returning(t.c.status)
    )


#: Take back a task whose worker was lost: retry it, fail it after its last attempt, or finish a
#: cancel that was requested while it ran.
RECOVER = _take_back(last_attempt_fails=True)

#: Give a running task back at worker shutdown: claimable at once, never failed for it (it keeps
#: its frozen context and journal; a cancel requested meanwhile wins).
HAND_BACK = _take_back(last_attempt_fails=False)

INTERRUPT_RUN = (
    update(r)
    .where(
        r.c.task_id == bindparam("b_task"),
        r.c.fence == bindparam("b_fence"),
        r.c.status == "running",
    )
    .values(status="interrupted", error=bindparam("b_reason"), finished_at=bindparam("b_now"))
)


# -- admission ----------------------------------------------------------------------------------

c = s.conversations
k = s.idempotency_keys

#: The task an idempotency key of a scope produced (or was merged into).
IDEMPOTENT = (
    select(*rows.TASK_COLUMNS)
    .join(k, k.c.task_id == t.c.id)
    .where(
        k.c.tenant == bindparam("b_tenant"),
        k.c.scope == bindparam("b_scope"),
        k.c.key == bindparam("b_key"),
    )
)


def _upsert_conversation(insert: Any, step: int) -> Any:
    """Get or create a conversation, locking its row; ``step`` 1 also takes the next seq."""
    stmt = insert(c).values(
        id=bindparam("b_id"),
        deployment=bindparam("b_deployment"),
        tenant=bindparam("b_tenant"),
        scope=bindparam("b_scope"),
        key=bindparam("b_key"),
        generation=0,
        last_seq=step,
        created_at=bindparam("b_now"),
        updated_at=bindparam("b_now"),
    )
    return stmt.on_conflict_do_update(
        index_elements=["deployment", "tenant", "scope", "key"],
        set_={"updated_at": stmt.excluded.updated_at, "last_seq": c.c.last_seq + step},
    ).returning(c.c.id, c.c.last_seq, c.c.generation)


def _upserts() -> dict[tuple[str, bool], Any]:
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return {
        (dialect, bump): _upsert_conversation(insert, 1 if bump else 0)
        for dialect, insert in (("postgresql", pg_insert), ("sqlite", sqlite_insert))
        for bump in (False, True)
    }


#: ``UPSERT_CONVERSATION[(dialect, take_seq)]``
UPSERT_CONVERSATION = _upserts()

#: What collect needs to know of the conversation's newest task.
NEWEST = (
    select(
        t.c.id,
        t.c.status,
        t.c.input_bytes,
        t.c.input,
        t.c.labels,
        t.c.submissions,
        t.c.created_at,
        t.c.not_before,
    )
    .where(t.c.conversation_id == bindparam("b_conv"))
    .order_by(t.c.seq.desc())
    .limit(1)
)

#: Append a submission to a task that is still queued (collect).
MERGE = (
    update(t)
    .where(t.c.id == bindparam("b_task"), t.c.status == TaskStatus.QUEUED.value)
    .values(
        input=bindparam("b_input", type_=s.JSONType),
        input_bytes=t.c.input_bytes + bindparam("b_bytes"),
        submissions=t.c.submissions + 1,
        not_before=bindparam("b_not_before"),
        labels=bindparam("b_labels", type_=s.JSONType),
    )
    .returning(*rows.TASK_COLUMNS)
)

#: Take the conversation's next seq (its row is locked by the upsert already).
NEXT_SEQ = (
    update(c)
    .where(c.c.id == bindparam("b_conv"))
    .values(last_seq=c.c.last_seq + 1)
    .returning(c.c.last_seq)
)

INSERT_TASK = t.insert().returning(*rows.TASK_COLUMNS)
INSERT_IDEMPOTENCY_KEY = k.insert()


def _conversation_task(*statuses: TaskStatus) -> Any:
    return t.c.conversation_id == bindparam("b_conv"), status_in(t.c.status, statuses)


#: The running task (if any) and the queued ones of a conversation: what a busy queue is.
BUSY = select(
    # (a waiting task counts: a steered message waits in its inbox, an interrupt reaches it)
    select(t.c.id)
    .where(*_conversation_task(*ACTIVE, TaskStatus.WAITING))
    .limit(1)
    .scalar_subquery()
    .label("active"),
    select(func.count())
    .select_from(t)
    .where(*_conversation_task(TaskStatus.QUEUED))
    .scalar_subquery()
    .label("queued"),
    select(t.c.id)
    .where(*_conversation_task(TaskStatus.QUEUED))
    .order_by(t.c.seq)
    .limit(1)
    .scalar_subquery()
    .label("oldest"),
    select(t.c.id)
    .where(t.c.conversation_id == bindparam("b_conv"), t.c.inbox > 0)
    .order_by(t.c.seq.desc())
    .limit(1)
    .scalar_subquery()
    .label("draining"),
)

#: ``drop_oldest``: cancel a queued task to make room, saying why.
DROP_QUEUED = (
    update(t)
    .where(t.c.id == bindparam("b_task"), t.c.status == TaskStatus.QUEUED.value)
    .values(
        status=TaskStatus.CANCELLED.value,
        error="dropped: queue full (max_queued; on_full = 'drop_oldest')",
        error_class="cancelled",
        finished_at=bindparam("b_now"),
    )
    .returning(t.c.id)
)

#: ``interrupt``: ask the active task's run to report and stop; a waiting one is due at once
#: (its pending approvals are rejected as ``interrupted`` in the same transaction).
INTERRUPT = (
    update(t)
    .where(t.c.id == bindparam("b_task"), status_in(t.c.status, (*ACTIVE, TaskStatus.WAITING)))
    .values(
        interrupt_requested=True,
        not_before=case(
            (t.c.status == TaskStatus.WAITING.value, bindparam("b_now", type_=s.UTCDateTime())),
            else_=t.c.not_before,
        ),
    )
    .returning(t.c.id, t.c.status)
)

#: ``steer``: count a message into the task's inbox if the task still runs, or if its run ended
#: with messages still waiting (they become tasks together, in order). Locks the row.
INBOX_RESERVE = (
    update(t)
    .where(
        t.c.id == bindparam("b_task"),
        status_in(t.c.status, (TaskStatus.RUNNING, TaskStatus.WAITING)) | (t.c.inbox > 0),
    )
    .values(inbox=t.c.inbox + 1)
    .returning(*rows.TASK_COLUMNS)
)

INSERT_INBOX = s.run_inbox.insert()

#: The task, if a message is already in its inbox under this idempotency key (a retried
#: signal_agent).
INBOX_BY_KEY = (
    select(*rows.TASK_COLUMNS)
    .join(s.run_inbox, s.run_inbox.c.task_id == t.c.id)
    .where(t.c.id == bindparam("b_task"), s.run_inbox.c.idempotency_key == bindparam("b_key"))
)
