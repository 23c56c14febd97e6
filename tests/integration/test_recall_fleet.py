"""Recall and working memory on real workers (PostgreSQL, Redis, Celery processes): messages
are embedded by the background job after a run, and a working-memory patch is applied once
across a worker killed mid-run."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TTL, SWEEP = 2.0, 1.0
AGENTS = {
    "recaller": 'model = "echo"\n[history]\nmax_items = 2\n[recall]\nthreshold = 0.0\n',
    # the final model step takes 2.5 s: the window in which the test kills the worker
    "keeper": '[model]\nprovider = "echo"\ndelay_ms = 2500\n[working_memory]\n',
}
DEPLOYMENTS = {"recall": 'agent = "recaller"\n', "keep": 'agent = "keeper"\n'}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=TTL, sweep_interval=SWEEP)


def embedded(rt: Runtime) -> int:
    with rt.store.read() as conn:
        return int(
            conn.execute(select(func.count()).select_from(s.message_embeddings)).scalar_one()
        )


def test_workers_embed_messages_after_a_run_and_later_runs_recall_them(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a")
    for text in ("I am allergic to peanuts.", "My dog is called Biscuit.", "I live in Leipzig."):
        rt.dispatcher.submit("recall", text, key="k")
    wait_for(lambda: embedded(rt) == 6, 60, what="the worker to embed six messages")
    task = rt.dispatcher.submit("recall", "Which foods must I avoid?", key="k").task
    done = wait_for(
        lambda: (t := rt.store.get_task(task.id)).status.terminal and t, 30, what="the run"
    )
    assert done.status == TaskStatus.SUCCEEDED
    hits = rt.store.runs_of(task.id)[0].context["recall"]["hits"]
    assert any("peanuts" in h["preview"] for h in hits)


def test_a_working_memory_patch_applies_once_across_a_killed_worker(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.beat()
    fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit(
        "keep", '/tool update_working_memory {"patch": {"likes": "tea"}}', key="k"
    ).task
    key = f"conversation:{task.conversation_id}"
    # the patch is applied and its result journaled; the worker is in the final model step
    wait_for(
        lambda: any(j.kind == "tool" for j in rt.store.journal(task.id)),
        30,
        what="the patch's result in the journal",
    )
    assert rt.store.working_memory(key) == ({"likes": "tea"}, 1)
    with rt.store.read() as conn:
        worker = conn.execute(select(s.tasks.c.worker).where(s.tasks.c.id == task.id)).scalar()
    os.kill(int(worker.rpartition(":")[2]), signal.SIGKILL)
    done = wait_for(
        lambda: (t := rt.store.get_task(task.id)).status.terminal and t,
        60,
        what="the retried run",
    )
    assert done.status == TaskStatus.SUCCEEDED and done.attempts == 2
    assert rt.store.working_memory(key) == ({"likes": "tea"}, 1), "the patch applied twice"
    with rt.store.read() as conn:
        receipts = conn.execute(
            select(func.count()).select_from(s.working_memory_operations)
        ).scalar_one()
    assert receipts == 1
    second = rt.store.runs_of(task.id)[1]
    assert second.usage["replayed_steps"] == 2
