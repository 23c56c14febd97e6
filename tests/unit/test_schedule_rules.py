"""Schedules' pure decisions, as tables: cron syntax, next ticks (DST included), catch-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from fleet.domain.schedules import (
    CronError,
    Fire,
    Skip,
    every,
    next_action,
    next_tick,
    overlap_allows,
    parse_cron,
    previous_tick,
    tick_text,
    zone,
)

UTC_ZONE = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@pytest.mark.parametrize(
    ("expr", "field", "values"),
    [
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("0 8-10 * * *", "hours", {8, 9, 10}),
        ("0 0 1,15 * *", "days", {1, 15}),
        ("0 0 * jan-mar *", "months", {1, 2, 3}),
        ("0 0 * * mon-fri", "weekdays", {1, 2, 3, 4, 5}),
        ("0 0 * * 5-7", "weekdays", {5, 6, 0}),
        ("0 0 * * 7", "weekdays", {0}),
        ("5-20/5 * * * *", "minutes", {5, 10, 15, 20}),
        ("10/20 * * * *", "minutes", {10, 30, 50}),
        ("@hourly", "minutes", {0}),
        ("@daily", "hours", {0}),
    ],
)
def test_cron_fields(expr: str, field: str, values: set[int]) -> None:
    assert getattr(parse_cron(expr), field) == values


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("0 8 * *", "has 4 fields; write 5"),
        ("0 8 * * 1-8", "day of week 8 is out of range 0-7"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 0 0 * *", "day of month 0 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("*/0 * * * *", "step '0' must be a whole number from 1"),
        ("0 5-2 * * *", "range '5-2' runs backwards"),
        ("0 0 * foo *", "month 'foo' is not a number from 1 to 12, or a name like jan"),
        ("x * * * *", "minute 'x' is not a number from 0 to 59"),
        ("0 0 30 2 *", "never fires"),
        ("1- * * * *", "is not a value or a range a-b"),
    ],
)
def test_cron_errors_name_the_field(expr: str, says: str) -> None:
    with pytest.raises(CronError, match=says.replace("(", r"\(").replace("*", r"\*")):
        parse_cron(expr)


@pytest.mark.parametrize(
    ("expr", "tz", "after", "ticks"),
    [
        # weekdays at 08:00 Berlin (UTC+1 in winter): Friday, then Monday
        (
            "0 8 * * 1-5",
            BERLIN,
            "2026-12-04T06:00:00Z",
            ["2026-12-04T07:00:00Z", "2026-12-07T07:00:00Z", "2026-12-08T07:00:00Z"],
        ),
        # spring forward (Berlin, 29 March 2026): 02:30 does not exist; it fires once at 03:30
        (
            "30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            ["2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"],
        ),
        # autumn (Berlin, 25 October 2026): 02:30 happens twice; a fixed time fires once
        (
            "30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        # an hourly cron fires in both passes of the repeated hour: one tick each real hour
        (
            "0 * * * *",
            BERLIN,
            "2026-10-24T23:30:00Z",
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T03:00:00Z",
            ],
        ),
        # every 30 minutes through New York's spring gap (8 March 2026, 02:00 -> 03:00)
        (
            "*/30 * * * *",
            NEW_YORK,
            "2026-03-08T06:30:00Z",
            ["2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:00:00Z"],
        ),
        # day of month OR day of week when both are restricted (cron's rule)
        (
            "0 0 13 * 5",
            UTC_ZONE,
            "2026-11-10T00:00:00Z",
            ["2026-11-13T00:00:00Z", "2026-11-20T00:00:00Z", "2026-11-27T00:00:00Z"],
        ),
        ("0 0 29 2 *", UTC_ZONE, "2026-01-01T00:00:00Z", ["2028-02-29T00:00:00Z"]),
    ],
)
def test_next_cron_ticks(expr: str, tz: ZoneInfo, after: str, ticks: list[str]) -> None:
    cron, found, t = parse_cron(expr), [], at(after)
    for _ in ticks:
        nxt = next_tick(cron, t, tz)
        assert nxt is not None
        found.append(tick_text(nxt))
        t = nxt
    assert found == ticks


@pytest.mark.parametrize(
    ("seconds", "after", "tick"),
    [
        (2, "2026-12-02T10:00:00Z", "2026-12-02T10:00:02Z"),
        (2, "2026-12-02T10:00:01.5Z", "2026-12-02T10:00:02Z"),
        (900, "2026-12-02T10:07:00Z", "2026-12-02T10:15:00Z"),
        (1.5, "2026-12-02T10:00:00Z", "2026-12-02T10:00:01.500Z"),
    ],
)
def test_every_ticks_are_multiples_since_the_epoch(seconds: float, after: str, tick: str) -> None:
    nxt = next_tick(every(seconds), at(after), BERLIN)
    assert nxt is not None and tick_text(nxt) == tick


def test_every_is_at_least_a_second_and_zones_are_named() -> None:
    with pytest.raises(ValueError, match="at least 1s"):
        every(0.5)
    with pytest.raises(ValueError, match="'Mars/Olympus' is not a time zone name"):
        zone("Mars/Olympus")


@pytest.mark.parametrize(
    ("timing", "now", "tick"),
    [
        (parse_cron("0 8 * * 1-5"), "2026-12-06T12:00:00Z", "2026-12-04T08:00:00Z"),
        (parse_cron("*/5 * * * *"), "2026-12-06T12:07:00Z", "2026-12-06T12:05:00Z"),
        (parse_cron("*/5 * * * *"), "2026-12-06T12:05:00Z", "2026-12-06T12:05:00Z"),
        (every(2), "2026-12-06T12:00:03Z", "2026-12-06T12:00:02Z"),
    ],
)
def test_previous_tick(timing: object, now: str, tick: str) -> None:
    found = previous_tick(timing, at(now), UTC_ZONE)  # type: ignore[arg-type]
    assert found is not None and tick_text(found) == tick


HOURLY = parse_cron("0 * * * *")


@pytest.mark.parametrize(
    ("timing", "since", "now", "catch_up", "end_at", "action"),
    [
        # nothing due yet
        (HOURLY, "10:00", "10:59", "latest", None, None),
        # on time (and a little late): the tick fires
        (HOURLY, "10:00", "11:00", "latest", None, Fire(at("2026-12-02T11:00:00Z"))),
        (HOURLY, "10:00", "11:00:59", "none", None, Fire(at("2026-12-02T11:00:00Z"))),
        # down for hours: latest fires the most recent missed tick, none skips them all
        (HOURLY, "10:00", "14:30", "latest", None, Fire(at("2026-12-02T14:00:00Z"))),
        (HOURLY, "10:00", "14:30", "none", None, Skip(at("2026-12-02T14:00:00Z"), "missed")),
        # down until just after a tick: latest fires that one alone, none skips it too
        (HOURLY, "10:00", "14:00:30", "latest", None, Fire(at("2026-12-02T14:00:00Z"))),
        (HOURLY, "10:00", "14:00:30", "none", None, Skip(at("2026-12-02T14:00:00Z"), "missed")),
        # every 2 s: a pass late by up to 10 intervals is no downtime: each tick, in order
        (every(2), "10:00", "10:00:15", "latest", None, Fire(at("2026-12-02T10:00:02Z"))),
        (every(2), "10:00", "10:00:15", "none", None, Fire(at("2026-12-02T10:00:02Z"))),
        (every(2), "10:00", "10:05:01", "latest", None, Fire(at("2026-12-02T10:05:00Z"))),
        (every(2), "10:00", "10:05:01", "none", None, Skip(at("2026-12-02T10:05:00Z"), "missed")),
        # ended: nothing at or after end_at
        (HOURLY, "10:00", "14:30", "latest", "12:00", Fire(at("2026-12-02T11:00:00Z"))),
        (HOURLY, "11:00", "14:30", "latest", "12:00", None),
    ],
)
def test_next_action(
    timing: object,
    since: str,
    now: str,
    catch_up: str,
    end_at: str | None,
    action: object,
) -> None:
    day = "2026-12-02T"
    found = next_action(
        timing,  # type: ignore[arg-type]
        UTC_ZONE,
        at(day + since + "Z"),
        at(day + now + "Z"),
        catch_up=catch_up,  # type: ignore[arg-type]
        end_at=None if end_at is None else at(day + end_at + "Z"),
    )
    assert found == action


@pytest.mark.parametrize(
    ("overlap", "unfinished", "allowed"),
    [("skip", True, False), ("skip", False, True), ("queue", True, True), ("queue", False, True)],
)
def test_overlap(overlap: str, unfinished: bool, allowed: bool) -> None:
    assert overlap_allows(overlap, unfinished) is allowed  # type: ignore[arg-type]


def test_tick_text_is_utc_iso() -> None:
    assert tick_text(at("2026-12-02T09:00:00+01:00")) == "2026-12-02T08:00:00Z"
    assert tick_text(at("2026-12-02T08:00:00Z") + timedelta(milliseconds=5)) == (
        "2026-12-02T08:00:00.005Z"
    )
