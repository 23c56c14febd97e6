"""The lease heartbeat on real Redis: every lease a process holds is renewed in one batch a beat;
a lease another holder took (or that expired) is lost, and only that one."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import pytest
import redis

from fleet.dispatch.lease import LeaseHandle
from fleet.dispatch.leases.redis import RedisLease, lease_key
from tests.support.fleet import wait_for

pytestmark = pytest.mark.redis


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _held(lease: RedisLease, n: int) -> list[LeaseHandle]:
    handles = [lease.acquire(uuid.uuid4()) for _ in range(n)]
    assert all(h is not None for h in handles)
    return [h for h in handles if h is not None]


def test_renew_many_extends_the_held_and_refuses_one_another_holder_took(client: Any) -> None:
    lease = RedisLease(client, ttl_s=5.0)
    mine, taken = _held(lease, 2), _held(lease, 1)[0]
    client.set(lease_key(taken.conversation_id), "someone-else", px=5000)
    for h in mine:
        client.pexpire(lease_key(h.conversation_id), 1000)
    assert lease.renew_many([mine[0], taken, mine[1]]) == [True, False, True]
    assert all(client.pttl(lease_key(h.conversation_id)) > 4000 for h in mine)
    assert client.get(lease_key(taken.conversation_id)) == b"someone-else"
    assert lease.renew_many([]) == []


def test_the_heartbeat_keeps_hundreds_alive_past_their_ttl_and_loses_only_the_taken(
    client: Any,
) -> None:
    # a TTL of 3 s: a heartbeat stalled under a loaded machine's parallel suite still renews
    # in time (at 1 s, a stall past 0.7 s expired every lease and failed this test)
    lease = RedisLease(client, ttl_s=3.0)
    handles = _held(lease, 300)
    with ExitStack() as stack:
        for h in handles:
            stack.enter_context(lease.kept_alive(h))
        victim = handles[7]
        client.delete(lease_key(victim.conversation_id))
        client.set(lease_key(victim.conversation_id), "someone-else", px=60_000)
        wait_for(victim.lost.is_set, 5, what="the taken lease to be found lost")
        # three renewals later every other lease is still ours, never lost
        key = lease_key(handles[-1].conversation_id)
        for _ in range(3):  # its TTL (3 s) runs down past 2.4 s, then a renewal sets it back
            wait_for(lambda: 0 < client.pttl(key) < 2400, 10, what="the TTL to run down")
            wait_for(lambda: client.pttl(key) > 2700, 10, what="a renewal")
        assert all(
            client.get(lease_key(h.conversation_id)) == h.token.encode()
            for h in handles
            if h is not victim
        )
        assert [h for h in handles if h.lost.is_set()] == [victim]


def test_a_lease_released_while_its_renewal_was_on_the_way_is_not_lost(client: Any) -> None:
    """The heartbeat took the lease to renew; its holder's block ended and it released the
    lease before the renewal ran: the renewal fails, and the holder must not hear "lost" (a
    drain that thinks another worker holds the conversation wakes nobody for its next task)."""
    lease = RedisLease(client, ttl_s=1.0)
    (handle,) = _held(lease, 1)
    renewing, released = threading.Event(), threading.Event()
    batches: list[list[bool]] = []
    inner = lease.renew_many

    def slow_renew(handles: Sequence[LeaseHandle]) -> list[bool]:
        renewing.set()
        assert released.wait(5)
        result = inner(handles)
        batches.append(result)
        return result

    lease.renew_many = slow_renew  # type: ignore[method-assign]
    with lease.kept_alive(handle):
        assert renewing.wait(5), "the heartbeat began a renewal"
    lease.release(handle)
    released.set()
    wait_for(lambda: batches, 5, what="the renewal to run")
    assert batches == [[False]]
    assert not handle.lost.is_set()
