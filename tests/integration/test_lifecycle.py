"""Conversation lifecycle through the one store port, on SQLite and PostgreSQL: show creates
nothing, reset starts a new generation, delete leaves a tombstone, prune honours retention and
the stored cap. Runs in-process (the embedded lease); the fleet tests use real workers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from fleet import views
from fleet.api.app import create_app
from fleet.config import Settings
from fleet.domain import lifecycle as rules
from fleet.domain.delivery import Target
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict, NotFound
from fleet.runtime import Runtime, build
from fleet.store import Started
from fleet.store import schema as s
from tests.conftest import write_config

AGENTS = {
    "echo": 'model = "echo"\nnotes = true\n',
    "capped": 'model = "echo"\nstored_messages = 6\nretention = "2d"\n',
}
DEPLOYMENTS = {"chat": 'agent = "echo"\n', "capped": 'agent = "capped"\n'}


@pytest.fixture
def rt(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    yield runtime
    runtime.close()


def run(rt: Runtime, text: str, key: str = "k", dep: str = "chat", **kw: object):
    adm = rt.dispatcher.submit(dep, text, key=key, **kw)  # type: ignore[arg-type]
    rt.dispatcher.drain(adm.task.conversation_id)
    return adm, rt.store.get_task(adm.task.id)


def conversations(rt: Runtime) -> int:
    with rt.store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(s.conversations)).scalar_one())


def test_show_of_an_unknown_key_creates_nothing(rt: Runtime) -> None:
    with pytest.raises(NotFound, match="no conversation 'api:nope'"):
        rt.dispatcher.lifecycle.show("chat", "api:nope")
    assert conversations(rt) == 0
    run(rt, "hello")
    info = rt.dispatcher.lifecycle.show("chat", "k")  # a bare key is an api one
    assert (info.conversation, info.generation, info.messages, info.tasks) == ("api:k", 0, 2, 1)
    assert info.active is None


def test_reset_starts_a_new_generation_and_keeps_idempotency(rt: Runtime) -> None:
    first, done = run(rt, "one", idempotency_key="idem-1")
    run(rt, "two")
    assert rt.store.get_task(done.id).reply == "echo: one [history: 0]"
    conv = first.task.conversation_id
    rt.store.set_note(conv, "pref", "likes tea", datetime.now(UTC))
    queued = rt.dispatcher.submit("chat", "left over", key="k").task  # not drained
    info, reset = rt.dispatcher.lifecycle.reset("chat", "api:k")
    assert (info.generation, reset.generation) == (0, 1)
    assert reset.cancelled == (queued.id,)
    assert reset.notes_removed == 1
    left = rt.store.get_task(queued.id)
    assert left.status == TaskStatus.CANCELLED and left.error == rules.RESET_REASON
    assert rt.store.list_notes(conv, datetime.now(UTC)) == []
    # the idempotency key seen before the reset still answers duplicate
    again = rt.dispatcher.submit("chat", "one", key="k", idempotency_key="idem-1")
    assert again.duplicate and again.task.id == first.task.id
    _, fresh = run(rt, "three")
    assert fresh.reply == "echo: three [history: 0]"
    (r,) = rt.store.runs_of(fresh.id)
    assert r.context["injected"] == []
    assert [m.content for m in rt.store.messages(conv)] == ["three", fresh.reply]
    assert rt.dispatcher.lifecycle.show("chat", "k").stored == 6  # older ones until retention


def test_reset_keeps_notes_when_asked(rt: Runtime) -> None:
    adm, _ = run(rt, "one")
    rt.store.set_note(adm.task.conversation_id, "pref", "likes tea", datetime.now(UTC))
    _, reset = rt.dispatcher.lifecycle.reset("chat", "k", keep_notes=True)
    assert reset.notes_removed == 0
    assert [x.key for x in rt.store.list_notes(adm.task.conversation_id, datetime.now(UTC))] == [
        "pref"
    ]


def test_reset_and_delete_are_refused_while_a_run_is_active(rt: Runtime) -> None:
    adm = rt.dispatcher.submit("chat", "busy", key="k")
    started = rt.store.start_next(
        adm.task.conversation_id,
        "w",
        datetime.now(UTC),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    assert started is not None
    for act in (
        lambda: rt.dispatcher.lifecycle.reset("chat", "k"),
        lambda: rt.dispatcher.lifecycle.delete("chat", "k", by="test"),
    ):
        with pytest.raises(Conflict, match="--cancel-running"):
            act()
    info = rt.dispatcher.lifecycle.show("chat", "k")
    assert info.generation == 0 and info.active == adm.task.id


def handed_back(rt: Runtime, text: str = "busy") -> uuid.UUID:
    """A task whose run started and was handed back at worker shutdown (``interrupted``)."""
    adm = rt.dispatcher.submit("chat", text, key="k")
    started = rt.store.start_next(
        adm.task.conversation_id,
        "w",
        datetime.now(UTC),
        history_items=lambda _: 10,
        prepare=rt.dispatcher._prepare,
    )
    assert isinstance(started, Started)
    status = rt.store.hand_back(started.task.id, started.task.fence, "shutdown", datetime.now(UTC))
    assert status == TaskStatus.INTERRUPTED
    return adm.task.id


def test_reset_and_delete_are_refused_while_a_task_waits_to_resume(rt: Runtime) -> None:
    task_id = handed_back(rt)
    info = rt.dispatcher.lifecycle.show("chat", "k")
    assert (info.active, info.active_status) == (task_id, TaskStatus.INTERRUPTED)
    for act in (
        lambda: rt.dispatcher.lifecycle.reset("chat", "k"),
        lambda: rt.dispatcher.lifecycle.delete("chat", "k", by="test"),
    ):
        with pytest.raises(Conflict, match=r"handed back mid-run.*--cancel-running"):
            act()
    for act in (  # the store refuses too (a reset racing the show)
        lambda: rt.store.reset_conversation(info.id, datetime.now(UTC)),
        lambda: rt.store.delete_conversation(info.id, datetime.now(UTC), by="test"),
    ):
        with pytest.raises(Conflict, match="run under way"):
            act()
    assert rt.store.get_task(task_id).status == TaskStatus.INTERRUPTED
    assert rt.dispatcher.lifecycle.show("chat", "k").generation == 0


def test_cancel_running_cancels_a_task_waiting_to_resume(rt: Runtime) -> None:
    task_id = handed_back(rt)
    _, reset = rt.dispatcher.lifecycle.reset("chat", "k", cancel_running=True, wait_s=5)
    assert reset.generation == 1
    assert rt.store.get_task(task_id).status == TaskStatus.CANCELLED
    handed_back(rt, "again")
    stone = rt.dispatcher.lifecycle.delete("chat", "k", by="ops", cancel_running=True, wait_s=5)
    assert stone.tasks == 2 and conversations(rt) == 0


def test_delete_leaves_a_tombstone_and_the_key_starts_fresh(rt: Runtime) -> None:
    first, _ = run(rt, "one", idempotency_key="idem-1")
    run(rt, "two")
    stone = rt.dispatcher.lifecycle.delete("chat", "k", by="ops")
    assert (stone.tasks, stone.messages, stone.deleted_by) == (2, 4, "ops")
    assert conversations(rt) == 0
    with pytest.raises(NotFound):
        rt.store.get_task(first.task.id)
    adm, done = run(rt, "again", idempotency_key="idem-1")
    assert not adm.duplicate
    assert adm.fresh_after_delete == stone.deleted_at
    assert done.reply == "echo: again [history: 0]"
    later, _ = run(rt, "and again")
    assert later.fresh_after_delete is None  # only the first task says so


def test_submit_over_http_says_a_deleted_key_starts_fresh(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SubmitTask's intake gives the notice too; on PostgreSQL that is the event loop's one
    admission statement, not ``Dispatcher.submit`` (which this test makes fail there)."""
    run(rt, "one")
    stone = rt.dispatcher.lifecycle.delete("chat", "k", by="ops")
    if rt.store.one_statement_path:

        def on_a_thread(*args: object, **kw: object) -> None:
            raise AssertionError("the event-loop intake fell back to Dispatcher.submit")

        monkeypatch.setattr(rt.dispatcher, "submit", on_a_thread)
    body = {"deployment": "chat", "input": "again", "conversationKey": "k"}
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as c:
        first = c.post("/v1/tasks", json=body)
        assert first.status_code == 202, first.text
        later = c.post("/v1/tasks", json={**body, "input": "and again"})
        assert later.status_code == 202, later.text
    fresh = first.json()
    assert fresh["freshAfterDelete"] == views.iso(stone.deleted_at)
    assert "starts it fresh" in fresh["notice"]
    assert "freshAfterDelete" not in later.json()  # only the first task says so
    assert rt.store.get_task(uuid.UUID(fresh["id"])).seq == 1
    assert rt.dispatcher.lifecycle.show("chat", "k").generation == 0
    assert rt.store.get_task(uuid.UUID(later.json()["id"])).seq == 2


