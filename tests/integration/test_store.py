"""Store contract tests: every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from fleet.domain import ids
from fleet.domain.admission import QueuePolicy, Submission
from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus, TextPart
from fleet.errors import Conflict, LeaseLost, NotFound
from fleet.store import Claim, Head, Prepared, Started, Store, TaskFilter
from fleet.store import schema as s
from tests.conftest import POOLER

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def sub(
    text_: str = "hi",
    *,
    key: str = "k1",
    mode: str = "followup",
    debounce: float = 2.0,
    idem: str | None = None,
    deployment: str = "chat",
    scope: str = "api",
    max_attempts: int = 3,
) -> Submission:
    return Submission(
        deployment=deployment,
        scope=scope,
        key=key,
        input=(TextPart(text=text_),),
        input_bytes=len(text_.encode()),
        labels={"team": "a"},
        idempotency_key=idem,
        policy=QueuePolicy(mode, debounce),  # type: ignore[arg-type]
        max_attempts=max_attempts,
        max_input_bytes=1000,
    )


def items(_: str) -> int:
    return 10


def prepare(claim: Claim) -> Prepared:
    return Prepared(
        claim.frozen_context or {"messages": [{"role": "user", "content": "x"}]}, "echo"
    )


def start(store: Store, conv: uuid.UUID, now: datetime, worker: str = "w") -> Started | None:
    """Claim the head and open its run; None when nothing is claimable."""
    result = store.start_next(conv, worker, now, history_items=items, prepare=prepare)
    return result if isinstance(result, Started) else None


def ok(reply: str) -> Outcome:
    return Outcome(TaskStatus.SUCCEEDED, reply, None, {"total_tokens": 3})


def run_to_end(store: Store, conv: uuid.UUID, now: datetime, reply: str = "r") -> uuid.UUID:
    started = start(store, conv, now)
    assert started is not None
    store.settle(started.task, started.run_id, ok(reply), now)
    return started.task.id


@pytest.mark.core
def test_followup_assigns_seq_per_conversation(store: Store) -> None:
    a1 = store.admit(sub(key="a"), T0).task
    a2 = store.admit(sub(key="a"), T0).task
    b1 = store.admit(sub(key="b"), T0).task
    assert (a1.seq, a2.seq, b1.seq) == (1, 2, 1)
    assert a1.conversation_id == a2.conversation_id != b1.conversation_id
    assert a1.conversation == "api:a"
    assert a1.status == TaskStatus.QUEUED and a1.not_before == T0


def test_same_key_in_other_scope_or_deployment_is_another_conversation(store: Store) -> None:
    api = store.admit(sub(key="x"), T0).task
    hook = store.admit(sub(key="x", scope="webhook:gh"), T0).task
    other = store.admit(sub(key="x", deployment="other"), T0).task
    assert len({api.conversation_id, hook.conversation_id, other.conversation_id}) == 3


@pytest.mark.core
def test_idempotency_returns_the_original_and_creates_nothing(store: Store) -> None:
    first = store.admit(sub("one", idem="req-1"), T0)
    again = store.admit(sub("two", idem="req-1"), T0 + timedelta(seconds=1))
    assert again.duplicate and not first.duplicate
    assert again.task.id == first.task.id
    assert [p.text for p in again.task.input] == ["one"]  # type: ignore[union-attr]
    assert len(store.list_tasks(TaskFilter())) == 1
    # another scope may use the same key for its own task
    assert not store.admit(sub(idem="req-1", scope="a2a:bob"), T0).duplicate


def test_idempotency_key_reused_for_another_deployment_conflicts(store: Store) -> None:
    store.admit(sub(idem="req-1"), T0)
    with pytest.raises(Conflict, match="already used for a submission to another deployment"):
        store.admit(sub(idem="req-1", deployment="other"), T0)


def test_collect_merges_while_queued_then_starts_a_new_task(store: Store) -> None:
    first = store.admit(sub("a", mode="collect"), T0)
    second = store.admit(sub("b", mode="collect", idem="k-b"), T0 + timedelta(seconds=1))
    assert second.merged and second.task.id == first.task.id
    assert [p.text for p in second.task.input] == ["a", "b"]  # type: ignore[union-attr]
    assert second.task.submissions == 2
    assert second.task.not_before == T0 + timedelta(seconds=3)
    # the merged submission's own idempotency key answers with the task it merged into
    repeat = store.admit(sub("b", mode="collect", idem="k-b"), T0 + timedelta(seconds=1))
    assert repeat.duplicate and repeat.task.id == first.task.id
    # once leased, the next submission makes a new task
    assert start(store, first.task.conversation_id, T0 + timedelta(seconds=3)) is not None
    third = store.admit(sub("c", mode="collect"), T0 + timedelta(seconds=4))
    assert not third.merged and third.task.seq == 2


@pytest.mark.core
def test_claim_takes_only_the_due_head(store: Store) -> None:
    t1 = store.admit(sub("a", mode="collect", debounce=5), T0).task
    conv = t1.conversation_id
    blocked = store.start_next(
        conv, "w", T0, history_items=items, prepare=prepare
    )  # not due yet: the head says when
    assert isinstance(blocked, Head) and blocked.not_before == T0 + timedelta(seconds=5)
    started = start(store, conv, T0 + timedelta(seconds=5))
    assert started is not None and started.task.id == t1.id
    assert started.task.status == TaskStatus.RUNNING and started.task.fence == 1
    assert [r.status for r in store.runs_of(t1.id)] == ["running"]
    store.admit(sub("b"), T0)
    busy = store.start_next(
        conv, "w", T0 + timedelta(seconds=6), history_items=items, prepare=prepare
    )
    assert isinstance(busy, Head) and busy.task_id == t1.id and not busy.claimable


@pytest.mark.core
def test_a_future_head_blocks_the_tasks_behind_it(store: Store) -> None:
    t1 = store.admit(sub("a", mode="collect", debounce=60), T0).task
    store.admit(sub("b", mode="followup"), T0)
    assert start(store, t1.conversation_id, T0 + timedelta(seconds=1)) is None
    head = store.head(t1.conversation_id)
    assert head is not None and head.not_before == T0 + timedelta(seconds=60)


@pytest.mark.core
def test_store_refuses_two_active_tasks_in_one_conversation(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    t2 = store.admit(sub("b"), T0).task
    assert start(store, t1.conversation_id, T0) is not None
    with pytest.raises(IntegrityError), store.tx() as conn:
        conn.execute(s.tasks.update().where(s.tasks.c.id == t2.id).values(status="running"))


def test_settle_appends_history_the_next_claim_sees(store: Store) -> None:
    t1 = store.admit(sub("first"), T0).task
    store.admit(sub("second"), T0)
    run_to_end(store, t1.conversation_id, T0, reply="answer one")
    seen: list[Claim] = []

    def keep(claim: Claim) -> Prepared:
        seen.append(claim)
        return prepare(claim)

    started = store.start_next(t1.conversation_id, "w", T0, history_items=items, prepare=keep)
    assert isinstance(started, Started) and started.task.seq == 2
    assert [(r.role, r.content) for r in seen[0].history] == [
        ("assistant", "answer one"),
        ("user", "first"),
    ]
    done = store.get_task(t1.id)
    assert done.status == TaskStatus.SUCCEEDED and done.reply == "answer one"
    assert [m.content for m in store.messages(t1.conversation_id)] == ["first", "answer one"]


@pytest.mark.core
def test_stale_fence_cannot_write_after_recovery_and_reclaim(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    conv = t1.conversation_id
    old = start(store, conv, T0, worker="w1")
    assert old is not None
    assert store.recover(t1.id, old.task.fence, "worker lost", T0) == TaskStatus.INTERRUPTED
    new = start(store, conv, T0, worker="w2")
    assert new is not None and new.task.fence == old.task.fence + 1
    # the retry reuses the first run's frozen context
    assert new.context == old.context == {"messages": [{"role": "user", "content": "x"}]}
    trace = TraceRow(1, "model", "echo", None, None, None, {}, T0, 1.0)
    with pytest.raises(LeaseLost):
        store.checkpoint(old.task, old.run_id, [trace], T0)
    with pytest.raises(LeaseLost):
        store.settle(old.task, old.run_id, ok("stale"), T0)
    store.settle(new.task, new.run_id, ok("fresh"), T0)
    assert store.get_task(t1.id).reply == "fresh"
    runs = store.runs_of(t1.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    assert [m.content for m in store.messages(conv)] == ["a", "fresh"]


def test_recovery_fails_the_task_after_its_last_attempt(store: Store) -> None:
    t1 = store.admit(sub("a", max_attempts=1), T0).task
    store.admit(sub("b"), T0)
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    assert store.recover(t1.id, started.task.fence, "worker lost", T0) == TaskStatus.FAILED
    assert store.get_task(t1.id).error == "worker lost"
    assert store.runs_of(t1.id)[0].status == "interrupted"
    nxt = start(store, t1.conversation_id, T0)
    assert nxt is not None and nxt.task.seq == 2  # the conversation moves on


def test_recover_ignores_a_task_that_moved_on(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    assert store.recover(t1.id, started.task.fence - 1, "stale sweep", T0) is None
    assert store.get_task(t1.id).status == TaskStatus.RUNNING


def test_cancel_queued_at_once_and_running_at_settle(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    t2 = store.admit(sub("b"), T0).task
    assert store.cancel(t2.id, T0).effect == "cancelled"
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    assert store.cancel(t1.id, T0).effect == "requested"
    assert store.checkpoint(started.task, started.run_id, [], T0).cancel is True
    final, nxt, _ = store.settle(started.task, started.run_id, ok("late"), T0)
    assert final == TaskStatus.CANCELLED and nxt is None
    done = store.get_task(t1.id)
    assert done.status == TaskStatus.CANCELLED and done.reply is None
    assert store.runs_of(t1.id)[0].status == "cancelled"
    assert store.messages(t1.conversation_id) == []
    assert store.cancel(t1.id, T0).effect == "finished"


@pytest.mark.core
def test_scope_hides_tasks_of_other_scopes(store: Store) -> None:
    t1 = store.admit(sub("a", scope="webhook:gh"), T0).task
    assert store.get_task(t1.id, scope="webhook:gh").id == t1.id
    with pytest.raises(NotFound):
        store.get_task(t1.id, scope="api")


def test_secrets_are_redacted_before_they_are_stored(store: Store) -> None:
    secret = "sk-test-secret-value-1234567890"
    t1 = store.admit(sub(f"my key is {secret} and password=hunter2"), T0).task
    with store.read() as conn:
        raw = conn.execute(select(s.tasks.c.input).where(s.tasks.c.id == t1.id)).scalar_one()
    assert secret not in str(raw) and "hunter2" not in str(raw)
    assert "[REDACTED]" in str(raw)


def test_due_conversations_skip_busy_and_future_ones(store: Store) -> None:
    idle = store.admit(sub("a", key="idle"), T0).task
    busy = store.admit(sub("a", key="busy"), T0).task
    store.admit(sub("b", key="busy"), T0)
    store.admit(sub("later", key="later", mode="collect", debounce=60), T0)
    assert start(store, busy.conversation_id, T0) is not None
    # each with whose turn it is: its tenant and its work's highest priority
    assert store.due_conversations(T0 + timedelta(seconds=1), 100) == [
        (idle.conversation_id, "default", 5)
    ]
    assert [a[0] for a in store.active()] == [busy.id]


def test_database_clock_independent_timestamps_round_trip(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    again = store.get_task(t1.id)
    assert again.created_at == T0 and again.created_at.tzinfo is not None
    with store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM conversations")).scalar_one() == 1


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    """PostgreSQL only: it reads the head before claiming it (SQLite claims in one transaction,
    so it has no window to race)."""
    s = Store.open(pg_url, Redactor(()), pooler=POOLER)
    yield s
    s.dispose()


@pytest.mark.core
def test_a_merge_between_reading_and_claiming_the_head_is_not_lost(pg_store: Store) -> None:
    """PostgreSQL reads the head, builds the context, then claims it only if nothing changed."""
    store = pg_store
    t1 = store.admit(sub("a", mode="collect", debounce=0), T0).task
    contexts: list[list[str]] = []

    def racing_prepare(claim: Claim) -> Prepared:
        contexts.append([p.text for p in claim.task.input])  # type: ignore[union-attr]
        if len(contexts) == 1:  # a submission merges in between the read and the claim
            assert store.admit(sub("b", mode="collect", debounce=0), T0).merged
        return prepare(claim)

    started = store.start_next(
        t1.conversation_id, "w", T0, history_items=items, prepare=racing_prepare
    )
    assert isinstance(started, Started) and started.task.id == t1.id
    assert contexts == [["a"], ["a", "b"]]  # the stale read was not claimed; the merged one was
    assert started.task.submissions == 2 and started.task.fence == 1
    assert [r.attempt for r in store.runs_of(t1.id)] == [1]


def test_a_cancel_between_reading_and_claiming_the_head_wins(pg_store: Store) -> None:
    store = pg_store
    t1 = store.admit(sub("a"), T0).task

    def cancelling_prepare(claim: Claim) -> Prepared:
        assert store.cancel(claim.task.id, T0).effect == "cancelled"
        return prepare(claim)

    result = store.start_next(
        t1.conversation_id, "w", T0, history_items=items, prepare=cancelling_prepare
    )
    assert result is None
    assert store.get_task(t1.id).status == TaskStatus.CANCELLED
    assert store.runs_of(t1.id) == []


def test_singleton_idempotency_keys_belong_to_the_callers_scope(store: Store) -> None:
    def single(scope: str) -> Submission:
        base = sub("x", key="singleton", scope="deployment", idem="42", deployment="solo")
        return Submission(
            **{**{f: getattr(base, f) for f in base.__dataclass_fields__}, "caller_scope": scope}
        )

    api = store.admit(single("api"), T0)
    hook = store.admit(single("webhook:gh"), T0)
    assert not hook.duplicate and hook.task.id != api.task.id
    assert store.admit(single("api"), T0).task.id == api.task.id


def test_the_next_claim_can_start_from_the_head_the_settle_returned(store: Store) -> None:
    t1 = store.admit(sub("first"), T0).task
    t2 = store.admit(sub("second"), T0).task
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    _, head, _ = store.settle(started.task, started.run_id, ok("answer one"), T0)
    assert head is not None and head.task_id == t2.id and head.claimable
    seen: list[Claim] = []

    def keep(claim: Claim) -> Prepared:
        seen.append(claim)
        return prepare(claim)

    nxt = store.start_next(
        t1.conversation_id, "w", T0, history_items=items, prepare=keep, preread=head
    )
    assert isinstance(nxt, Started) and nxt.task.id == t2.id and nxt.task.fence == 1
    # the exchange the settle just stored is in the history the claim built its context from
    assert [(r.role, r.content) for r in seen[0].history] == [
        ("assistant", "answer one"),
        ("user", "first"),
    ]
    # a head read before a change is not claimed as it was: the claim reads again
    t3 = store.admit(sub("third", mode="followup"), T0).task
    _, head, _ = store.settle(nxt.task, nxt.run_id, ok("answer two"), T0)
    assert head is not None and head.task_id == t3.id
    store.cancel(t3.id, T0)
    assert (
        store.start_next(
            t1.conversation_id, "w", T0, history_items=items, prepare=keep, preread=head
        )
        is None
    )


@pytest.mark.core
def test_a_fencing_number_handed_out_twice_still_fences_the_first_holder_out(
    store: Store,
) -> None:
    """A claim lost in a database crash (its commit was asynchronous) leaves the task as it was,
    so the next claim gets the same fencing number; the lost claim's run is gone with it."""
    task = store.admit(sub("x"), T0).task
    lost = start(store, task.conversation_id, T0)
    assert lost is not None
    with store.tx() as conn:  # what the crash leaves: no run, the task queued at fence 0
        conn.execute(s.runs.delete().where(s.runs.c.id == lost.run_id))
        conn.execute(
            s.tasks.update()
            .where(s.tasks.c.id == task.id)
            .values(status="queued", fence=0, attempts=0, leased_at=None, started_at=None)
        )
    again = start(store, task.conversation_id, T0, worker="w2")
    assert again is not None and again.task.fence == lost.task.fence
    with pytest.raises(LeaseLost):
        store.checkpoint(lost.task, lost.run_id, [], T0)
    with pytest.raises(LeaseLost):
        store.settle(lost.task, lost.run_id, ok("stale"), T0)
    assert not store.checkpoint(again.task, again.run_id, [], T0).cancel
    final = store.settle(again.task, again.run_id, ok("fresh"), T0).status
    assert final == TaskStatus.SUCCEEDED
    assert store.get_task(task.id).result == {"reply": "fresh"}


