"""Reads behind task event streams: a task's events after a position, and cheap change marks.

The events come from the store's own records (``fleet.domain.events`` derives them); nothing is
written for them. A follower asks ``event_marks`` (one statement for every task it watches) and
reads ``task_events`` only when a task's mark changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, and_, bindparam, case, func, or_, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.base import Executable

from fleet.domain.events import Position, RunMark, TaskEvent, derive
from fleet.domain.values import Step, Task
from fleet.store import rows
from fleet.store import schema as s
from fleet.store.base import StoreBase

t, r, tr = s.tasks, s.runs, s.traces

#: A task's change mark: status, attempts, journal rows, finished journal rows.
Mark = tuple[str, int, int, int]
#: Tasks one mark statement asks about at most on SQLite (bound parameters stay few).
MARK_BATCH = 500

_RUN_COLUMNS = (
    r.c.id,
    r.c.attempt,
    r.c.status.label("run_status"),
    r.c.model,
    r.c.worker.label("run_worker"),
    r.c.started_at.label("run_started_at"),
    r.c.finished_at.label("run_finished_at"),
    r.c.error.label("run_error"),
)


class EventStore(StoreBase):
    def task_events(
        self, task_id: uuid.UUID, after: Position | None = None
    ) -> tuple[Task, list[TaskEvent]]:
        """The task and its events after ``after``; NotFound if there is no such task.

        Two statements: the task row first, then its runs with their steps after ``after`` in
        one (a single snapshot), so a final status is never seen before the steps it follows.
        """
        from fleet.errors import NotFound

        attempt = after.attempt if after is not None else 0
        step = after.step if after is not None else -1
        if after is not None and after.is_delta:
            step -= 1  # after a delta of step n, step n's own event is still to come
        joined = and_(
            tr.c.run_id == r.c.id,
            or_(r.c.attempt > attempt, tr.c.step > step),
        )
        query = (
            select(*_RUN_COLUMNS, *(c.label(f"tr_{c.name}") for c in tr.c))
            .select_from(r.outerjoin(tr, joined))
            .where(r.c.task_id == task_id, r.c.attempt >= attempt)
            .order_by(r.c.attempt, tr.c.step)
        )
        with self.read() as conn:
            row = conn.execute(select(*rows.TASK_COLUMNS).where(t.c.id == task_id)).first()
            if row is None:
                raise NotFound(f"no task with id {task_id}", field="id")
            found = conn.execute(query).all() if row.attempts or row.status != "queued" else []
        task = rows.task(row)
        runs: dict[uuid.UUID, RunMark] = {}
        steps: list[tuple[uuid.UUID, Step]] = []
        for x in found:
            m = x._mapping
            if m["id"] not in runs:
                runs[m["id"]] = RunMark(
                    id=m["id"],
                    attempt=m["attempt"],
                    status=m["run_status"],
                    model=m["model"],
                    worker=m["run_worker"],
                    started_at=m["run_started_at"],
                    finished_at=m["run_finished_at"],
                    error=m["run_error"],
                )
            if m["tr_id"] is not None:
                steps.append((m["id"], rows.step(_unprefixed(m))))
        return task, derive(task, list(runs.values()), steps, after)

    def event_marks(self, task_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Mark]:
        """A mark per existing task that changes whenever the task may have a new event.

        On PostgreSQL one statement with the ids as one array parameter: a thousand ids as an
        ``IN`` list of bound parameters cost the poller three times the CPU (the statement
        rendered, its text converted and a thousand parameters sent each poll). Each id is looked
        up through the primary key (``_MARKS_PROBE``): as ``id = ANY(...)`` the planner chose a
        scan of the whole tasks table whenever its statistics lagged behind a fast-growing table
        (9 ms a poll at 64,000 tasks, growing with every task admitted).
        """
        batches: list[tuple[Executable, list[uuid.UUID]]]
        if self.dialect == "postgresql":
            batches = [(_MARKS_PROBE, list(task_ids))]
        else:
            step = MARK_BATCH
            batches = [
                (_MARKS_IN, list(task_ids[i : i + step])) for i in range(0, len(task_ids), step)
            ]
        out: dict[uuid.UUID, Mark] = {}
        with self.read() as conn:
            for query, ids in batches:
                out.update(marks_of(conn.execute(query, {"ids": ids}).all()))
        return out

    def event_marks_statement(
        self, task_ids: Sequence[uuid.UUID]
    ) -> tuple[str, dict[str, Any]] | None:
        """``event_marks``'s statement for a driver of its own (``fleet.store.aio``): its SQL
        and parameters on PostgreSQL (turn its rows into marks with ``marks_of``), else None."""
        if self.dialect != "postgresql":
            return None
        return MARKS_SQL, {"ids": list(task_ids), "finished": _FINISHED}


def marks_of(found: Iterable[Any]) -> dict[uuid.UUID, Mark]:
    """The marks in rows of the marks statement (tuples, or dicts by column name)."""
    out: dict[uuid.UUID, Mark] = {}
    for row in found:
        task_id, status, attempts, count, done = row.values() if isinstance(row, dict) else row
        out[task_id] = (status, int(attempts), int(count), int(done))
    return out


#: A journal row's status once its call finished: the mark's fourth part counts these.
_FINISHED = "finished"


def _marks(where: Any) -> Select[Any]:
    finished = func.coalesce(func.sum(case((tr.c.status == _FINISHED, 1), else_=0)), 0)
    return (
        select(t.c.id, t.c.status, t.c.attempts, func.count(tr.c.id), finished)
        .select_from(t.outerjoin(tr, tr.c.task_id == t.c.id))
        .where(where)
        .group_by(t.c.id, t.c.status, t.c.attempts)
    )


#: PostgreSQL: one index probe per id (the ``LIMIT 1`` keeps the planner from turning the
#: lateral lookup back into a join it may answer with a scan of every task).
_PROBE_SQL = """
    SELECT t.id, t.status, t.attempts, j.count, j.done
    FROM unnest(CAST({ids} AS uuid[])) AS w(id)
    CROSS JOIN LATERAL (
        SELECT id, status, attempts FROM {tasks} WHERE {tasks}.id = w.id LIMIT 1
    ) AS t
    CROSS JOIN LATERAL (
        SELECT count(*) AS count, count(*) FILTER (WHERE {traces}.status = {finished}) AS done
        FROM {traces} WHERE {traces}.task_id = t.id
    ) AS j
    """
_MARKS_PROBE = text(
    _PROBE_SQL.format(ids=":ids", finished=":finished", tasks=t.name, traces=tr.name)
).bindparams(bindparam("ids", type_=ARRAY(t.c.id.type)), bindparam("finished", _FINISHED))
#: The same statement in psycopg's placeholders (``event_marks_statement``).
MARKS_SQL = _PROBE_SQL.format(ids="%(ids)s", finished="%(finished)s", tasks=t.name, traces=tr.name)
_MARKS_IN = _marks(t.c.id.in_(bindparam("ids", expanding=True)))


def _unprefixed(m: Any) -> dict[str, Any]:
    return {c.name: m[f"tr_{c.name}"] for c in tr.c}