def test_prune_honours_retention_and_dry_run_counts(rt: Runtime) -> None:
    for i in range(3):
        run(rt, f"m{i}", dep="capped")
    lc = rt.dispatcher.lifecycle
    assert lc.prune(dry_run=True).total == 0
    real = rt.dispatcher.clock
    rt.dispatcher.clock = lambda: real() + timedelta(days=3)  # past capped's 2 days
    try:
        dry = lc.prune(dry_run=True)
        assert dry.retention == {"chat": 0, "capped": 6}
        assert lc.show("capped", "k").stored == 6  # a dry run deletes nothing
        assert lc.prune(older_than_s=4 * 86400).total == 0
        done = lc.prune()
    finally:
        rt.dispatcher.clock = real
    assert done.retention["capped"] == 6
    assert lc.show("capped", "k").stored == 0


def test_the_stored_cap_keeps_the_newest_and_runs_stay_in_order(rt: Runtime) -> None:
    for i in range(5):
        run(rt, f"m{i}", dep="capped")  # 10 messages, cap 6
    lc = rt.dispatcher.lifecycle
    assert lc.prune(dry_run=True).stored_cap == {"chat": 0, "capped": 4}
    assert rt.dispatcher.sweep().pruned == 4  # the sweeper enforces it too
    info = lc.show("capped", "k")
    kept = [m.content for m in rt.store.messages(info.id)]
    assert kept[0::2] == ["m2", "m3", "m4"]
    _, done = run(rt, "m5", dep="capped")
    assert done.reply == "echo: m5 [history: 6]"
    assert [m.content for m in rt.store.messages(info.id)][-2:] == ["m5", done.reply]


