"""PostgreSQL's settle can claim the next task in its own statement: only when that is exactly
what a fresh read would have claimed, with the same context; otherwise it hands back the head."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from fleet.domain.context import Record
from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.store import Chain, Claim, Head, Prepared, Started, Store
from tests.integration.test_store import T0, ok, sub

LIMIT = 3  # history items per prompt: smaller than the history, so truncation is exercised
CAP = 4  # history rows a claim reads (CAP + 1): smaller than the history too


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url, Redactor(()))
    yield s
    s.dispose()


class Seen:
    """A ``prepare`` that records every claim it was given."""

    def __init__(self) -> None:
        self.claims: list[Claim] = []

    def __call__(self, claim: Claim) -> Prepared:
        self.claims.append(claim)
        history = [{"id": r.id, "role": r.role, "content": r.content} for r in claim.history]
        return Prepared({"messages": history, "more": claim.more_history}, "echo")


def items(_: str) -> int:
    return LIMIT


def stored(store: Store, conv: uuid.UUID) -> tuple[Record, ...]:
    """The conversation's messages newest first, as a fresh claim reads them."""
    with store.read() as conn:
        found = conn.execute(
            text(
                "SELECT id, role, content FROM messages WHERE conversation_id = :c ORDER BY id DESC"
            ),
            {"c": conv},
        ).all()
    return tuple(Record(r.id, r.role, r.content) for r in found)


def status(store: Store, task_id: uuid.UUID) -> tuple[str, int]:
    with store.read() as conn:
        row = conn.execute(
            text("SELECT status, fence FROM tasks WHERE id = :t"), {"t": task_id}
        ).one()
    return row.status, row.fence


def runs(store: Store, task_id: uuid.UUID) -> int:
    with store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM runs WHERE task_id = :t"), {"t": task_id}
            ).scalar_one()
        )


def first_claim(store: Store, conv: uuid.UUID, seen: Seen) -> Started:
    result = store.start_next(conv, "w", T0, history_items=items, prepare=seen, history_cap=CAP)
    assert isinstance(result, Started)
    return result


def settle(store: Store, started: Started, outcome: Outcome, seen: Seen) -> Head | Started | None:
    chain = Chain.of(started, "w", items, seen)  # None when nothing came after it at its claim
    _, nxt, _ = store.settle(
        started.task,
        started.run_id,
        outcome,
        T0,
        reserved=started.reserved,
        chain=chain,
        history_cap=CAP,
    )
    return nxt


def test_each_settle_claims_the_next_task_with_the_history_a_fresh_read_finds(
    pg_store: Store,
) -> None:
    tasks = [pg_store.admit(sub(f"m{i}"), T0).task for i in range(6)]
    conv = tasks[0].conversation_id
    seen = Seen()
    started = first_claim(pg_store, conv, seen)
    outcomes = [ok("r0"), ok("r1"), Outcome(TaskStatus.FAILED, None, "boom", {}), ok("r3")]
    outcomes += [ok("r4"), ok("r5")]
    for i, outcome in enumerate(outcomes):
        assert started.task.id == tasks[i].id
        nxt = settle(pg_store, started, outcome, seen)
        if i == len(tasks) - 1:
            assert nxt is None
            break
        assert isinstance(nxt, Started), f"task {i + 1} was not claimed by the settle"
        assert status(pg_store, tasks[i + 1].id) == ("running", 1)
        assert runs(pg_store, tasks[i + 1].id) == 1
        # The claim's history is what the store holds now, newest first, cut to the limit.
        fresh = stored(pg_store, conv)
        claim = seen.claims[-1]
        assert claim.task.id == tasks[i + 1].id
        assert claim.history == fresh[:LIMIT]
        assert claim.more_history == (len(fresh) > LIMIT)
        started = nxt
    # user and reply for each success, the user input alone for the failure, in seq order
    assert [r.content for r in reversed(stored(pg_store, conv))] == [
        "m0", "r0", "m1", "r1", "m2", "m3", "r3", "m4", "r4", "m5", "r5",
    ]  # fmt: skip
    assert [status(pg_store, t.id)[0] for t in tasks] == [
        "succeeded", "succeeded", "failed", "succeeded", "succeeded", "succeeded",
    ]  # fmt: skip


