"""The operator UI's reads on SQLite and PostgreSQL: figures per deployment and conversations with
their unfinished work, stuck ones first, filtered by deployment, scope and state."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.store import Store
from fleet.store.operator import ConversationFilter
from tests.integration.test_run_reads import start
from tests.integration.test_store import T0, sub


def test_figures_and_conversations(store: Store) -> None:
    idle = store.admit(sub("done", key="idle"), T0).task
    first = start(store, idle.conversation_id, "h:1")
    store.settle(first.task, first.run_id, Outcome(TaskStatus.SUCCEEDED, "ok", None, {}), T0)
    lost = store.admit(sub("lost", key="lost"), T0).task
    running = start(store, lost.conversation_id, "h:2")
    store.recover(lost.id, running.task.fence, "worker lost", T0)  # interrupted: stuck
    busy = store.admit(sub("busy", key="busy"), T0).task
    start(store, busy.conversation_id, "h:3")
    store.admit(sub("behind", key="busy"), T0)
    store.admit(sub("hook", key="7", scope="webhook:gh"), T0)
    failed = store.admit(sub("x", key="fails", deployment="other"), T0).task
    f = start(store, failed.conversation_id, "h:4")
    store.settle(f.task, f.run_id, Outcome(TaskStatus.FAILED, None, "boom", {}), T0)

    now = T0 + timedelta(seconds=30)
    figures = store.figures(["chat", "other", "unused"], now)
    chat = figures["chat"]
    assert (chat.queued, chat.running, chat.interrupted) == (2, 1, 1)
    assert chat.oldest_due_s == 30.0
    assert (chat.finished_recently, chat.failed_recently) == (1, 0)
    assert (figures["other"].finished_recently, figures["other"].failed_recently) == (1, 1)
    assert figures["unused"].queued == 0
    later = store.figures(["chat"], T0 + timedelta(hours=2))["chat"]
    assert later.finished_recently == 0, "an hour's window"

    rows = store.conversations(ConversationFilter(), now)
    assert [(r.key, r.state) for r in rows][:3] == [
        ("lost", "stuck"),
        ("busy", "running"),
        ("7", "queued"),
    ]
    assert rows[0].reason.startswith("interrupted")
    assert {r.key: r.state for r in rows[3:]} == {"idle": "idle", "fails": "idle"}
    busy_row = next(r for r in rows if r.key == "busy")
    assert busy_row.pending.waiting == 1 and busy_row.pending.running_since is not None

    def keys(**kw: object) -> list[str]:
        return [r.key for r in store.conversations(ConversationFilter(**kw), now)]  # type: ignore[arg-type]

    assert keys(scope="webhook:gh") == ["7"]
    assert sorted(keys(deployment="other")) == ["fails"]
    assert sorted(keys(deployments=frozenset({"other"}))) == ["fails"]
    assert keys(state="stuck") == ["lost"]
    assert sorted(keys(state="idle")) == ["fails", "idle"]
    # due work a minute old that nothing started is stuck as well
    assert keys(state="stuck") != keys(state="queued")
    assert "7" in [
        r.key
        for r in store.conversations(ConversationFilter(state="stuck"), T0 + timedelta(minutes=5))
    ]

    conv = store.conversation(busy.conversation_id)
    assert [t.seq for t in conv.tasks] == [1, 2] and conv.conversation == "api:busy"
    runs = store.runs_by_task([t.id for t in conv.tasks])
    assert [r.attempt for r in runs[busy.id]] == [1] and runs[conv.tasks[1].id] == []


#: A month of finished work: 20,000 tasks of 1,000 conversations, one every two minutes.
_HISTORY = """
INSERT INTO conversations (id, deployment, scope, key, generation, last_seq, created_at, updated_at)
SELECT md5('c' || g)::uuid, 'chat', 'api', 'k' || g, 0, 20, :t0, :t0
FROM generate_series(0, 999) g;
INSERT INTO tasks (id, conversation_id, seq, generation, deployment, scope, conversation_key,
  status, input, submissions, input_bytes, not_before, labels, attempts, max_attempts, fence,
  cancel_requested, interrupt_requested, inbox, created_at, finished_at)
SELECT md5('t' || g)::uuid, md5('c' || (g % 1000))::uuid, g / 1000 + 1, 0, 'chat', 'api',
  'k' || (g % 1000), CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'succeeded' END, '[]', 1, 0,
  :t0 - g * interval '2 minutes', '{}', 1, 3, 1, false, false, 0,
  :t0 - g * interval '2 minutes', :t0 - g * interval '2 minutes' + interval '1 second'
FROM generate_series(0, 19999) g;
ANALYZE tasks;
"""


@pytest.mark.pg
def test_the_last_hours_figures_read_finished_tasks_through_their_index(pg_url: str) -> None:
    """The overview's throughput and failures read the last hour's range of ``finished_at``
    (``ix_tasks_finished_at``), not every task ever finished (a month of history here)."""
    store = Store.open(pg_url, Redactor(()))
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if "finished_at >=" in statement:
            seen.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        with store.engine.begin() as conn:
            for part in _HISTORY.split(";")[:-1]:
                conn.execute(text(part), {"t0": T0})
        figures = store.figures(["chat"], T0)["chat"]
        ((statement, params),) = seen
        with store.engine.connect() as conn:
            plan = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {statement}", params))
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
        store.dispose()
    assert (figures.finished_recently, figures.failed_recently) == (31, 1)  # g = 0…30
    assert "ix_tasks_finished_at" in plan, plan
    assert "Seq Scan on tasks" not in plan, plan
