"""Wake-ups pushed straight onto Redis: turn tokens written as ``send_task`` writes them,
de-duplicated by the lease and the fair queue; delayed ones wait in Celery with their ETA."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from fleet.dispatch.celery_app import CeleryWaker, make_app
from fleet.dispatch.leases.redis import RedisLease, knock_key
from fleet.dispatch.loop_waker import LoopWaker
from fleet.dispatch.publish import ID_MARK, WakeMessages, redis_broker
from fleet.dispatch.waker import BackgroundWaker, Wake

pytestmark = pytest.mark.redis

QUEUE = "fleet-publish-test"


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _messages(client: Any) -> list[dict[str, Any]]:
    # Workers pop from the right: oldest first.
    return [json.loads(m) for m in reversed(client.lrange(QUEUE, 0, -1))]


def _body(message: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(message["body"]))


def _due(waker: CeleryWaker) -> set[str]:
    """The conversations due in the fair queue, whoever's turn they are."""
    assert waker.turns is not None
    prefix = waker.turns.prefix
    client = waker._redis
    out: set[str] = set()
    for key in client.scan_iter(prefix + "t:*"):
        out |= {m.decode() for m in client.zrange(key, 0, -1)}
    return out


def test_a_turn_token_is_the_message_send_task_writes(redis_url: str, client: Any) -> None:
    app = make_app(redis_url)
    assert redis_broker(app)
    app.send_task("fleet.turn", queue=QUEUE)
    template = WakeMessages(app, QUEUE).turn_template()
    client.lpush(QUEUE, template.replace(ID_MARK, "id-1"))
    sent, pushed = _messages(client)

    assert _body(pushed) == _body(sent) and _body(sent)[:2] == [[], {}]
    for key in ("content-encoding", "content-type"):
        assert pushed[key] == sent[key]
    unique = {"id", "root_id"}
    assert pushed["headers"].keys() == sent["headers"].keys()
    for key in sent["headers"].keys() - unique:
        assert pushed["headers"][key] == sent["headers"][key], key
    assert pushed["headers"]["id"] == pushed["headers"]["root_id"] == "id-1"
    unique = {"correlation_id", "delivery_tag"}
    assert pushed["properties"].keys() == sent["properties"].keys()
    for key in sent["properties"].keys() - unique:
        assert pushed["properties"][key] == sent["properties"][key], key
    assert pushed["properties"]["correlation_id"] == pushed["properties"]["delivery_tag"] == "id-1"


def test_a_batch_is_de_duplicated_by_the_lease_and_forced_ones_always_go(
    redis_url: str, client: Any
) -> None:
    app = make_app(redis_url)
    lease = RedisLease(client, ttl_s=30)
    waker = CeleryWaker(app, lease, queue=QUEUE)
    a, b, held = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert lease.acquire(held) is not None
    waker.wake_many([Wake(a), Wake(a), Wake(b, force=True), Wake(b, force=True)])
    waker.wake_many([Wake(held), Wake(a)])
    # a once (the second and third were not needed), b twice (forced: a token each, one entry),
    # held: knocked instead
    assert len(_messages(client)) == 3
    assert {m["headers"]["task"] for m in _messages(client)} == {"fleet.turn"}
    assert _due(waker) == {str(a), str(b)}
    assert client.exists(knock_key(held))


def test_a_wake_up_not_yet_due_waits_in_celery_with_its_eta(redis_url: str, client: Any) -> None:
    app = make_app(redis_url)
    waker = CeleryWaker(app, RedisLease(client, ttl_s=30), queue=QUEUE)
    conversation = uuid.uuid4()
    at = datetime.now(UTC) + timedelta(minutes=5)
    waker.wake(conversation, at, tenant="acme", priority=7)
    (message,) = _messages(client)
    assert message["headers"]["task"] == "fleet.drain"
    assert datetime.fromisoformat(message["headers"]["eta"]) == at
    assert _body(message)[0] == [str(conversation), "acme", 7]  # whose turn, when it is due
    assert _due(waker) == set()


def test_a_broker_outage_forgets_the_marks_so_the_next_admission_tries_again(
    redis_url: str, client: Any
) -> None:
    app = make_app(redis_url)
    lease = RedisLease(client, ttl_s=30)
    waker = CeleryWaker(app, lease, queue=QUEUE)
    waker._redis = redis.Redis(port=1, socket_connect_timeout=0.2)  # the broker is down
    conversation = uuid.uuid4()
    waker.wake(conversation)  # logged, not raised
    assert lease.wake_needed(conversation)  # the mark the failed attempt set is gone


def test_the_event_loop_publisher_de_duplicates_like_the_waker_and_sends_etas_through_celery(
    redis_url: str, client: Any
) -> None:
    app = make_app(redis_url)
    lease = RedisLease(client, ttl_s=30)
    inner = CeleryWaker(app, lease, queue=QUEUE)
    assert inner.direct is not None  # broker and lease on one Redis: one script per batch
    a, b, held, later = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert lease.acquire(held) is not None
    at = datetime.now(UTC) + timedelta(minutes=5)
    background = BackgroundWaker(inner)

    async def main() -> None:
        waker = LoopWaker(background, asyncio.get_running_loop(), inner.direct)
        for c, force in ((a, False), (a, False), (b, True), (b, True), (held, False)):
            waker.wake(c, force=force)
        waker.wake(later, at)
        await waker.close()

    asyncio.run(main())
    background.close()
    messages = _messages(client)
    assert [m["headers"]["task"] for m in messages if m["headers"]["eta"] is None] == [
        "fleet.turn"
    ] * 3
    (delayed,) = [m for m in messages if m["headers"]["eta"] is not None]
    assert _body(delayed)[0][0] == str(later)
    assert _due(inner) == {str(a), str(b)}
    assert client.exists(knock_key(held))
    assert not lease.wake_needed(a)  # the mark the publish left is there