def test_a_cancel_that_wins_the_settle_leaves_the_next_task_to_a_fresh_claim(
    pg_store: Store,
) -> None:
    t1 = pg_store.admit(sub("first"), T0).task
    t2 = pg_store.admit(sub("second"), T0).task
    seen = Seen()
    started = first_claim(pg_store, t1.conversation_id, seen)
    assert pg_store.cancel(t1.id, T0).effect == "requested"
    nxt = settle(pg_store, started, ok("too late"), seen)
    # the worker built t2's context with t1's exchange in it; the store holds none: no claim
    assert isinstance(nxt, Head) and nxt.task_id == t2.id
    assert status(pg_store, t2.id) == ("queued", 0) and runs(pg_store, t2.id) == 0
    again = pg_store.start_next(
        t1.conversation_id, "w", T0, history_items=items, prepare=seen, preread=nxt
    )
    assert isinstance(again, Started) and again.task.id == t2.id
    assert seen.claims[-1].history == ()


def test_a_next_task_cancelled_or_merged_meanwhile_is_not_claimed_as_it_was_read(
    pg_store: Store,
) -> None:
    t1 = pg_store.admit(sub("first"), T0).task
    t2 = pg_store.admit(sub("second"), T0).task
    t3 = pg_store.admit(sub("third"), T0).task
    seen = Seen()
    started = first_claim(pg_store, t1.conversation_id, seen)
    pg_store.cancel(t2.id, T0)  # after t1's claim read t2 as its next task
    nxt = settle(pg_store, started, ok("one"), seen)
    assert isinstance(nxt, Head) and nxt.task_id == t3.id
    assert status(pg_store, t2.id) == ("cancelled", 0) and runs(pg_store, t2.id) == 0
    assert status(pg_store, t3.id) == ("queued", 0)

    # a merge into the next task after it was read (what collect writes) raises its submissions
    u1 = pg_store.admit(sub("a", key="u"), T0).task
    u2 = pg_store.admit(sub("b", key="u"), T0).task
    started = first_claim(pg_store, u1.conversation_id, seen)
    assert started.after is not None and started.after["id"] == str(u2.id)
    with pg_store.tx() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET submissions = submissions + 1, "
                'input = input || \'[{"type": "text", "text": "c"}]\'::jsonb '
                "WHERE id = :t"
            ),
            {"t": u2.id},
        )
    nxt = settle(pg_store, started, ok("A"), seen)
    assert isinstance(nxt, Head) and nxt.task_id == u2.id
    assert status(pg_store, u2.id) == ("queued", 0) and runs(pg_store, u2.id) == 0
    again = pg_store.start_next(
        u1.conversation_id, "w", T0, history_items=items, prepare=seen, preread=nxt
    )
    assert isinstance(again, Started) and [p.text for p in again.task.input] == ["b", "c"]


def test_a_run_ended_by_its_cancel_stores_nothing_and_claims_nothing(pg_store: Store) -> None:
    t1 = pg_store.admit(sub("first"), T0).task
    t2 = pg_store.admit(sub("second"), T0).task
    seen = Seen()
    started = first_claim(pg_store, t1.conversation_id, seen)
    assert pg_store.cancel(t1.id, T0).effect == "requested"
    # the runner saw the request at a step boundary and stopped
    nxt = settle(pg_store, started, Outcome(TaskStatus.CANCELLED, None, "cancelled", {}), seen)
    assert isinstance(nxt, Head) and nxt.task_id == t2.id
    assert status(pg_store, t1.id)[0] == "cancelled" and stored(pg_store, t1.conversation_id) == ()
    assert status(pg_store, t2.id) == ("queued", 0)
    again = pg_store.start_next(
        t1.conversation_id, "w", T0, history_items=items, prepare=seen, preread=nxt
    )
    assert isinstance(again, Started) and seen.claims[-1].history == ()
