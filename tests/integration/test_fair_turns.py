"""The fair queue's scripts on a real Redis: the same turns as the pure rules give, tokens for
what became due, holds that come back when their worker died and not while a run holds the
lease."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fleet.dispatch.celery_app import CeleryWaker, make_app
from fleet.dispatch.fair import Due, FairTurns
from fleet.dispatch.leases.redis import RedisLease
from fleet.dispatch.publish import WakeMessages
from fleet.dispatch.turns import take_turns
from fleet.dispatch.waker import Wake
from fleet.domain.fairness import FairQueue, Turn

pytestmark = pytest.mark.redis

QUEUE = "fleet-fair-test"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def turns(redis_url: str, client: Any) -> FairTurns:
    return FairTurns(client, QUEUE, WakeMessages(make_app(redis_url), QUEUE).turn_template())


def _tokens(client: Any) -> list[dict[str, Any]]:
    return [json.loads(m) for m in client.lrange(QUEUE, 0, -1)]


def test_the_scripts_give_the_turns_the_pure_rules_give(turns: FairTurns) -> None:
    rng = random.Random(7)
    weights = {"a": 1, "b": 3, "c": 1}
    caps: dict[str, int | None] = {"c": 2}
    pure = FairQueue()
    pure.configure(weights, caps)
    turns.configure(weights, caps)
    running: list[Turn] = []
    got_redis, got_pure = [], []
    for step in range(600):
        if rng.random() < 0.55:
            number = rng.randrange(1, 120)
            tenant = "abc"[number % 3]  # a conversation is one tenant's
            turn = Turn(uuid.UUID(int=number), tenant, rng.choice([0, 5, 5, 9]))
            due = Due(
                turn.conversation_id, tenant, turn.priority, weights[tenant], caps.get(tenant) or 0
            )
            assert bool(turns.add([(due, False)])[0]) == pure.add(turn), step
        else:
            done = running.pop(0) if running and rng.random() < 0.6 else None
            if done is not None:
                pure.done(done.conversation_id)
            a, b = turns.pick(done, now_ms=1_000), pure.pick()
            got_redis.append(a)
            got_pure.append(b)
            assert a == b, step
            if a is not None:
                running.append(a)
    assert sum(t is not None for t in got_pure) > 100


def test_a_token_goes_out_per_conversation_that_became_due_and_forced_when_none_waits(
    turns: FairTurns, client: Any
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert turns.add(
        [(Due(a, "t", 5), False), (Due(a, "t", 5), False), (Due(b, "t", 5), False)]
    ) == [1, 0, 1]
    tokens = _tokens(client)
    assert len(tokens) == 2 and {t["headers"]["task"] for t in tokens} == {"fleet.turn"}
    turns.add([(Due(a, "t", 5), True)])  # forced while tokens wait: no token, no second entry
    assert len(_tokens(client)) == 2
    client.delete(QUEUE)  # the tokens were lost (a worker killed with them in hand)
    turns.add([(Due(a, "t", 5), True)])  # the sweeper's forced look: one token again
    client.lpush(QUEUE, *(json.dumps(t) for t in tokens))
    tokens = _tokens(client)
    ids = [t["headers"]["id"] for t in tokens]
    tags = [t["properties"]["delivery_tag"] for t in tokens]
    assert len(tokens) == 3 and len(set(ids)) == 3 and ids == tags  # each its own unique ids
    picked = {turns.pick(now_ms=1_000), turns.pick(now_ms=1_000), turns.pick(now_ms=1_000)}
    assert {p.conversation_id for p in picked if p} == {a, b} and None in picked


def test_a_hold_whose_worker_died_comes_back_but_not_while_its_lease_is_held(
    redis_url: str, turns: FairTurns, client: Any
) -> None:
    lease = RedisLease(client, ttl_s=30)
    dead, alive = uuid.uuid4(), uuid.uuid4()
    turns.add([(Due(dead, "t", 5), False), (Due(alive, "t", 5), False)])
    first = turns.pick(now_ms=1_000, hold_s=10)
    second = turns.pick(now_ms=1_000, hold_s=10)
    assert {first.conversation_id, second.conversation_id} == {dead, alive}  # type: ignore[union-attr]
    assert lease.acquire(alive) is not None  # alive's drain goes on; dead's worker is gone
    client.delete(QUEUE)
    assert turns.pick(now_ms=5_000, hold_s=10) is None  # holds not expired yet
    (reaper,) = _tokens(client)  # a token for when they will have: nothing goes unseen
    assert reaper["headers"]["eta"] is not None
    assert turns.pick(now_ms=6_000, hold_s=10) is None and len(_tokens(client)) == 1  # one
    client.delete(QUEUE)
    # expired: dead is put back (and this pick takes it anew), alive is renewed
    back = turns.pick(now_ms=12_000, hold_s=10)
    assert back is not None and back.conversation_id == dead
    assert len(_tokens(client)) == 1  # with a token for whoever takes the turn
    kept = first if first.conversation_id == alive else second  # type: ignore[union-attr]
    assert client.zscore(turns.prefix + "inflight", kept.hold) == 22_000  # type: ignore[union-attr]
    running = client.hget(turns.prefix + "running", "t")
    assert running == b"2"  # dead's old hold ended; its new turn and alive's run
    turns.pick(back, take=False)
    turns.pick(kept, take=False)
    assert client.hget(turns.prefix + "running", "t") is None


def test_the_waker_adds_a_tenants_turns_and_knocks_for_a_held_conversation(
    redis_url: str, client: Any
) -> None:
    app = make_app(redis_url)
    lease = RedisLease(client, ttl_s=30)
    waker = CeleryWaker(
        app, lease, queue=QUEUE, tenants=lambda t: (3, 0) if t == "acme" else (1, 0)
    )
    assert waker.direct is not None and waker.turns is not None
    a, b, held = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert lease.acquire(held) is not None
    waker.wake_many(
        [
            Wake(a, tenant="acme", priority=9),
            Wake(a, tenant="acme"),
            Wake(b),
            Wake(held, tenant="acme"),
        ]
    )
    assert len(_tokens(client)) == 2  # a once (the second was not needed), b; held knocked
    assert client.hget(waker.turns.prefix + "weight", "acme") == b"3"
    picked = [waker.turns.pick(now_ms=1_000), waker.turns.pick(now_ms=1_000)]
    assert {(p.conversation_id, p.tenant, p.priority) for p in picked if p} == {
        (a, "acme", 9),
        (b, "default", 5),
    }


def test_a_stopping_worker_passes_its_turn_on_due_a_moment_later(
    turns: FairTurns, client: Any
) -> None:
    a = uuid.uuid4()
    turns.add([(Due(a, "t", 5), False)])
    client.delete(QUEUE)  # its token reached a worker on its way out
    drained: list[Turn] = []
    ran = take_turns(turns, lambda t: drained.append(t) or 1, budget_s=5, stopping=lambda: True)
    assert ran == 0 and drained == [], "a stopping worker takes no turn"
    (token,) = _tokens(client)
    assert token["headers"]["task"] == "fleet.turn" and token["headers"]["eta"] is not None
    assert token["headers"]["id"] == token["properties"]["delivery_tag"]
    # the worker that takes it finds the conversation where it was
    assert take_turns(turns, lambda t: drained.append(t) or 1, budget_s=5, stopping=lambda: False)
    assert [t.conversation_id for t in drained] == [a]
