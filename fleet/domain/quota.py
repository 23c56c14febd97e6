"""Tenants' quotas and token budgets (pure): what is refused, what a run may still spend.

- ``max_queued_tasks``: tasks neither finished nor running a tenant may hold; a submission over
  it is refused (429) and stores nothing — from an API or A2A caller. Webhook deliveries and
  tasks made inside the fleet (delegation, results reported back) are never refused: a sender
  may not redeliver, and the fleet's own work must not fail half done; they are counted as over
  quota instead.
- ``submit_per_minute``: a generic cell rate (GCRA): a steady ``limit`` a minute with bursts of up
  to ``limit`` at once; a refusal says when the next one is allowed.
- ``tokens_per_day`` / ``tokens_per_task``: counted from the models' reported usage (the token
  ledger, a row per model step that was really made — a replayed step is not counted again).
  Before each model call a run asks; when spent it ends with a clear error, never mid-call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from fleet.domain.runs import TraceRow
from fleet.errors import FleetError

#: Sources whose submissions a tenant's quota may refuse (scope heads); others are never refused.
REFUSABLE = ("api", "a2a")


class QuotaExceeded(FleetError):
    """A tenant's quota or budget refuses the submission; nothing was stored."""

    status = 429
    title = "Quota exceeded"

    def __init__(self, message: str, *, quota: str, value: int, retry_after_s: float) -> None:
        super().__init__(message, field="tenant")
        self.quota = quota
        self.value = value
        self.retry_after_s = retry_after_s


def refusable(scope: str) -> bool:
    """May a tenant's quota refuse a submission from this scope (API and A2A callers)?"""
    return scope.partition(":")[0] in REFUSABLE


def next_reset(now: datetime) -> datetime:
    """When a day's budget starts again: the next 00:00 UTC."""
    today = now.astimezone(UTC).date()
    return datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)


def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def queued_refusal(tenant: str, queued: int, cap: int | None) -> QuotaExceeded | None:
    """The refusal of one more task beyond ``max_queued_tasks``, or None."""
    if cap is None or queued < cap:
        return None
    return QuotaExceeded(
        f"tenant {tenant!r} has {queued} tasks waiting: its quota max_queued_tasks is {cap}; "
        "try again once some have started",
        quota="max_queued_tasks",
        value=cap,
        retry_after_s=5.0,
    )


@dataclass(frozen=True, slots=True)
class Rate:
    """A GCRA decision: allowed or not, the cell's new theoretical arrival time, and (refused)
    how long until the next submission is allowed."""

    allowed: bool
    tat: float
    retry_after_s: float = 0.0


def gcra(tat: float | None, now: float, per_minute: int) -> Rate:
    """Generic cell rate algorithm for ``per_minute`` with a burst of as many: ``tat`` is the
    stored theoretical arrival time (None: none yet), ``now`` in seconds."""
    interval = 60.0 / per_minute
    burst = interval * (per_minute - 1)
    tat = now if tat is None or tat < now else tat
    if tat - now > burst:
        return Rate(False, tat, retry_after_s=tat - now - burst)
    return Rate(True, tat + interval)


def rate_refusal(tenant: str, per_minute: int, retry_after_s: float) -> QuotaExceeded:
    return QuotaExceeded(
        f"tenant {tenant!r} is over its quota submit_per_minute {per_minute}; "
        f"try again in {math.ceil(retry_after_s)}s",
        quota="submit_per_minute",
        value=per_minute,
        retry_after_s=retry_after_s,
    )


def budget_spent(
    tenant: str,
    *,
    day_used: int,
    per_day: int | None,
    task_used: int = 0,
    per_task: int | None = None,
    now: datetime,
) -> tuple[str, str, int, float] | None:
    """(message, budget, value, seconds until it resets) when a budget is spent, or None.

    The message is what a run ends with (``budget exhausted: tenant acme, tokens_per_day
    200000, resets 00:00 UTC``) and what a refused submission says."""
    if per_day is not None and day_used >= per_day:
        reset = next_reset(now)
        return (
            f"budget exhausted: tenant {tenant}, tokens_per_day {per_day}, resets "
            f"{reset:%H:%M} UTC",
            "tokens_per_day",
            per_day,
            (reset - now).total_seconds(),
        )
    if per_task is not None and task_used >= per_task:
        return (
            f"budget exhausted: tenant {tenant}, tokens_per_task {per_task} (this task used "
            f"{task_used})",
            "tokens_per_task",
            per_task,
            0.0,
        )
    return None


def ledger_rows(traces: Sequence[TraceRow]) -> list[tuple[int, date, int, int]]:
    """(step, UTC day, tokens, cost in micros) of the model steps in ``traces`` that were really
    made: a replayed step was counted when it was made. An unpriced step costs 0."""
    out = []
    for tr in traces:
        if tr.kind != "model" or tr.replayed:
            continue
        tokens = int(tr.usage.get("prompt_tokens", 0)) + int(tr.usage.get("completion_tokens", 0))
        if tokens > 0:
            cost = int(tr.usage.get("cost_micros", 0))
            out.append((tr.step, utc_day(tr.started_at), tokens, cost))
    return out