def test_task_listing_filters_and_counts_in_the_store(store: Store) -> None:
    at = [T0 + timedelta(seconds=i) for i in range(5)]
    tasks = [store.admit(sub(f"m{i}", key=f"k{i}"), at[i]).task for i in range(5)]
    store.cancel(tasks[0].id, T0 + timedelta(minutes=1))  # the oldest, changed last
    store.cancel(tasks[3].id, T0 + timedelta(seconds=3))
    cancelled = TaskFilter(statuses=frozenset({TaskStatus.CANCELLED}), limit=1)
    assert [t.id for t in store.list_tasks(cancelled)] == [tasks[3].id]  # newest first
    assert store.count_tasks(cancelled) == 2
    late = TaskFilter(changed_after=T0 + timedelta(seconds=30))
    assert [t.id for t in store.list_tasks(late)] == [tasks[0].id]
    assert store.count_tasks(TaskFilter(statuses=frozenset({TaskStatus.QUEUED}))) == 3


def test_a_collect_merge_redacts_and_bounds_the_labels_it_adds(store: Store) -> None:
    secret = "sk-test-secret-value-1234567890"  # the store fixture's redactor knows it

    def labelled(text_: str, labels: dict[str, str]) -> Submission:
        base = sub(text_, key="lab", mode="collect")
        return Submission(
            **{**{f: getattr(base, f) for f in base.__dataclass_fields__}, "labels": labels}
        )

    first = store.admit(labelled("a", {"a": "1"}), T0)
    merged = store.admit(labelled("b", {"token": secret}), T0)
    assert merged.merged and merged.task.id == first.task.id
    assert secret not in str(store.get_task(first.task.id).labels)
    # 31 more keys would make 33 labels: a new task takes them instead
    many = {f"k{i}": "v" for i in range(31)}
    apart = store.admit(labelled("c", many), T0)
    assert not apart.merged and apart.task.id != first.task.id
    assert len(store.get_task(first.task.id).labels) == 2


