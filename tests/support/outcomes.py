"""What became of accepted tasks, read from the store: lost, run twice, out of order."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from fleet.store import Store
from fleet.store import schema as s


@dataclass(frozen=True)
class Outcome:
    """Figures over the accepted tasks (``accepted``: stored, the submission answered)."""

    accepted: int
    #: Accepted tasks that did not succeed (or are not there).
    lost: int
    #: Accepted tasks whose reply was stored more than once (the work took effect twice).
    duplicated: int
    #: Accepted tasks that took more than one run (a retry; the first run's writes refused).
    retried: int
    #: Tasks that started before the task ahead of them in their conversation had finished.
    out_of_order: int
    #: The earliest finish of an accepted task (None: none finished).
    first_finish_after: datetime | None = None

    def line(self) -> str:
        return (
            f"accepted {self.accepted}, lost {self.lost}, duplicated {self.duplicated}, "
            f"retried {self.retried}, out of order {self.out_of_order}"
        )


def finished(store: Store, accepted: list[uuid.UUID]) -> int:
    """How many of ``accepted`` have finished (any status)."""
    with store.read() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(s.tasks)
                .where(s.tasks.c.id.in_(accepted), s.tasks.c.finished_at.is_not(None))
            ).scalar_one()
        )


def outcome(store: Store, accepted: list[uuid.UUID], after: datetime | None = None) -> Outcome:
    """The figures for ``accepted``; ``first_finish_after``: the first finish later than
    ``after`` (when given)."""
    with store.read() as conn:
        tasks = conn.execute(
            select(
                s.tasks.c.id,
                s.tasks.c.conversation_id,
                s.tasks.c.seq,
                s.tasks.c.status,
                s.tasks.c.started_at,
                s.tasks.c.finished_at,
            ).where(s.tasks.c.id.in_(accepted))
        ).all()
        runs = Counter(
            r.task_id
            for r in conn.execute(select(s.runs.c.task_id).where(s.runs.c.task_id.in_(accepted)))
        )
        replies = Counter(
            r.task_id
            for r in conn.execute(
                select(s.messages.c.task_id).where(
                    s.messages.c.task_id.in_(accepted), s.messages.c.role == "assistant"
                )
            )
        )
    succeeded = {t.id for t in tasks if t.status == "succeeded"}
    by_conversation = defaultdict(list)
    for t in tasks:
        by_conversation[t.conversation_id].append(t)
    out_of_order = 0
    for rows in by_conversation.values():
        rows.sort(key=lambda t: t.seq)
        for before, later in itertools.pairwise(rows):
            if later.started_at is not None and (
                before.finished_at is None or later.started_at < before.finished_at
            ):
                out_of_order += 1
    finishes = [t.finished_at for t in tasks if t.finished_at is not None]
    if after is not None:
        finishes = [f for f in finishes if _aware(f) > after]
    return Outcome(
        accepted=len(accepted),
        lost=len(set(accepted) - succeeded),
        duplicated=sum(1 for n in replies.values() if n > 1),
        retried=sum(1 for n in runs.values() if n > 1),
        out_of_order=out_of_order,
        first_finish_after=min(map(_aware, finishes), default=None),
    )


def _aware(at: datetime) -> datetime:
    from datetime import UTC

    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
