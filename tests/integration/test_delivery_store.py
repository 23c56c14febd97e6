"""The delivery journal on SQLite and PostgreSQL: journaled before the settle, an attempt
fenced by its claim, never sent again once ``sent``, a lost attempt journaled ``unknown`` and
sent again with the same Idempotency-Key."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from fleet import views
from fleet.cli.tasks import show_task
from fleet.config import FleetConfig, load_config
from fleet.delivery import Deliverer
from fleet.delivery.http import Sent
from fleet.delivery.targets import Request, reply_targets
from fleet.domain.delivery import Next, PushConfig
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.store import Store
from tests.conftest import write_config
from tests.integration.test_store import T0, ok, start, sub

AGENTS = {"quick": 'model = "echo"\n'}
DEPLOYMENTS = {"chat": 'agent = "quick"\n[reply]\nurl = "http://127.0.0.1:9/r/{task_id}"\n'}


@pytest.fixture
def config(tmp_path: Path) -> FleetConfig:
    return load_config(write_config(tmp_path / "config", AGENTS, DEPLOYMENTS))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Receiver:
    def __init__(self, *answers: Sent) -> None:
        self.answers = list(answers)
        self.got: list[Request] = []

    def __call__(self, request: Request, timeout: float) -> Sent:
        self.got.append(request)
        return self.answers.pop(0)


SENT = Sent("sent", 200, "ok", 1.0)


def settled_task(store: Store, deliverer: Deliverer) -> uuid.UUID:
    conv = store.admit(sub(), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    outcome = deliverer.before_settle(started.task, ok("the reply"))
    assert outcome.reply_delivery == "pending"
    store.settle(started.task, started.run_id, outcome, T0)
    return started.task.id


def test_sent_is_never_sent_again(store: Store, config: FleetConfig) -> None:
    recv = Receiver(SENT)
    deliverer = Deliverer(store, config, Clock(), sender=recv)
    task_id = settled_task(store, deliverer)
    (rec,) = store.task_deliveries(task_id)
    conv = store.get_task(task_id).conversation_id
    assert [m.delivery for m in store.messages(conv)] == ["accepted", "pending"]

    assert deliverer.attempt(rec.id) is None
    (done,) = store.task_deliveries(task_id)
    assert (done.status, done.attempts, done.claim) == ("sent", 1, None)
    assert recv.got[0].url == f"http://127.0.0.1:9/r/{task_id}"
    assert recv.got[0].headers["Idempotency-Key"] == str(rec.id)
    assert [m.delivery for m in store.messages(conv)] == ["accepted", "sent"]

    # Another message for it, or a claim from what was read before: nothing is sent.
    assert deliverer.attempt(rec.id) is None
    assert not store.claim_delivery(rec, "late", T0, T0, url=None, lost=None)
    assert len(recv.got) == 1


def test_a_refused_attempt_says_what_failed_before_the_receivers_answer(
    store: Store, config: FleetConfig
) -> None:
    """Issue 33: a receiver answering 500 "ok" gave `error: "ok"`, "failed (HTTP 500): ok"."""
    deliverer = Deliverer(store, config, Clock(), sender=Receiver(Sent("failed", 400, "ok", 1.0)))
    task_id = settled_task(store, deliverer)
    (rec,) = store.task_deliveries(task_id)
    assert deliverer.attempt(rec.id) is None
    (done,) = store.task_deliveries(task_id)
    said = f"HTTP 400 from http://127.0.0.1:9/r/{task_id}: ok"
    assert (done.status, done.error) == ("failed", said)
    assert (done.journal[0]["error"], done.journal[0]["detail"]) == (said, "ok")
    out = Console(record=True, width=300, highlight=False)
    show_task(out, views.task_with_deliveries(store.get_task(task_id), [done]))  # tasks show
    assert f" failed: {said}\n" in out.export_text()


def test_of_two_claims_on_one_read_only_one_wins(store: Store, config: FleetConfig) -> None:
    deliverer = Deliverer(store, config, Clock(), sender=Receiver())
    (rec,) = store.task_deliveries(settled_task(store, deliverer))
    until = T0 + timedelta(seconds=30)
    assert store.claim_delivery(rec, "a", until, T0, url=None, lost=None)
    assert not store.claim_delivery(rec, "b", until, T0, url=None, lost=None)
    # Only the claim's holder writes the outcome.
    assert not store.record_attempt(rec.id, "b", Next("sent"), {"attempt": 1}, T0)
    assert store.record_attempt(rec.id, "a", Next("failed"), {"attempt": 1}, T0)


def test_a_lost_attempt_is_journaled_unknown_and_sent_again_with_the_same_key(
    store: Store, config: FleetConfig
) -> None:
    clock = Clock()
    recv = Receiver(SENT)
    deliverer = Deliverer(store, config, clock, sender=recv)
    task_id = settled_task(store, deliverer)
    (rec,) = store.task_deliveries(task_id)
    # A worker claimed it and died before it reported.
    until = T0 + timedelta(seconds=40)
    assert store.claim_delivery(rec, "dead", until, T0, url="http://x", lost=None)
    assert deliverer.attempt(rec.id) is None  # its claim still holds
    assert recv.got == []
    assert store.due_deliveries(T0 + timedelta(seconds=39)) == []

    clock.now = T0 + timedelta(seconds=41)
    assert store.due_deliveries(clock.now) == [rec.id]  # the sweeper starts it
    assert deliverer.attempt(rec.id) is None
    (done,) = store.task_deliveries(task_id)
    assert done.status == "sent" and done.attempts == 2
    assert [e["outcome"] for e in done.journal] == ["unknown", "sent"]
    assert recv.got[0].headers["Idempotency-Key"] == str(rec.id)


def test_a_task_that_ended_without_a_reply_fails_its_reply_delivery(
    store: Store, config: FleetConfig
) -> None:
    deliverer = Deliverer(store, config, Clock(), sender=Receiver())
    conv = store.admit(sub(), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    # journaled for a reply, then the settle says the run failed (e.g. a cancel won)
    store.open_deliveries(
        started.task.id, reply_targets(config, started.task, TaskStatus.SUCCEEDED), T0
    )
    failed = Outcome(TaskStatus.FAILED, None, "boom", {})
    store.settle(started.task, started.run_id, failed, T0)
    (rec,) = store.task_deliveries(started.task.id)
    assert deliverer.attempt(rec.id) is None
    (done,) = store.task_deliveries(started.task.id)
    assert done.status == "failed" and "without a reply" in (done.error or "")


def test_push_configs_belong_to_the_caller_that_set_them(store: Store) -> None:
    task_id = store.admit(sub(), T0).task.id
    alice = PushConfig(task_id, task_id.hex, "http://a.example/p", token="alice-token", owner="a")
    assert store.set_push_config(alice, T0)
    # Bob reads the same (singleton) task: he neither sees nor replaces nor deletes hers.
    assert store.push_configs(task_id, owner="b") == []
    bobs = PushConfig(task_id, task_id.hex, "http://b.example/p", token="bob-token", owner="b")
    assert not store.set_push_config(bobs, T0)
    assert not store.delete_push_config(task_id, task_id.hex, owner="b")
    assert store.push_configs(task_id, owner="a") == [alice]
    assert store.push_configs(task_id) == [alice]  # the deliverer sees every config
    assert store.set_push_config(PushConfig(task_id, "bobs", "http://b.example/p", owner="b"), T0)
    assert [c.id for c in store.push_configs(task_id, owner="b")] == ["bobs"]
    assert store.delete_push_config(task_id, task_id.hex, owner="a")
    assert store.push_configs(task_id, owner="a") == []


def test_a_push_config_is_delivered_whatever_the_task_scope(
    store: Store, config: FleetConfig
) -> None:
    recv = Receiver(SENT, SENT)
    deliverer = Deliverer(store, config, Clock(), sender=recv)
    conv = store.admit(sub(scope="deployment"), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    store.set_push_config(
        PushConfig(started.task.id, "p", "http://127.0.0.1:9/push", owner="a"), T0
    )
    outcome = deliverer.before_settle(started.task, ok("the reply"))
    done = store.settle(started.task, started.run_id, outcome, T0)
    assert done.push_pending  # the settle's own word: nothing else is read for it
    deliverer.after_settle(started.task, done.status, push_pending=done.push_pending)
    found = {r.target: r.status for r in store.task_deliveries(started.task.id)}
    assert found == {"reply:deployments/chat": "sent", "push:p": "sent"}
    assert sorted(r.url for r in recv.got)[0] == "http://127.0.0.1:9/push"
    # journaled once: a later look (the sweeper's, a config's set) opens nothing new
    assert store.push_pending_ended(T0 + timedelta(hours=1)) == []
    deliverer.after_settle(started.task, done.status)
    assert len(store.task_deliveries(started.task.id)) == 2 and len(recv.got) == 2


def test_a_settle_without_push_configs_says_so_and_opens_nothing(
    store: Store, config: FleetConfig
) -> None:
    recv = Receiver()
    deliverer = Deliverer(store, config, Clock(), sender=recv)
    conv = store.admit(sub(scope="deployment"), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    failed = Outcome(TaskStatus.FAILED, None, "boom", {})  # no reply: no [reply] delivery
    done = store.settle(started.task, started.run_id, failed, T0)
    assert done.status == TaskStatus.FAILED and not done.push_pending
    deliverer.after_settle(started.task, done.status, push_pending=False)
    assert store.task_deliveries(started.task.id) == [] and recv.got == []


def test_the_sweeper_journals_the_push_of_a_task_whose_worker_was_lost_after_its_settle(
    store: Store, config: FleetConfig
) -> None:
    recv = Receiver(SENT)
    clock = Clock()
    deliverer = Deliverer(store, config, clock, sender=recv)
    conv = store.admit(sub(scope="deployment"), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    store.set_push_config(PushConfig(started.task.id, "p", "http://127.0.0.1:9/p", owner="a"), T0)
    failed = Outcome(TaskStatus.FAILED, None, "boom", {})
    assert store.settle(started.task, started.run_id, failed, T0).push_pending
    # the worker is lost here, before ``after_settle``: nothing journaled yet
    assert store.task_deliveries(started.task.id) == []
    assert deliverer.sweep(grace_s=5) == 0  # within the grace the worker may still do it
    clock.now = T0 + timedelta(seconds=10)
    assert deliverer.sweep(grace_s=5) == 1
    (rec,) = store.task_deliveries(started.task.id)
    assert (rec.target, rec.status) == ("push:p", "sent") and len(recv.got) == 1
    assert store.push_pending_ended(clock.now) == []


def test_a_push_config_set_after_the_settle_is_journaled_by_its_set(
    store: Store, config: FleetConfig
) -> None:
    recv = Receiver(SENT)
    deliverer = Deliverer(store, config, Clock(), sender=recv)
    conv = store.admit(sub(scope="deployment"), T0).task.conversation_id
    started = start(store, conv, T0)
    assert started is not None
    failed = Outcome(TaskStatus.FAILED, None, "boom", {})
    assert not store.settle(started.task, started.run_id, failed, T0).push_pending
    store.set_push_config(PushConfig(started.task.id, "p", "http://127.0.0.1:9/p", owner="a"), T0)
    assert store.push_pending_ended(T0 + timedelta(hours=1)) == [started.task.id]
    assert deliverer.schedule(started.task.id) != []  # what the A2A handler does next
    assert [r.status for r in store.task_deliveries(started.task.id)] == ["sent"]
    assert store.push_pending_ended(T0 + timedelta(hours=1)) == []


def test_a_delivery_url_is_stored_and_shown_without_its_secrets(
    store: Store, tmp_path: Path
) -> None:
    hook = "https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX?token=other-secret"
    deployments = {"chat": f'agent = "quick"\n[reply]\nurl = "{hook}"\n'}
    config = load_config(write_config(tmp_path / "hook", AGENTS, deployments))
    recv = Receiver(SENT)
    deliverer = Deliverer(store, config, Clock(), sender=recv)
    task_id = settled_task(store, deliverer)
    (rec,) = store.task_deliveries(task_id)
    assert deliverer.attempt(rec.id) is None
    assert recv.got[0].url == hook  # sent where configured
    (done,) = store.task_deliveries(task_id)
    assert done.url == "https://hooks.slack.com/services/[REDACTED]"
    assert "secret" not in json.dumps(views.task_with_deliveries(store.get_task(task_id), [done]))


def test_a_task_cancelled_while_queued_gets_its_push_notification_from_the_sweeper(
    store: Store, config: FleetConfig
) -> None:
    recv = Receiver(SENT)
    clock = Clock()
    deliverer = Deliverer(store, config, clock, sender=recv)
    task = store.admit(sub(scope="deployment"), T0).task
    store.set_push_config(PushConfig(task.id, "p", "http://127.0.0.1:9/p", owner="a"), T0)
    assert store.cancel(task.id, T0).task.status == TaskStatus.CANCELLED  # no settle, no worker
    clock.now = T0 + timedelta(seconds=10)
    assert deliverer.sweep(grace_s=5) == 1
    (rec,) = store.task_deliveries(task.id)
    assert (rec.target, rec.status) == ("push:p", "sent")
    assert json.loads(recv.got[0].body)["task"]["status"]["state"] == "TASK_STATE_CANCELED"
