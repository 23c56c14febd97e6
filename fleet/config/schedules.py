"""``config/schedules``: a cron or an interval that submits a task to a deployment at each tick.

The same model checks a schedule created over the API (``CreateSchedule``) or the CLI, so a bad
value is refused with the same words everywhere: the key, the value and what to write instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import AwareDatetime, Field, field_validator, model_validator

from fleet.config.base import _NAME, Duration, _matching, _Strict
from fleet.domain import keys
from fleet.domain import schedules as rules
from fleet.errors import InputError

#: Longest ``input`` a schedule holds (the deployment's agent may allow less).
MAX_SCHEDULE_INPUT_CHARS = 16_384


class ScheduleSpec(_Strict):
    """What a schedule runs and when (a file's keys without its name and caller)."""

    deployment: str = Field(description="The deployment its tasks run on.")
    conversation: str | None = Field(
        default=None,
        description="The conversation key every tick's task continues (in the caller's scope); "
        "unset: a new conversation each tick.",
    )
    cron: str | None = Field(
        default=None,
        description="A 5-field cron expression (minute hour day-of-month month day-of-week: "
        "`0 8 * * 1-5`, `*/15 * * * *`; month and day names, `@daily`, `@hourly`...) read in "
        "`timezone`. Give `cron` or `every`.",
    )
    every: Duration | None = Field(
        default=None,
        description="A fixed interval (`15m`, `2s`, or seconds; at least 1s): ticks at whole "
        "multiples of it since the Unix epoch. Give `cron` or `every`.",
        json_schema_extra={"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
    )
    timezone: str = Field(
        default="UTC",
        description="The IANA time zone the cron's wall times are in (`Europe/Berlin`); DST "
        "handled: a time a spring gap skips fires right after it, one autumn repeats fires once.",
    )
    input: Annotated[str, Field(min_length=1, max_length=MAX_SCHEDULE_INPUT_CHARS)] = Field(
        description="The task's input text."
    )
    overlap: rules.Overlap = Field(
        default="skip",
        description="When the previous tick's task is not finished: `skip` this tick "
        "(recorded), or `queue` it behind (followup).",
    )
    catch_up: rules.CatchUp = Field(
        default="latest",
        description="After downtime (the oldest due tick late by more than a minute, or by 10 "
        "intervals of an `every`): `latest` fires the most recent missed tick alone, `none` "
        "skips them all and waits for the next.",
    )
    end_at: AwareDatetime | None = Field(
        default=None,
        description="No tick at or after this time fires (an ISO 8601 time with its offset).",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            rules.parse_cron(v)
        return v

    @field_validator("every")
    @classmethod
    def _every(cls, v: float | None) -> float | None:
        if v is not None:
            rules.every(v)
        return v

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        rules.zone(v)
        return v

    @field_validator("conversation")
    @classmethod
    def _conversation(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                keys.check_bare(v, v)
            except InputError as exc:
                raise ValueError(exc.message) from None
        return v

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleSpec:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give exactly one of cron = '0 8 * * 1-5' or every = '15m'")
        return self

    @property
    def timing(self) -> rules.Timing:
        if self.cron is not None:
            return rules.parse_cron(self.cron)
        assert self.every is not None
        return rules.every(self.every)

    @property
    def tz(self) -> ZoneInfo:
        return rules.zone(self.timezone)

    def next_tick(self, after: datetime) -> datetime | None:
        """The first tick after ``after`` (None once ``end_at`` is reached)."""
        tick = rules.next_tick(self.timing, after, self.tz)
        if tick is None or (self.end_at is not None and tick >= self.end_at):
            return None
        return tick

    def stored(self) -> dict[str, Any]:
        """As the store keeps it (JSON)."""
        return self.model_dump(mode="json")


class ScheduleConfig(ScheduleSpec):
    """``config/schedules/<name>.toml``: a schedule kept in config (``fleet schedules rm`` and
    DeleteSchedule refuse it: delete the file)."""

    name: Annotated[str, _matching(_NAME, "must be 1-63 lowercase letters, digits, '-' or '_'")]
    #: The configured caller whose tenant and scope its tasks take (required once callers are
    #: configured; without callers: the open API's, tenant ``default``, scope ``api``).
    caller: str | None = None

    @property
    def spec(self) -> ScheduleSpec:
        return ScheduleSpec.model_validate(self.model_dump(exclude={"name", "caller"}))


#: Where a schedule's settings came from: a file in ``config/schedules`` or the API/CLI.
Source = Literal["file", "api"]