def _step(step: int, kind: str, **kw: object) -> TraceRow:
    fields: dict[str, object] = {
        "input": None,
        "output": None,
        "error": None,
        "usage": {},
        "started_at": T0,
        "duration_ms": 1.0,
        **kw,
    }
    return TraceRow(step=step, kind=kind, name=str(kw.pop("name", kind)), **fields)  # type: ignore[arg-type]


def test_the_step_journal_is_fenced_upserted_and_read_back_for_a_retry(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    conv = t1.conversation_id
    first = start(store, conv, T0, worker="w1")
    assert first is not None
    calls = {"content": "", "tool_calls": [{"id": "c1", "name": "refund", "arguments": {}}]}
    model = _step(1, "model", output=calls)
    marker = _step(2, "tool", status="started", call_id="c1")
    assert store.checkpoint(first.task, first.run_id, [model, marker], T0).cancel is False
    assert [(j.step, j.status) for j in store.journal(t1.id)] == [(1, "finished"), (2, "started")]
    # the finished call replaces its marker (same run, same step)
    done = _step(2, "tool", output="refunded sk-test-secret-value-1234567890", call_id="c1")
    store.checkpoint(first.task, first.run_id, [done], T0)
    journal = store.journal(t1.id)
    assert [(j.step, j.kind, j.status, j.call_id) for j in journal] == [
        (1, "model", "finished", None),
        (2, "tool", "finished", "c1"),
    ]
    assert journal[0].output == calls
    assert journal[1].output == "refunded [REDACTED]"  # redacted before it was stored

    # the worker is lost; the retry's run journals what it replayed, then goes on
    store.recover(t1.id, first.task.fence, "worker lost", T0)
    second = start(store, conv, T0, worker="w2")
    assert second is not None
    with pytest.raises(LeaseLost):
        store.checkpoint(first.task, first.run_id, [_step(3, "model")], T0)
    assert store.journal(t1.id) == journal  # the new run has stored nothing yet
    replayed = [
        TraceRow(**{**{f: getattr(j, f) for f in j.__slots__}, "replayed": True})  # type: ignore[arg-type]
        for j in journal
    ]
    store.checkpoint(second.task, second.run_id, replayed, T0)
    outcome = Outcome(
        TaskStatus.SUCCEEDED,
        "ok",
        None,
        {"total_tokens": 1},
        traces=[_step(3, "model", output={"content": "ok"})],
        details={"replayed": [1, 2]},
    )
    store.settle(second.task, second.run_id, outcome, T0)
    assert [(j.step, j.replayed) for j in store.journal(t1.id)] == [
        (1, True),
        (2, True),
        (3, False),
    ]
    runs = store.runs_of(t1.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    with store.read() as conn:
        found = conn.execute(
            select(s.runs.c.worker, s.runs.c.details).order_by(s.runs.c.attempt)
        ).all()
    assert [(w, d) for w, d in found] == [("w1", {}), ("w2", {"replayed": [1, 2]})]


def test_a_settle_completes_a_tool_call_journaled_as_started(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    store.checkpoint(started.task, started.run_id, [_step(1, "tool", status="started")], T0)
    failed = Outcome(
        TaskStatus.CANCELLED,
        None,
        "cancelled by request",
        {},
        traces=[_step(1, "tool", output="stopped", error="stopped")],
    )
    store.settle(started.task, started.run_id, failed, T0)
    (row,) = store.journal(t1.id)
    assert (row.status, row.output) == ("finished", "stopped")


def test_cancel_requested_is_visible_to_a_running_task(store: Store) -> None:
    t1 = store.admit(sub("a"), T0).task
    started = start(store, t1.conversation_id, T0)
    assert started is not None
    assert store.cancel_requested(t1.id) is False
    assert store.cancel(t1.id, T0).effect == "requested"
    assert store.cancel_requested(t1.id) is True


def _renamed(store: Store, task_id: uuid.UUID, new: str) -> uuid.UUID:
    """Give a queued task a chosen id, to build prefixes that collide."""
    with store.tx() as conn:
        conn.execute(s.tasks.update().where(s.tasks.c.id == task_id).values(id=uuid.UUID(new)))
    return uuid.UUID(new)


def test_tasks_found_by_id_prefix(store: Store) -> None:
    a = _renamed(
        store, store.admit(sub("a", key="a"), T0).task.id, "67bdb609-1111-4000-8000-0000000000a1"
    )
    b = _renamed(
        store, store.admit(sub("b", key="b"), T0).task.id, "67bdb609-2222-4000-8000-0000000000b2"
    )
    c = _renamed(
        store, store.admit(sub("c", key="c"), T0).task.id, "67bdb6aa-0000-4000-8000-0000000000c3"
    )
    hook = store.admit(sub("d", key="d", scope="webhook:gh"), T0).task.id
    d = _renamed(store, hook, "67bdb609-3333-4000-8000-0000000000d4")
    _renamed(
        store, store.admit(sub("e", key="e"), T0).task.id, "67bdb5ff-ffff-4fff-bfff-ffffffffffff"
    )
    _renamed(
        store, store.admit(sub("f", key="f"), T0).task.id, "67bdb700-0000-4000-8000-000000000000"
    )

    def found(typed: str, scope: str | None = "api") -> set[uuid.UUID]:
        flt = TaskFilter(id_prefix=ids.hex_prefix(typed), scope=scope, limit=100)
        return {t.id for t in store.list_tasks(flt)}

    assert found("67bdb6") == {a, b, c}  # neither neighbour just outside the range
    assert found("67BDB609") == {a, b}
    assert found("67bdb609-2") == {b}  # a dash where the UUID has one
    assert found("67bdb6091111") == {a}
    assert found(str(a)) == {a}
    assert found("67bdb6aa") == {c}
    assert found("67bdb608") == set()
    assert found("67bdb609-3") == set()  # another scope's task never matches
    assert found("67bdb609-3", scope="webhook:gh") == {d}
    assert found("67bdb609", scope=None) == {a, b, d}
