"""Schedules' pure decisions: cron syntax, the next tick in a time zone (DST included), which
tick a beat acts on after downtime, and whether a tick may run beside its predecessor.

A tick is an instant (UTC). Cron ticks are wall-clock minutes in the schedule's time zone: a time
that a spring-forward gap skips fires once, right after the gap (02:30 → 03:30 in Berlin); a time
that autumn repeats fires once, the first time, unless the hour field is ``*`` (then every hour
of wall time fires, both passes of the repeated one). ``every`` ticks are whole multiples of the
interval since the Unix epoch: absolute time, no zone, so every beat computes the same ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

#: What a tick late by at most this much is (longer: missed, ``catch_up`` decides). Quartz's
#: misfire threshold; an ``every`` schedule allows at most ``MISFIRE_TICKS`` of its intervals.
MISFIRE_GRACE_S = 60.0
MISFIRE_TICKS = 10
#: The shortest ``every`` (whole milliseconds from there).
MIN_EVERY_S = 1.0
#: How far ahead a cron's next tick is looked for (Feb 29 on a Monday recurs within 28 years).
_MAX_DAYS = 366 * 29
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Overlap = Literal["skip", "queue"]
CatchUp = Literal["latest", "none"]

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = {
    3: {m: i for i, m in enumerate(_MONTH_NAMES, 1)},
    4: {d: i for i, d in enumerate(_DAY_NAMES)},
}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class CronError(ValueError):
    """A cron expression that is not valid; the message names the field and what to write."""


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression (minute hour day-of-month month day-of-week)."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    #: The day-of-month / day-of-week field starts with ``*`` (cron's rule: when both are
    #: restricted, a day matching either one fires).
    any_day: bool
    any_weekday: bool

    def day_matches(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        dom, dow = d.day in self.days, d.isoweekday() % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    @property
    def times(self) -> list[time]:
        return [time(h, m) for h in sorted(self.hours) for m in sorted(self.minutes)]


@dataclass(frozen=True)
class Every:
    """A fixed interval, in whole milliseconds."""

    ms: int

    @property
    def seconds(self) -> float:
        return self.ms / 1000


Timing = Cron | Every


def _number(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> int:
    value = names.get(text.lower()) if names else None
    if value is None:
        if not text.isdigit():
            known = f", or a name like {next(iter(names))}" if names else ""
            raise CronError(f"{name} {text!r} is not a number from {lo} to {hi}{known}")
        value = int(text)
    if not lo <= value <= hi:
        raise CronError(f"{name} {value} is out of range {lo}-{hi}")
    return value


def _field(text: str, index: int) -> frozenset[int]:
    name, lo, hi = _FIELDS[index]
    names = _NAMES.get(index, {})
    found: set[int] = set()
    for part in text.split(","):
        body, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(f"{name} step {step_text!r} must be a whole number from 1")
            step = int(step_text)
        if body == "*":
            start, end = lo, hi
        else:
            a, dash, b = body.partition("-")
            if not a or (dash and not b):
                raise CronError(f"{name} field {text!r}: {part!r} is not a value or a range a-b")
            start = _number(a, name, lo, hi, names)
            end = _number(b, name, lo, hi, names) if dash else (hi if slash else start)
            if end < start:
                raise CronError(f"{name} range {body!r} runs backwards")
        found.update(range(start, end + 1, step))
    if index == 4 and 7 in found:  # 7 is Sunday too
        found = (found - {7}) | {0}
    return frozenset(found)


def parse_cron(expr: str) -> Cron:
    """A cron expression (``0 8 * * 1-5``, ``*/15 * * * *``, ``@daily``); CronError names the
    field that is wrong."""
    text = _MACROS.get(expr.strip().lower(), expr)
    parts = text.split()
    if len(parts) != 5:
        raise CronError(
            f"cron {expr!r} has {len(parts)} fields; write 5: minute hour day-of-month month "
            "day-of-week (e.g. '0 8 * * 1-5')"
        )
    try:
        sets = [_field(p, i) for i, p in enumerate(parts)]
    except CronError as exc:
        raise CronError(f"cron {expr!r}: {exc}") from None
    minutes, hours, days, months, weekdays = sets
    cron = Cron(
        expr,
        minutes,
        hours,
        days,
        months,
        weekdays,
        any_day=parts[2].startswith("*"),
        any_weekday=parts[4].startswith("*"),
    )
    if next_tick(cron, _EPOCH.replace(year=2000), ZoneInfo("UTC")) is None:
        raise CronError(f"cron {expr!r} never fires (no such day)")
    return cron


def every(seconds: float) -> Every:
    """An interval of at least ``MIN_EVERY_S``; ValueError otherwise."""
    if seconds < MIN_EVERY_S:
        raise ValueError(f"must be at least {MIN_EVERY_S:g}s, got {seconds:g}s")
    return Every(round(seconds * 1000))


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``); ValueError naming it otherwise."""
    try:
        return ZoneInfo(name)
    except (ValueError, OSError, KeyError):
        raise ValueError(
            f"{name!r} is not a time zone name; use an IANA name like 'Europe/Berlin' or 'UTC'"
        ) from None


# -- ticks ------------------------------------------------------------------------------------


