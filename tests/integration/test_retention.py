"""Tenants' retention on SQLite and PostgreSQL: idle conversations older than the window are
removed whole within the sweeps the batch size implies, younger ones and other tenants' stay
whole; the step journal and frozen prompts expire on their own clocks; old audit entries go."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from fleet.config import Settings
from fleet.dispatch import rights as rights_mod
from fleet.domain import audit
from fleet.runtime import Runtime, build
from fleet.store import schema as s
from tests.conftest import write_config

#: acme keeps conversations 30 days and journal steps 7; globex has no retention.
TENANTS = {
    "acme": 'retention = "30d"\n[retention_of]\nsteps = "7d"\ncontext = "7d"\n',
    "globex": "weight = 1\n",
}
BATCH = 20


@pytest.fixture
def rt(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config")
    (config / "tenants").mkdir()
    for name, body in TENANTS.items():
        (config / "tenants" / f"{name}.toml").write_text(body)
    monkeypatch.setattr(rights_mod, "RETENTION_BATCH", BATCH)
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    yield runtime
    runtime.close()


def ran(rt: Runtime, tenant: str, key: str, days_ago: float) -> uuid.UUID:
    """A conversation of one finished task, its times moved ``days_ago`` into the past."""
    adm = rt.dispatcher.submit("chat", f"hello {key}", key=key, tenant=tenant)
    rt.dispatcher.drain(adm.task.conversation_id, tenant=tenant)
    then = datetime.now(UTC) - timedelta(days=days_ago)
    conv = adm.task.conversation_id
    with rt.store.tx() as conn:
        conn.execute(
            update(s.conversations)
            .where(s.conversations.c.id == conv)
            .values(created_at=then, updated_at=then)
        )
        conn.execute(
            update(s.tasks)
            .where(s.tasks.c.conversation_id == conv)
            .values(created_at=then, finished_at=then)
        )
    return conv


def exists(rt: Runtime, conv: uuid.UUID) -> bool:
    with rt.store.read() as conn:
        return (
            conn.execute(select(s.conversations.c.id).where(s.conversations.c.id == conv)).first()
            is not None
        )


def count(rt: Runtime, table: s.Table, tenant: str | None = None) -> int:  # type: ignore[name-defined]
    q = select(func.count()).select_from(table)
    if tenant is not None:
        q = q.where(table.c.tenant == tenant)
    with rt.store.read() as conn:
        return int(conn.execute(q).scalar_one())


def test_idle_conversations_go_within_the_sweeps_the_batch_implies(rt: Runtime) -> None:
    old = [ran(rt, "acme", f"old-{n}", 40) for n in range(50)]
    young = [ran(rt, "acme", f"young-{n}", 10) for n in range(5)]
    other = [ran(rt, "globex", f"other-{n}", 400) for n in range(5)]
    # a conversation with an old task and a queued one is not idle
    busy = ran(rt, "acme", "busy", 40)
    rt.dispatcher.submit("chat", "still to do", key="busy", tenant="acme")
    interval = rt.settings.prune_interval
    sweeps = 0
    while any(exists(rt, c) for c in old):
        sweeps += 1
        assert sweeps <= -(-len(old) // BATCH), "more sweeps than the batch size implies"
        removed = rt.dispatcher.rights.sweep(now_monotonic=1e6 + sweeps * interval)
        assert 0 < removed["conversations"] <= BATCH
    assert sweeps == 3  # 50 conversations, 20 a sweep
    assert (
        rt.dispatcher.rights.sweep(now_monotonic=1e6 + 10 * interval).get("conversations") is None
    )
    for conv in (*young, *other, busy):
        assert exists(rt, conv), "a conversation inside its window or of no retention went"
    assert count(rt, s.conversations, "acme") == 6 and count(rt, s.conversations, "globex") == 5
    # whole: nothing of the removed ones is left in the tables they spread over
    with rt.store.read() as conn:
        left = conn.execute(
            select(func.count())
            .select_from(s.messages)
            .where(s.messages.c.conversation_id.in_(old))
        ).scalar_one()
        usage = conn.execute(
            select(func.count()).select_from(s.token_usage).where(s.token_usage.c.tenant == "acme")
        ).scalar_one()
    assert left == 0 and usage == 6  # the young five and busy's first: what stayed ran once each


def test_the_journal_and_frozen_prompts_expire_on_their_own_clock(rt: Runtime) -> None:
    week_old = ran(rt, "acme", "week", 10)
    fresh = ran(rt, "acme", "fresh", 1)
    theirs = ran(rt, "globex", "theirs", 10)

    def steps(conv: uuid.UUID) -> int:
        with rt.store.read() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(s.traces)
                    .join(s.tasks, s.tasks.c.id == s.traces.c.task_id)
                    .where(s.tasks.c.conversation_id == conv)
                ).scalar_one()
            )

    def context(conv: uuid.UUID) -> dict:
        with rt.store.read() as conn:
            return dict(
                conn.execute(
                    select(s.runs.c.context).where(s.runs.c.conversation_id == conv)
                ).scalar_one()
            )

    assert steps(week_old) == steps(fresh) == steps(theirs) == 1
    removed = rt.dispatcher.rights.sweep(now_monotonic=1e6)
    assert removed == {"steps": 1, "context": 1}
    assert steps(week_old) == 0 and context(week_old) == {"expired": True}
    assert steps(fresh) == 1 and "messages" in context(fresh)
    assert steps(theirs) == 1 and "messages" in context(theirs)
    # the conversation itself is inside its 30 days: whole but for those
    assert exists(rt, week_old)
    assert rt.dispatcher.rights.sweep(now_monotonic=1e6 + 2 * rt.settings.prune_interval) == {}


def test_old_audit_entries_go(rt: Runtime) -> None:
    now = datetime.now(UTC)
    for days in (400, 366, 10):
        rt.store.record(
            audit.Entry(
                at=now - timedelta(days=days), actor="cli:x", action="task.cancel", outcome="ok"
            )
        )
    assert rt.dispatcher.rights.sweep(now_monotonic=1e6) == {"audit": 2}
    assert count(rt, s.audit_log) == 1


def test_a_conversation_a_task_joined_after_it_was_found_idle_stays_whole(rt: Runtime) -> None:
    old = ran(rt, "acme", "back", 40)
    cutoff = datetime.now(UTC) - timedelta(days=30)
    assert rt.store.expired_conversations("acme", cutoff, 10) == [old]
    # the person comes back between the sweep's look and its erasure
    back = rt.dispatcher.submit("chat", "hello again", key="back", tenant="acme").task
    assert back.conversation_id == old
    assert rt.store.erase_conversation(old, datetime.now(UTC), idle_before=cutoff) == ({}, [])
    assert exists(rt, old) and rt.store.get_task(back.id).status.value == "queued"
