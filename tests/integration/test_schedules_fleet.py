"""Two beats, one killed: every tick of an ``every = "2s"`` schedule fires exactly once.

Real PostgreSQL and Redis, two real ``fleet beat`` processes; one is killed with SIGKILL while
ticks keep coming. Each tick's task is found by its labels: none doubled, none lost, from the
schedule's first tick to its last while a beat ran.
"""

from __future__ import annotations

import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from fleet.config.schedules import ScheduleSpec
from fleet.domain.schedules import tick_text
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

# wall-clock bound (a tick every 2 s): `make test` runs it alone
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180), pytest.mark.serial, pytest.mark.core]

EVERY_S = 2.0


@pytest.fixture
def config(tmp_path: Path) -> Path:
    root = write_config(
        tmp_path / "config",
        agents={"echo": 'model = "echo"\n'},
        deployments={"chat": 'agent = "echo"\n'},
    )
    (root / "schedules").mkdir()
    # queue: every tick is admitted whatever its predecessor's state (no workers run here)
    (root / "schedules" / "pulse.toml").write_text(
        'deployment = "chat"\nevery = "2s"\ninput = "pulse"\noverlap = "queue"\n'
    )
    return root


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(tmp_path, pg_url, redis_url, config, sweep_interval=1.0)


def ticks(rt: Runtime) -> list[str]:
    """The ``tick`` label of every task of schedule ``pulse``."""
    with rt.store.read() as conn:
        labels = conn.execute(select(s.tasks.c.labels)).scalars().all()
    return [lb["tick"] for lb in labels if lb.get("schedule") == "pulse"]


def test_two_beats_one_killed_every_tick_fires_exactly_once(rt: Runtime, fleet: Fleet) -> None:
    # beat a alone first (so the beat killed is one that was firing), then both
    a = fleet.beat("beat-a")
    a.wait_log(r"fleet schedules started: 1 from config/schedules")
    wait_for(lambda: len(ticks(rt)) >= 2, 30, what="two ticks fired by beat a")
    b = fleet.beat("beat-b")
    b.wait_log(r"fleet schedules started: 1 from config/schedules")
    both_from = len(ticks(rt))
    wait_for(lambda: len(ticks(rt)) >= both_from + 2, 30, what="two ticks with both beats up")

    a.signal(signal.SIGKILL)
    a.popen.wait(10)
    killed_at = datetime.now(UTC)
    after_kill = killed_at + timedelta(seconds=4 * EVERY_S)
    wait_for(
        lambda: any(t > tick_text(after_kill) for t in ticks(rt)),
        40,
        what="four more ticks fired by the beat left",
    )
    b.stop()

    fired = ticks(rt)
    doubled = {t: n for t, n in Counter(fired).items() if n > 1}
    assert not doubled, f"ticks fired more than once: {doubled}"
    row = rt.store.list_schedules()[0]
    spec = ScheduleSpec.model_validate(row.spec)
    # every tick from the first after the schedule was created to the last one fired
    expected, tick = [], spec.next_tick(row.created_at)
    last = max(fired)
    while tick is not None and tick_text(tick) <= last:
        expected.append(tick_text(tick))
        tick = spec.next_tick(tick)
    assert sorted(fired) == expected, "a tick was lost (or one fired that is not a tick)"
    assert any(t > tick_text(killed_at) for t in fired)
    assert row.fired == len(fired) and row.state == "fired"
    assert row.last_tick is not None and tick_text(row.last_tick) == last
