"""The sweeper loop's own rules: one sweep per interval among many, outages logged, prompt stop.

A few lines stand in for Redis's ``SET NX PX`` here; tests/integration/test_fleet.py runs real
`fleet beat` processes on a real Redis.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from fleet.constants import SWEEP_TICK_KEY
from fleet.dispatch.recovery import SweepReport
from fleet.dispatch.sweeper import Sweeper
from fleet.errors import Unavailable
from tests.support.fleet import wait_for


class Stub:
    """A dispatcher whose sweeps follow a script: a report to return or an error to raise."""

    def __init__(self, *script: SweepReport | Exception) -> None:
        self.script = list(script)
        self.calls = 0

    def sweep(self) -> SweepReport:
        self.calls += 1
        step = self.script.pop(0) if self.script else SweepReport(0, 0)
        if isinstance(step, Exception):
            raise step
        return step


class Keys:
    """``SET key value NX PX ms``, ``GET`` and ``PTTL`` of one Redis, or an outage of it."""

    def __init__(self, *, down: bool = False) -> None:
        self.down = down
        self.values: dict[str, tuple[bytes, float]] = {}

    def _live(self, key: str) -> tuple[bytes, float] | None:
        found = self.values.get(key)
        return found if found and found[1] > time.monotonic() else None

    def set(self, key: str, value: str, *, nx: bool = False, px: int) -> bool | None:
        if self.down:
            raise RedisConnectionError(
                "Error 111 connecting to 127.0.0.1:6379. Connection refused."
            )
        if nx and self._live(key):
            return None
        self.values[key] = (value.encode(), time.monotonic() + px / 1000)
        return True

    def get(self, key: str) -> bytes | None:
        found = self._live(key)
        return found[0] if found else None

    def pttl(self, key: str) -> int:
        found = self._live(key)
        return round((found[1] - time.monotonic()) * 1000) if found else -2


@pytest.fixture
def redis() -> Iterator[Keys]:
    yield Keys()


def test_of_several_sweepers_one_sweeps_per_interval(redis: Keys) -> None:
    a, b = Stub(), Stub()
    first, second = Sweeper(a, redis, 60), Sweeper(b, redis, 60)
    assert first.tick() == SweepReport(0, 0)
    assert second.tick() is None and first.tick() is None
    assert (a.calls, b.calls) == (1, 0)
    ttl = redis.pttl(SWEEP_TICK_KEY)
    assert 0.8 * 60_000 < ttl <= 0.9 * 60_000, "the tick must be gone by the next interval"
    assert redis.get(SWEEP_TICK_KEY) == first.name.encode()


def test_the_tick_expires_within_the_interval(redis: Keys) -> None:
    a, b = Stub(), Stub()
    first, second = Sweeper(a, redis, 0.05), Sweeper(b, redis, 0.05)
    assert first.tick() is not None
    wait_for(lambda: second.tick() is not None, 5, interval=0.01, what="the tick to expire")
    assert (a.calls, b.calls) == (1, 1)


@pytest.mark.parametrize(
    ("error", "logged"),
    [
        (Unavailable("database unavailable: connection refused"), "sweep skipped: database"),
        (RedisConnectionError("Error 111 connecting"), "sweep skipped: Redis unavailable"),
        (RuntimeError("a bug"), "sweep failed: RuntimeError: a bug"),
    ],
    ids=["database", "redis", "bug"],
)
def test_a_failing_sweep_logs_a_warning_and_the_loop_goes_on(
    redis: Keys,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    logged: str,
) -> None:
    stub = Stub(error, error, SweepReport(recovered=1, woken=2))
    sweeper = Sweeper(stub, redis, 0.01)
    stop = threading.Event()
    thread = threading.Thread(target=sweeper.run, args=(stop,))
    with caplog.at_level(logging.INFO, logger="fleet.dispatch.sweeper"):
        thread.start()
        try:
            wait_for(lambda: stub.calls >= 4, 10, interval=0.01, what="four sweeps")
        finally:
            stop.set()
            thread.join(10)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(w.startswith(logged) for w in warnings), warnings
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "sweep: recovered 1, woke 2" in infos
    assert infos[0].startswith("fleet sweeper started")
    # sweeps with nothing to report stay quiet
    assert sum(m.startswith("sweep:") for m in infos) == 1


def test_a_redis_outage_at_the_tick_is_a_warning_too(caplog: pytest.LogCaptureFixture) -> None:
    sweeper = Sweeper(Stub(), Keys(down=True), 1)
    with caplog.at_level(logging.WARNING, logger="fleet.dispatch.sweeper"):
        assert sweeper.tick_logged() is None
    assert caplog.records[0].getMessage().startswith("sweep skipped: Redis unavailable")


def test_stop_ends_the_wait_at_once(redis: Keys) -> None:
    stub = Stub()
    stop = threading.Event()
    thread = threading.Thread(target=Sweeper(stub, redis, 3600).run, args=(stop,))
    thread.start()
    wait_for(lambda: stub.calls == 1, 10, interval=0.01, what="the first sweep")
    stop.set()
    thread.join(5)  # an hour-long interval: only the event can end the wait this soon
    assert not thread.is_alive()
    assert stub.calls == 1


def test_the_loop_ends_when_its_parent_is_gone(redis: Keys) -> None:
    stub = Stub()
    Sweeper(stub, redis, 3600).run(threading.Event(), parent_pid=os.getppid() + 1_000_000)
    assert stub.calls == 0
