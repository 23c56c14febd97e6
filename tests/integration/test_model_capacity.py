"""Model capacity, one contract for both backends: in process (embedded) and in Redis (a fleet)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fleet.agents.capacity import Capacity, LocalCapacity
from fleet.dispatch.model_capacity import RedisCapacity
from fleet.domain.model_limits import CONCURRENCY_POLL_S, Limit

SLOW = Limit("openai:*", requests_per_minute=6, burst=2)  # one every 10 s, 2 at once
FAST = Limit("openai:gpt-4o*", requests_per_minute=6000)
ONE = Limit("anthropic:*", max_concurrent=1)
TOKENS = Limit("tok:*", tokens_per_minute=60)  # one a second, a bucket of 1 s


@pytest.fixture(params=["local", "redis"])
def capacity(request: pytest.FixtureRequest) -> Iterator[Capacity]:
    if request.param == "local":
        yield LocalCapacity()
        return
    import redis

    client: Any = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    yield RedisCapacity(client)
    client.close()


def test_a_burst_then_a_wait_naming_the_limit(capacity: Capacity) -> None:
    assert capacity.acquire((SLOW,), 0, "a", 60) is None
    assert capacity.acquire((SLOW,), 0, "b", 60) is None
    wait = capacity.acquire((SLOW,), 0, "c", 60)
    assert wait is not None and (wait.limit, wait.reason) == ("openai:*", "requests")
    assert 9.0 < wait.seconds <= 10.0


def test_all_or_nothing(capacity: Capacity) -> None:
    for grant in ("a", "b"):
        assert capacity.acquire((SLOW,), 0, grant, 60) is None
    # FAST has room, SLOW has none: the call waits, and takes nothing of FAST
    assert capacity.acquire((FAST, SLOW), 0, "c", 60) is not None
    for i in range(100):  # FAST's whole bucket is still there
        assert capacity.acquire((FAST,), 0, f"f{i}", 60) is None


def test_a_cooldown_holds_its_limits_only(capacity: Capacity) -> None:
    capacity.cool((FAST,), 5.0)
    wait = capacity.acquire((FAST,), 0, "a", 60)
    assert wait is not None and wait.reason == "cooldown" and 4.0 < wait.seconds <= 5.0
    assert capacity.acquire((ONE,), 0, "b", 60) is None
    capacity.cool((FAST,), 1.0)  # a shorter one does not shorten it
    wait = capacity.acquire((FAST,), 0, "a", 60)
    assert wait is not None and wait.seconds > 4.0


def test_calls_in_flight_and_their_release(capacity: Capacity) -> None:
    assert capacity.acquire((ONE,), 0, "a", 60) is None
    wait = capacity.acquire((ONE,), 0, "b", 60)
    assert wait is not None and (wait.reason, wait.seconds) == ("concurrency", CONCURRENCY_POLL_S)
    capacity.release((ONE,), "a", 0)
    assert capacity.acquire((ONE,), 0, "b", 60) is None


def test_tokens_corrected_by_the_reported_usage(capacity: Capacity) -> None:
    assert capacity.acquire((TOKENS,), 1, "a", 60) is None
    capacity.release((TOKENS,), "a", 4)  # it used 5, not 1: 4 more owed
    wait = capacity.acquire((TOKENS,), 1, "b", 60)
    assert wait is not None and wait.reason == "tokens" and 4.0 < wait.seconds <= 5.0
