"""Reply delivery exactly once where users feel it: real workers SIGKILLed at the worst moment.

A worker that dies after the receiver got the request and before ``sent`` is stored leaves the
delivery's claim to expire (its timeout + ``FLEET_DELIVERY_CLAIM_MARGIN``, short here); the
sweeper (``fleet beat``) then starts the next attempt on another worker, which journals the lost
one as ``unknown`` and sends again with the same ``Idempotency-Key``. Once ``sent`` is stored no
request follows, however many sweeps pass.

Two moments are killed: while the receiver holds its answer (the request arrived, no answer yet),
and after the receiver answered 200 while the worker waits to store ``sent`` (the test holds the
delivery's row lock, so the worker's write blocks; the kill lands there). In the second case the
resend is the documented contract (docs/delivery.md), not a bug: nothing the worker
received survives its death, and the next worker cannot tell "never arrived" from "arrived, the
answer was lost", so it sends again and the receiver dedupes on the key it already saw.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from fleet.constants import SWEEP_TICK_KEY
from fleet.domain import delivery as rules
from fleet.runtime import Runtime
from tests.conftest import write_config
from tests.support.blocker import Blocker
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240)]

TTL, SWEEP = 2.0, 1.0
#: The attempt's timeout: the kill lands well within it. Its claim holds this long plus
#: ``CLAIM_MARGIN_S`` before the sweeper may start the next attempt.
REPLY_TIMEOUT_S = 4
#: ``FLEET_DELIVERY_CLAIM_MARGIN`` for the test (the default, 30 s, would only make it wait).
CLAIM_MARGIN_S = 2.0
#: How long the retry may take: the claim's expiry, a sweep, a worker's start, slack.
RETRY_WITHIN_S = REPLY_TIMEOUT_S + CLAIM_MARGIN_S + 45


@pytest.fixture
def config(tmp_path: Path, receiver: Receiver) -> Path:
    held = (
        f'agent = "quick"\n[reply]\nurl = "{receiver.url}/held/{{task_id}}"\n'
        f'timeout = "{REPLY_TIMEOUT_S}s"\nattempts = 3\n'
    )
    return write_config(tmp_path / "config", {"quick": 'model = "echo"\n'}, {"held": held})


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(
        tmp_path,
        pg_url,
        redis_url,
        config,
        lease_ttl=TTL,
        sweep_interval=SWEEP,
        delivery_claim_margin=CLAIM_MARGIN_S,
    )


@pytest.fixture
def fleet(fleet: Fleet) -> Fleet:
    """One worker (``a``, the one that will die) and the sweeper."""
    fleet.worker("a")
    fleet.beat()
    return fleet


def worker(fleet: Fleet, name: str) -> Proc:
    (proc,) = [p for p in fleet.procs if p.name == name]
    return proc


def first_request(receiver: Receiver) -> None:
    wait_for(
        lambda: receiver.got("/held/"), 60, interval=0.01, what="the receiver to get an attempt"
    )


def kill(proc: Proc) -> None:
    """SIGKILL the worker's whole process group (the Celery parent and its pool child)."""
    assert "fleet.deliver" in proc.log(), "the attempt was not this worker's"
    proc.signal(signal.SIGKILL)
    proc.popen.wait(10)


def lost_attempt(rt: Runtime, task_id: uuid.UUID) -> rules.Record:
    """The delivery as the dead worker left it: claimed, one attempt, nothing journaled."""
    (rec,) = rt.store.task_deliveries(task_id)
    assert (rec.status, rec.attempts, rec.journal) == ("pending", 1, ())
    assert rec.claim is not None
    return rec


def sweeps_pass(redis_url: str, count: int) -> None:
    """Wait until ``count`` whole sweeps ran after now (each takes the tick key as it starts;
    a sweep has finished once the next one started)."""
    client = redis.Redis.from_url(redis_url)
    state = {"was": bool(client.exists(SWEEP_TICK_KEY)), "starts": 0}

    def passed() -> bool:
        now = bool(client.exists(SWEEP_TICK_KEY))
        if now and not state["was"]:
            state["starts"] += 1
        state["was"] = now
        return state["starts"] > count

    try:
        wait_for(passed, 30, interval=0.01, what=f"{count} sweeps to pass")
    finally:
        client.close()


def sent_once_more_then_never(
    rt: Runtime, fleet: Fleet, receiver: Receiver, redis_url: str, task_id: uuid.UUID
) -> None:
    """Another worker retries (started by the sweep): the lost attempt is journaled ``unknown``,
    the resend carries the same Idempotency-Key and is ``sent``; after that nothing is sent."""
    fleet.worker("b")

    def settled() -> rules.Record | None:
        (rec,) = rt.store.task_deliveries(task_id)
        return rec if rec.status in rules.FINAL else None

    rec = wait_for(settled, RETRY_WITHIN_S, what="the retry on worker b to settle")
    assert rec.status == "sent" and rec.attempts == 2
    assert [e["outcome"] for e in rec.journal] == ["unknown", "sent"]
    assert rec.journal[1]["httpStatus"] == 200
    got = receiver.got("/held/")
    assert len(got) == 2
    assert [r.headers["Idempotency-Key"] for r in got] == [str(rec.id), str(rec.id)]
    assert "fleet.deliver" in worker(fleet, "b").log()
    msgs = rt.store.messages(rt.store.get_task(task_id).conversation_id, limit=10)
    assert [m.delivery for m in msgs] == ["accepted", "sent"]

    # After ``sent``: sweeps pass and start nothing; an attempt started by hand sends nothing.
    sweeps_pass(redis_url, 2)
    assert rt.dispatcher.deliveries.attempt(rec.id) is None
    assert len(receiver.got("/held/")) == 2
    assert rt.store.task_deliveries(task_id) == [rec]


def test_killed_while_the_receiver_holds_its_answer(
    rt: Runtime, fleet: Fleet, receiver: Receiver, redis_url: str
) -> None:
    adm = rt.dispatcher.submit("held", "hello", key="k-1")
    first_request(receiver)  # the request is at the receiver, which has not answered
    kill(worker(fleet, "a"))
    lost_attempt(rt, adm.task.id)
    receiver.answer.set()  # too late: its connection died with the worker
    sent_once_more_then_never(rt, fleet, receiver, redis_url, adm.task.id)


def test_killed_after_the_receiver_answered_200_before_sent_is_stored(
    rt: Runtime, fleet: Fleet, receiver: Receiver, redis_url: str, pg_url: str
) -> None:
    with Blocker(pg_url) as pg:
        adm = rt.dispatcher.submit("held", "hello", key="k-2")
        first_request(receiver)
        (rec,) = rt.store.task_deliveries(adm.task.id)
        # Hold the delivery's row: the worker's write of the outcome will wait for it.
        pg.hold("SELECT id FROM deliveries WHERE id = :id FOR UPDATE", {"id": rec.id})
        receiver.answer.set()  # the receiver answers 200 now
        blocked = pg.waiting("UPDATE deliveries", 30, "the worker to store the 200 it got")
        held = (f"/held/{adm.task.id}", 200)
        wait_for(lambda: receiver.answered == [held], 5, what="the receiver's 200")
        kill(worker(fleet, "a"))
        pg.release()
        pg.ended(blocked)
    lost_attempt(rt, adm.task.id)  # the 200 was never stored: ``sent`` died with the worker
    sent_once_more_then_never(rt, fleet, receiver, redis_url, adm.task.id)
