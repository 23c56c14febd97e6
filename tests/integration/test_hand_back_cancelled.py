"""A hand-back that a cancel wins ends the task: what a settle does next happens too (its A2A
push notified of the final state, its metric counted), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet import metrics
from fleet.config import Settings
from fleet.delivery.http import Sent
from fleet.delivery.targets import Request
from fleet.domain.delivery import PushConfig
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.integration.test_store import start


@pytest.fixture
def rt(tmp_path: Path, db_url: str, config_dir: Path) -> Iterator[Runtime]:
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config_dir))
    yield runtime
    runtime.close()


def test_a_hand_back_that_a_cancel_won_notifies_and_counts(rt: Runtime) -> None:
    got: list[Request] = []

    def receiver(request: Request, timeout: float) -> Sent:
        got.append(request)
        return Sent("sent", 200, "ok", 1.0)

    deliverer = rt.dispatcher.deliveries
    deliverer.sender, deliverer.enqueue = receiver, None  # attempts inline, to this receiver
    task = rt.dispatcher.submit("chat", "hi", key="k").task
    now = rt.dispatcher.clock()
    started = start(rt.store, task.conversation_id, now)
    assert started is not None
    rt.store.set_push_config(PushConfig(task.id, "p", "http://127.0.0.1:9/push", owner="a"), now)
    finished = metrics.FINISHED.labels("chat", "cancelled")
    before = finished._value.get()
    assert rt.store.cancel(task.id, now).effect == "requested"

    rt.dispatcher.hand_back(started, "handed back")

    assert rt.store.get_task(task.id).status == TaskStatus.CANCELLED
    (rec,) = rt.store.task_deliveries(task.id)
    assert (rec.target, rec.status) == ("push:p", "sent")
    assert b"TASK_STATE_CANCELED" in got[0].body
    assert finished._value.get() == before + 1
