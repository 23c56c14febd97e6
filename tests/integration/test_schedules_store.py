"""The schedule loop on each store (SQLite and PostgreSQL), on a clock the test turns: ticks
once each across beats, a claimed tick whose beat died, overlap, catch-up, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet.config import Settings, load_config
from fleet.dispatch.schedules import Scheduler
from fleet.domain.schedules import tick_text
from fleet.runtime import Runtime, build
from fleet.store import TaskFilter
from tests.conftest import write_config

START = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def turn(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _config(root: Path, schedules: dict[str, str]) -> Path:
    write_config(root)
    (root / "schedules").mkdir(exist_ok=True)
    for name, body in schedules.items():
        (root / "schedules" / f"{name}.toml").write_text(body)
    return root


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _runtime(tmp_path: Path, db_url: str, config: Path, clock: Clock) -> Runtime:
    rt = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    rt.dispatcher.clock = clock
    return rt


@pytest.fixture
def rt(tmp_path: Path, db_url: str, clock: Clock) -> Iterator[Runtime]:
    config = _config(
        tmp_path / "config",
        {
            "pulse": 'deployment = "chat"\nevery = "10s"\ninput = "pulse"\noverlap = "queue"\n',
            "daily": 'deployment = "chat"\ncron = "0 * * * *"\ninput = "hourly"\n'
            'conversation = "digest"\ncatch_up = "none"\n',
        },
    )
    runtime = _runtime(tmp_path, db_url, config, clock)
    yield runtime
    runtime.close()


def ticks(rt: Runtime, name: str) -> list[str]:
    found = rt.store.list_tasks(TaskFilter(limit=1000))
    return sorted(t.labels["tick"] for t in found if t.labels.get("schedule") == name)


def test_two_schedulers_fire_each_tick_once(rt: Runtime, clock: Clock) -> None:
    one, two = Scheduler(rt.dispatcher), Scheduler(rt.dispatcher)
    assert one.sync() == 2 and two.sync() == 2
    assert len(rt.store.list_schedules()) == 2
    for _ in range(6):
        clock.turn(5)
        one.run_pass()
        two.run_pass()
    assert ticks(rt, "pulse") == [tick_text(START + timedelta(seconds=s)) for s in (10, 20, 30)]
    row = rt.store.schedule("default", "api", "pulse")
    assert row is not None and row.fired == 3 and row.state == "fired"
    assert row.next_tick == START + timedelta(seconds=40)


def test_a_tick_claimed_by_a_beat_that_died_is_fired_by_the_next(rt: Runtime, clock: Clock) -> None:
    beat = Scheduler(rt.dispatcher)
    beat.sync()
    clock.turn(10)
    row = rt.store.schedule("default", "api", "pulse")
    assert row is not None
    tick = START + timedelta(seconds=10)
    # a beat claimed the tick, then was killed before its task was admitted
    assert rt.store.claim_tick(row, tick, "firing", tick + timedelta(seconds=10), clock())
    assert not rt.store.claim_tick(row, tick, "firing", None, clock())  # claimed once
    Scheduler(rt.dispatcher).run_pass()
    assert ticks(rt, "pulse") == [tick_text(tick)]
    # killed after the admission, before recording it: submitted again, the same task
    clock.turn(10)
    row = rt.store.schedule("default", "api", "pulse")
    assert row is not None and row.state == "fired"
    second = tick + timedelta(seconds=10)
    assert rt.store.claim_tick(row, second, "firing", None, clock())
    task = rt.dispatcher.submit(
        "chat",
        "pulse",
        labels={"schedule": "pulse", "tick": tick_text(second)},
        idempotency_key=f"schedule:pulse:{tick_text(second)}",
    ).task
    beat.run_pass()
    row = rt.store.schedule("default", "api", "pulse")
    assert row is not None and row.state == "fired" and row.last_task_id == task.id
    assert ticks(rt, "pulse") == [tick_text(tick), tick_text(second)]


def test_overlap_skip_waits_for_the_previous_task(rt: Runtime, clock: Clock) -> None:
    beat = Scheduler(rt.dispatcher)
    beat.sync()
    clock.turn(3600)
    beat.run_pass()
    assert ticks(rt, "daily") == ["2026-12-02T11:00:00Z"]
    clock.turn(3600)  # the 11:00 task is still queued (no worker): 12:00 is skipped
    beat.run_pass()
    row = rt.store.schedule("default", "api", "daily")
    assert row is not None and row.state == "skipped" and row.skipped == 1
    assert row.note is not None and "overlap" in row.note
    assert ticks(rt, "daily") == ["2026-12-02T11:00:00Z"]
    first = rt.store.get_task(row.last_task_id)  # type: ignore[arg-type]
    rt.dispatcher.cancel(first.id)
    clock.turn(3600)
    beat.run_pass()
    assert ticks(rt, "daily") == ["2026-12-02T11:00:00Z", "2026-12-02T13:00:00Z"]
    # the same conversation each tick
    keys = {
        t.key
        for t in rt.store.list_tasks(TaskFilter(limit=100))
        if t.labels.get("schedule") == "daily"
    }
    assert keys == {"digest"}


def test_catch_up_after_downtime(rt: Runtime, clock: Clock) -> None:
    beat = Scheduler(rt.dispatcher)
    beat.sync()
    clock.turn(3 * 3600 + 600)  # down three hours: 11:00 to 13:00 missed
    beat.run_pass()
    # pulse (catch_up = latest): the most recent missed tick only
    assert ticks(rt, "pulse") == ["2026-12-02T13:10:00Z"]
    # daily (catch_up = none): nothing until the next tick
    assert ticks(rt, "daily") == []
    row = rt.store.schedule("default", "api", "daily")
    assert row is not None and row.state == "skipped" and "missed" in (row.note or "")
    assert row.next_tick == datetime(2026, 12, 2, 14, tzinfo=UTC)


def test_a_refused_tick_is_recorded_and_the_next_fires(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    config = _config(
        tmp_path / "config",
        {"pulse": 'deployment = "chat"\nevery = "10s"\ninput = "x"\noverlap = "queue"\n'},
    )
    rt = _runtime(tmp_path, db_url, config, clock)
    try:
        beat = Scheduler(rt.dispatcher)
        beat.sync()
        # the deployment went away under the stored schedule
        rt.dispatcher.config = rt.config.model_copy(
            update={"deployments": {k: v for k, v in rt.config.deployments.items() if k != "chat"}}
        )
        clock.turn(10)
        beat.run_pass()
        row = rt.store.schedule("default", "api", "pulse")
        assert row is not None and row.state == "refused"
        assert "no deployment named 'chat'" in (row.note or "")
        rt.dispatcher.config = rt.config
        clock.turn(10)
        beat.run_pass()
        assert ticks(rt, "pulse") == ["2026-12-02T10:00:20Z"]
    finally:
        rt.close()


def test_sync_follows_the_files(tmp_path: Path, db_url: str, clock: Clock) -> None:
    first = _config(
        tmp_path / "a",
        {"pulse": 'deployment = "chat"\nevery = "10s"\ninput = "x"\n'},
    )
    rt = _runtime(tmp_path, db_url, first, clock)
    try:
        Scheduler(rt.dispatcher).sync()
        assert [r.name for r in rt.store.list_schedules()] == ["pulse"]
        # an API schedule stays; the file's settings change, then the file goes
        rt.store.create_schedule(
            tenant="default",
            scope="api",
            name="mine",
            source="api",
            caller=None,
            spec={"deployment": "chat", "every": 60.0, "input": "y"},
            next_tick=None,
            now=clock(),
        )
        second = _config(
            tmp_path / "b", {"pulse": 'deployment = "chat"\nevery = "20s"\ninput = "x"\n'}
        )
        rt.dispatcher.config = load_config(second)
        Scheduler(rt.dispatcher).sync()
        row = rt.store.schedule("default", "api", "pulse")
        assert row is not None and row.spec["every"] == 20.0
        assert row.next_tick == START + timedelta(seconds=20)
        rt.dispatcher.config = load_config(_config(tmp_path / "c", {}))
        Scheduler(rt.dispatcher).sync()
        assert [r.name for r in rt.store.list_schedules()] == ["mine"]
    finally:
        rt.close()


def test_a_row_this_version_cannot_read_stops_instead_of_spinning(
    rt: Runtime, clock: Clock
) -> None:
    beat = Scheduler(rt.dispatcher)
    beat.sync()
    made = rt.store.create_schedule(
        tenant="default",
        scope="api",
        name="odd",
        source="api",
        caller=None,
        spec={"deployment": "chat", "every": 10.0, "input": "x", "jitter": "5s"},
        next_tick=START + timedelta(seconds=10),
        now=clock(),
    )
    clock.turn(10)
    beat.run_pass()  # the others still fire
    assert ticks(rt, "pulse") == ["2026-12-02T10:00:10Z"]
    row = rt.store.schedule_by_id(made.id)
    assert row is not None and row.next_tick is None
    assert 0 < beat.wait_s() <= 0.5


def test_beside_a_newer_release_a_beat_leaves_what_it_does_not_know(
    tmp_path: Path, db_url: str, clock: Clock
) -> None:
    """While a newer release's process runs, a beat claims no tick of a schedule whose
    deployment its config lacks or whose settings it cannot read (the newer beat fires them),
    and its start deletes no file schedule its own files lack."""
    config = _config(
        tmp_path / "config",
        {"pulse": 'deployment = "chat"\nevery = "10s"\ninput = "x"\noverlap = "queue"\n'},
    )
    rt = _runtime(tmp_path, db_url, config, clock)
    try:
        Scheduler(rt.dispatcher).sync()
        rt.store.create_schedule(
            tenant="default",
            scope="api",
            name="future",
            source="api",
            caller=None,
            spec={"deployment": "chat", "every": 10.0, "input": "y", "jitter": "2s"},
            next_tick=START + timedelta(seconds=10),
            now=START,
        )
        newer = {"live": True}
        old = Scheduler(rt.dispatcher, newer=lambda: newer["live"])
        rt.dispatcher.config = rt.config.model_copy(  # this beat's config lacks the deployment
            update={"deployments": {k: v for k, v in rt.config.deployments.items() if k != "chat"}}
        )
        clock.turn(10)
        assert old.run_pass() == 0
        for name in ("pulse", "future"):
            row = rt.store.schedule("default", "api", name)
            assert row is not None and row.last_tick is None and row.note is None, name
            assert row.next_tick is not None, f"{name} was stopped"
        # its start with files that lack "pulse" keeps it while the newer release runs
        rt.dispatcher.config = rt.config.model_copy(update={"schedules": {}})
        old.sync()
        assert {r.name for r in rt.store.list_schedules()} == {"pulse", "future"}
        # alone again (the newer release gone), it acts as before: deletes, refuses, stops
        newer["live"] = False
        old.sync()
        assert {r.name for r in rt.store.list_schedules()} == {"future"}
        old.run_pass()
        row = rt.store.schedule("default", "api", "future")
        assert row is not None and row.next_tick is None
    finally:
        rt.close()
