"""Wake-ups pushed straight onto Redis: the same message ``send_task`` writes, de-duplicated."""

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
from fleet.dispatch.publish import WakeMessages, redis_broker
from fleet.dispatch.waker import BackgroundWaker

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


def test_a_pushed_wake_up_is_the_message_send_task_writes(redis_url: str, client: Any) -> None:
    app = make_app(redis_url)
    assert redis_broker(app)
    conversation = uuid.uuid4()
    app.send_task("fleet.drain", args=[str(conversation)], queue=QUEUE)
    WakeMessages(app, QUEUE).push(client, [conversation])
    sent, pushed = _messages(client)

    assert _body(pushed) == _body(sent)
    assert _body(sent)[:2] == [[str(conversation)], {}]
    for key in ("content-encoding", "content-type"):
        assert pushed[key] == sent[key]
    unique = {"id", "root_id"}
    assert pushed["headers"].keys() == sent["headers"].keys()
    for key in sent["headers"].keys() - unique:
        assert pushed["headers"][key] == sent["headers"][key], key
    assert pushed["headers"]["id"] == pushed["headers"]["root_id"] != sent["headers"]["id"]
    unique = {"correlation_id", "delivery_tag"}
    assert pushed["properties"].keys() == sent["properties"].keys()
    for key in sent["properties"].keys() - unique:
        assert pushed["properties"][key] == sent["properties"][key], key
    assert pushed["properties"]["correlation_id"] == pushed["headers"]["id"]


def test_a_batch_is_de_duplicated_by_the_lease_and_forced_ones_always_go(
    redis_url: str, client: Any
) -> None:
    app = make_app(redis_url)
    lease = RedisLease(client, ttl_s=30)
    waker = CeleryWaker(app, lease, queue=QUEUE)
    a, b, held = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert lease.acquire(held) is not None
    waker.wake_many([(a, None, False), (a, None, False), (b, None, True), (b, None, True)])
    waker.wake_many([(held, None, False), (a, None, False)])
    woken = [_body(m)[0][0] for m in _messages(client)]
    # a once (the second and third were not needed), b twice (forced), held: knocked instead.
    assert woken == [str(a), str(b), str(b)]
    assert client.exists(knock_key(held))


def test_a_wake_up_not_yet_due_waits_in_celery_with_its_eta(redis_url: str, client: Any) -> None:
    app = make_app(redis_url)
    waker = CeleryWaker(app, RedisLease(client, ttl_s=30), queue=QUEUE)
    conversation = uuid.uuid4()
    at = datetime.now(UTC) + timedelta(minutes=5)
    waker.wake(conversation, at)
    (message,) = _messages(client)
    assert message["headers"]["eta"] is not None
    assert datetime.fromisoformat(message["headers"]["eta"]) == at


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
    assert [_body(m)[0][0] for m in messages if m["headers"]["eta"] is None] == [
        str(a),
        str(b),
        str(b),
    ]
    (delayed,) = [m for m in messages if m["headers"]["eta"] is not None]
    assert _body(delayed)[0][0] == str(later)
    assert client.exists(knock_key(held))
    assert not lease.wake_needed(a)  # the mark the publish left is there