def test_a_prune_counts_what_it_deleted_in_the_metrics(rt: Runtime) -> None:
    from prometheus_client import REGISTRY

    def pruned(reason: str) -> float:
        value = REGISTRY.get_sample_value(
            "fleet_messages_pruned_total", {"deployment": "capped", "reason": reason}
        )
        return value or 0.0

    for i in range(5):
        run(rt, f"m{i}", dep="capped")  # 10 messages, cap 6
    lc = rt.dispatcher.lifecycle
    cap, age = pruned("stored_cap"), pruned("retention")
    lc.prune(dry_run=True)
    assert (pruned("stored_cap"), pruned("retention")) == (cap, age)  # a dry run counts nothing
    assert lc.prune().stored_cap["capped"] == 4
    assert pruned("stored_cap") == cap + 4
    real = rt.dispatcher.clock
    rt.dispatcher.clock = lambda: real() + timedelta(days=3)  # past capped's 2 days
    try:
        assert lc.prune().retention["capped"] == 6
    finally:
        rt.dispatcher.clock = real
    assert (pruned("stored_cap"), pruned("retention")) == (cap + 4, age + 6)


def test_delete_is_refused_while_a_reply_delivery_is_pending_unless_forced(rt: Runtime) -> None:
    _, done = run(rt, "one")
    now = datetime.now(UTC)
    (pending,) = rt.store.open_deliveries(done.id, [Target("push:p", "push", 5)], now)
    with pytest.raises(Conflict, match=rf"1 pending reply delivery: {pending} \(push:p\)") as exc:
        rt.dispatcher.lifecycle.delete("chat", "k", by="ops")
    assert "--cancel-running" in exc.value.message
    assert rt.store.delivery(pending) is not None  # refused: nothing changed
    assert conversations(rt) == 1

    rt.store.settle_delivery(pending, "sent", "", now)  # delivered: nothing is pending now
    other = rt.store.open_deliveries(done.id, [Target("push:q", "push", 5)], now)
    assert len(other) == 1
    stone = rt.dispatcher.lifecycle.delete("chat", "k", by="ops", cancel_running=True)
    assert stone.tasks == 1 and conversations(rt) == 0
    assert rt.store.delivery(other[0]) is None  # dropped with its task, as asked


def test_stop_requested_names_the_watched_tasks_asked_to_stop(rt: Runtime) -> None:
    """The stop watch's one read: of the ids it watches, the active ones with a cancel or an
    interrupt asked; not a finished task's old request, not another process's runs."""
    tasks = [rt.dispatcher.submit("chat", f"t{i}", key=f"k{i}").task.id for i in range(5)]
    asked = {
        0: "cancel_requested",
        1: "interrupt_requested",
        3: "cancel_requested",
        4: "cancel_requested",
    }
    with rt.store.tx() as conn:
        conn.execute(s.tasks.update().where(s.tasks.c.id.in_(tasks)).values(status="running"))
        for i, flag in asked.items():
            conn.execute(s.tasks.update().where(s.tasks.c.id == tasks[i]).values({flag: True}))
        conn.execute(  # asked once, finished since
            s.tasks.update().where(s.tasks.c.id == tasks[3]).values(status="cancelled")
        )
    # tasks[4]: another process's run, asked to stop too
    watched = [*tasks[:4], *(uuid.uuid4() for _ in range(600))]
    assert rt.store.stop_requested(watched) == {tasks[0], tasks[1]}
    assert rt.store.stop_requested([tasks[2]]) == set()
    assert rt.store.stop_requested([]) == set()


def test_the_stop_watch_read_uses_its_index_on_postgresql(rt: Runtime) -> None:
    """However many tasks there are, the read walks the few asked to stop (its partial index)."""
    if rt.store.dialect != "postgresql":
        pytest.skip("PostgreSQL's plan")
    with rt.store.read() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            str(row[0])
            for row in conn.execute(text(f"EXPLAIN SELECT id FROM tasks WHERE {s.STOP_ASKED}"))
        )
    assert "ix_tasks_stop_asked" in plan, plan
