"""Runs keep the agent configuration they started with when another worker process, with another
config and without a tool's code, takes them on (real PostgreSQL, Redis and Celery workers): a run
resumed after its approval, and a run handed back at SIGTERM mid-step."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.fleet import fleet_settings, running_fleet, runtime_for, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.pg, pytest.mark.redis, pytest.mark.timeout(180)]

TOOLS_MODULE = '''
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"
'''
BEFORE = {
    "shop": """
        model = "echo"
        instructions = "Version one."
        tools = [
          { tool = "snap_tools:refund", approval = "required" },
          { tool = "tests.support.shop_tools:lookup_order", approval = "required" },
        ]
    """,
    "desk": """
        instructions = "Version one."
        tools = ["tests.support.shop_tools:lookup_order"]
        [model]
        provider = "echo"
        delay_ms = 8000
    """,
}
AFTER = {
    "shop": 'model = "echo"\ninstructions = "Version two."\ntools = ["current_time"]\n',
    "desk": 'model = "echo"\ninstructions = "Version two."\n',
}
DEPLOYMENTS = {"shop": 'agent = "shop"\n', "desk": 'agent = "desk"\n'}


def _settled(rt: Runtime, task_id: uuid.UUID) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t, 60, what="the task"
    )


def test_runs_keep_their_config_on_a_worker_with_another(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    before = write_config(tmp_path / "before", BEFORE, DEPLOYMENTS)
    (before / "snap_tools.py").write_text(TOOLS_MODULE)
    after = write_config(tmp_path / "after", AFTER, DEPLOYMENTS)
    for folder in ("old", "new"):
        (tmp_path / folder).mkdir()
    tuning = {"lease_ttl": 2.0, "sweep_interval": 1.0, "shutdown_grace": 5.0}
    old = fleet_settings(tmp_path / "old", pg_url, redis_url, before, **tuning)
    new = fleet_settings(tmp_path / "new", pg_url, redis_url, after, **tuning)
    with runtime_for(old) as rt, running_fleet(tmp_path / "old", **old) as old_fleet:
        old_worker = old_fleet.worker("old")
        gone = rt.dispatcher.submit("shop", '/tool refund {"order": "A-1"}', key="gone").task
        kept = rt.dispatcher.submit("shop", '/tool lookup_order {"order_id": 7}', key="kept").task
        for task in (gone, kept):
            wait_for(
                lambda t=task: rt.store.get_task(t.id).status == TaskStatus.WAITING,
                60,
                what="the shop tasks to wait for their approvals",
            )
        moved = rt.dispatcher.submit("desk", '/tool lookup_order {"order_id": 7}', key="desk").task
        wait_for(
            lambda: rt.store.get_task(moved.id).status == TaskStatus.RUNNING,
            30,
            what="the desk task's slow model step to begin",
        )
        old_worker.stop()  # SIGTERM: the desk run is handed back mid-step

        with running_fleet(tmp_path / "new", **new) as new_fleet:
            new_fleet.worker("new")
            for task in (gone, kept):
                current = rt.store.get_task(task.id)
                for wait in rt.store.waits_of(task.id, pending=True):
                    rt.dispatcher.waiting.decide(current, uuid.UUID(wait.id), "approve", by="ops")

            failed = _settled(rt, gone.id)
            assert failed.status == TaskStatus.FAILED
            assert "tool 'refund' (snap_tools:refund) is gone" in (failed.error or "")

            for task in (kept, moved):
                done = _settled(rt, task.id)
                assert done.status == TaskStatus.SUCCEEDED, done.error
                runs = rt.store.runs_of(task.id)
                assert len({r.worker for r in runs}) == 2, runs  # both processes ran it
                assert runs[0].context["agent"] == runs[-1].context["agent"]
                called = [
                    t["output"]
                    for t in rt.store.traces_of(task.id)
                    if t["kind"] == "tool" and t["name"] == "lookup_order"
                ]
                assert called and "shipped" in str(called[-1]), called