def next_tick(timing: Timing, after: datetime, tz: ZoneInfo) -> datetime | None:
    """The first tick strictly after ``after`` (UTC), or None if there is none ahead."""
    if isinstance(timing, Every):
        us = (after - _EPOCH) // timedelta(microseconds=1)
        step = timing.ms * 1000
        return _EPOCH + timedelta(microseconds=(us // step + 1) * step)
    local = after.astimezone(tz)
    day = local.date()
    # an earlier wall time of the first day may still lie ahead (autumn's repeated hour)
    floor = local.replace(tzinfo=None) - timedelta(hours=3)
    times = timing.times
    every_hour = len(timing.hours) == 24
    for _ in range(_MAX_DAYS):
        if timing.day_matches(day):
            best: datetime | None = None
            for t in times:
                wall = datetime.combine(day, t)
                if wall < floor:
                    continue
                first = wall.replace(tzinfo=tz).astimezone(UTC)
                second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
                found = [first]
                if first != second and second > first and every_hour:
                    found.append(second)  # a repeated hour: both passes of an hourly cron
                for instant in found:
                    if instant > after and (best is None or instant < best):
                        best = instant
                if first == second and first > after:
                    break  # an ordinary wall time: later ones are later instants
            if best is not None:
                return best
        day += timedelta(days=1)
        floor = datetime.min
    return None


def previous_tick(timing: Timing, at: datetime, tz: ZoneInfo) -> datetime | None:
    """The last tick at or before ``at`` (None if none within the cron's look-ahead span)."""
    if isinstance(timing, Every):
        us = (at - _EPOCH) // timedelta(microseconds=1)
        step = timing.ms * 1000
        return _EPOCH + timedelta(microseconds=(us // step) * step)
    for window in (timedelta(minutes=2), timedelta(hours=2), timedelta(days=2), None):
        start = at - window if window is not None else at - timedelta(days=_MAX_DAYS)
        tick = next_tick(timing, start - timedelta(microseconds=1), tz)
        if tick is None or tick > at:
            continue
        while (later := next_tick(timing, tick, tz)) is not None and later <= at:
            tick = later
        return tick
    return None


def grace(timing: Timing) -> timedelta:
    """How late a tick may fire and still count as on time."""
    if isinstance(timing, Every):
        return timedelta(seconds=min(MISFIRE_GRACE_S, MISFIRE_TICKS * timing.seconds))
    return timedelta(seconds=MISFIRE_GRACE_S)


# -- a stored schedule ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A schedule as the store holds it: its settings (``spec``, the config model's JSON) and
    where its ticks stand."""

    id: uuid.UUID
    tenant: str
    scope: str
    name: str
    #: ``file`` (config/schedules) or ``api``.
    source: str
    caller: str | None
    spec: dict[str, Any]
    #: The last tick acted on (None: none yet).
    last_tick: datetime | None
    #: ``new``, ``firing``, ``fired``, ``skipped`` or ``refused``.
    state: str
    last_task_id: uuid.UUID | None
    next_tick: datetime | None
    fired: int
    skipped: int
    note: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def since(self) -> datetime:
        """Ticks after this one are still to be acted on."""
        return self.last_tick or self.created_at


# -- what a beat does -------------------------------------------------------------------------


@dataclass(frozen=True)
class Fire:
    """Submit the task of ``tick`` (ticks before it that were never acted on are passed over)."""

    tick: datetime


@dataclass(frozen=True)
class Skip:
    """Record ``tick`` (and those before it) as skipped, for ``reason``: ``missed`` (downtime,
    ``catch_up``) or ``overlap`` (the previous tick's task is unfinished)."""

    tick: datetime
    reason: Literal["missed", "overlap"]


def next_action(
    timing: Timing,
    tz: ZoneInfo,
    since: datetime,
    now: datetime,
    *,
    catch_up: CatchUp,
    end_at: datetime | None = None,
) -> Fire | Skip | None:
    """What to do about the ticks after ``since`` (the last tick acted on) that are due by
    ``now``: nothing (None), fire the first, or pass over missed ones.

    While beats run, the first due tick is on time (late by at most ``grace``: a slow pass is
    no downtime) and fires; the next pass takes the next one, so each tick fires in order.
    When it is late by more, the beats were down: ``catch_up = "latest"`` fires the most recent
    due tick only, ``"none"`` skips them all and waits for the next. Ticks at or after
    ``end_at`` never fire.
    """
    limit = now if end_at is None else min(now, end_at - timedelta(microseconds=1))
    first = next_tick(timing, since, tz)
    if first is None or first > limit:
        return None
    if now - first <= grace(timing):
        return Fire(first)
    latest = previous_tick(timing, limit, tz)
    assert latest is not None and latest >= first
    return Fire(latest) if catch_up == "latest" else Skip(latest, "missed")


def overlap_allows(overlap: Overlap, previous_unfinished: bool) -> bool:
    """May a tick's task be admitted while the previous tick's is ``previous_unfinished``?"""
    return overlap == "queue" or not previous_unfinished


def tick_text(tick: datetime) -> str:
    """A tick as its idempotency key and label show it: UTC ISO 8601 (``2026-12-02T08:00:00Z``,
    milliseconds when it has them)."""
    utc = tick.astimezone(UTC)
    spec = "milliseconds" if utc.microsecond else "seconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"
