"""A run's provenance lists what its context dropped and why, read through the real claim paths.

Runs in-process (embedded lease and waker) against SQLite and PostgreSQL; on PostgreSQL a drain
claims each next task in its settle's statement, so both claim paths are covered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.runtime import Runtime, build


@pytest.fixture
def rt(tmp_path: Path, db_url: str, config_dir: Path) -> Iterator[Runtime]:
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config_dir))
    yield runtime
    runtime.close()


def run_all(rt: Runtime, n: int, key: str = "p") -> list:
    tasks = [rt.dispatcher.submit("short", f"m{i}", key=key).task for i in range(n)]
    rt.dispatcher.drain(tasks[0].conversation_id)
    return [rt.store.get_task(t.id) for t in tasks]


def context_of(rt: Runtime, task_id) -> dict:
    (run,) = rt.store.runs_of(task_id)
    return run.context


def test_messages_past_the_item_limit_are_listed_as_dropped(rt: Runtime) -> None:
    done = run_all(rt, 6)  # agent "small": max_items 3, max_bytes 200
    assert all(t.status == "succeeded" for t in done)
    last = context_of(rt, done[-1].id)
    messages = rt.store.messages(done[-1].conversation_id)
    before = [m.id for m in messages][:10]  # what existed when the sixth task was claimed
    # whole turns: the newest (2 messages) fits 3 items, the one before does not fit whole
    assert [r["id"] for r in last["injected"]] == before[-2:]
    assert [(r["id"], r["reason"]) for r in last["dropped"]] == [
        (i, "item_limit") for i in reversed(before[:-2])
    ]
    assert last["older_unseen"] is False


def test_a_long_conversation_lists_a_bounded_number_of_drops(rt: Runtime) -> None:
    done = run_all(rt, 14)
    last = context_of(rt, done[-1].id)
    assert len(last["injected"]) == 2  # one whole turn of the 3 items
    assert len(last["dropped"]) == 3 + 20 - 2  # the rest of what a claim reads
    assert {r["reason"] for r in last["dropped"]} == {"item_limit"}
    assert last["older_unseen"] is True
    assert done[-1].reply == "echo: m13 [history: 2]"
