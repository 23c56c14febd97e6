"""An A2A push notification survives a worker SIGKILLed between its settle and the journal.

The settle's statement returns the task's ``push_pending`` flag; the same worker then journals the
task's push configs (``Deliverer.after_settle``), clearing the flag in that transaction. The test
holds an uncommitted delivery row on the same (task, target) key, so the worker's insert waits for
it with the flag's clearing not yet committed; the kill lands there. The task has ended, its
push is journaled nowhere: the sweeper (``fleet beat``) finds the ended task still flagged after
its grace and journals the push, which another worker sends — once.
"""

from __future__ import annotations

import signal
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain import delivery as rules
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.integration.test_delivery_crash_fleet import sweeps_pass
from tests.support.blocker import Blocker
from tests.support.fleet import Fleet, fleet_settings, wait_for
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with: no ``[reply]``, so
    the push config is the task's only delivery."""
    config = write_config(
        tmp_path / "config", {"quick": 'model = "echo"\n'}, {"pushed": 'agent = "quick"\n'}
    )
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0)


def test_a_push_whose_worker_died_after_the_settle_is_sent_once_by_the_sweep(
    rt: Runtime, fleet: Fleet, receiver: Receiver, redis_url: str, pg_url: str
) -> None:
    fleet.beat()
    adm = rt.dispatcher.submit("pushed", "hello", key="k-push")
    task_id = adm.task.id
    cfg = rules.PushConfig(task_id, "p", f"{receiver.url}/ok/push", token="t-1", owner="a")
    assert rt.store.set_push_config(cfg, datetime.now(UTC))  # queued: the settle journals it
    target = rules.push_target("p").target

    with Blocker(pg_url) as pg:
        # The journal row the worker will insert, uncommitted: its insert waits on the key.
        pg.hold(
            "INSERT INTO deliveries (id, task_id, target, kind, status, attempts, max_attempts,"
            " next_at, journal, created_at, updated_at) VALUES (:id, :task, :target, 'push',"
            " 'pending', 0, 1, now(), '[]', now(), now())",
            {"id": uuid.uuid4(), "task": task_id, "target": target},
        )
        dying = fleet.worker("a")
        blocked = pg.waiting(
            "INSERT INTO deliveries", 60, "worker a to journal the push after its settle"
        )
        assert rt.store.get_task(task_id).status == TaskStatus.SUCCEEDED  # settled
        dying.signal(signal.SIGKILL)
        dying.popen.wait(10)
        pg.release()
        pg.ended(blocked)
    # Its journal died with it: nothing journaled, the flag still up (the clearing rolled back).
    assert rt.store.task_deliveries(task_id) == []
    assert rt.store.push_pending_ended(datetime.now(UTC)) == [task_id]
    assert receiver.got("/ok/push") == []

    fleet.worker("b")

    def sent() -> rules.Record | None:
        recs = rt.store.task_deliveries(task_id)
        return recs[0] if recs and recs[0].status in rules.FINAL else None

    rec = wait_for(sent, 90, what="the sweep to journal the push and worker b to send it")
    assert (rec.target, rec.status, rec.attempts) == (target, "sent", 1)
    (got,) = receiver.got("/ok/push")
    assert got.headers["X-A2A-Notification-Token"] == "t-1"
    assert got.body["task"]["id"] == str(task_id)
    assert got.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    # Sent: later sweeps journal and send nothing more.
    sweeps_pass(redis_url, 2)
    assert len(receiver.got("/ok/push")) == 1
    assert rt.store.task_deliveries(task_id) == [rec]
    assert rt.store.push_pending_ended(datetime.now(UTC)) == []
