"""Provider errors sorted, not guessed (pure): wait, switch or fail.

- ``wait``: the provider is rate limiting this account (429) or is overloaded (Anthropic's 529,
  ``overloaded_error``). Every call of the limits that match this model pauses for the
  Retry-After the provider sent (or a backoff when it sent none: a shared cooldown), then the
  call tries again.
- ``switch``: the provider failed this attempt (5xx, 408, 409, a timeout, a refused or reset
  connection). The call tries again after a backoff of its own; once its retries are spent the
  step tries the next model of ``fallbacks``.
- ``fail``: the request itself is wrong (any other 4xx: bad request, authentication, permission,
  not found, too large) or the account's quota is spent (``insufficient_quota``). Trying again,
  or another model, would not help: the step fails at once.

Both official SDKs raise one hierarchy (timeout, connection error, status error with the
response); ``fleet.agents.models.sdk`` reads them into :func:`classify`'s arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

Action = Literal["wait", "switch", "fail"]

#: Statuses a later attempt may get past that are no rate limit: a timeout, a lock conflict.
_TRANSIENT_4XX = frozenset({408, 409})
#: Anthropic's "overloaded" status; ``overloaded_error`` is its error type.
OVERLOADED = 529
#: Error types and codes that mean the account cannot call at all until someone acts.
_QUOTA_SPENT = frozenset({"insufficient_quota", "billing_error"})
#: Longest Retry-After fleet honours (a larger one is taken as this: a step never sleeps for
#: hours because a header said so).
MAX_RETRY_AFTER_S = 300.0
#: Backoff of a wait without Retry-After, and of a switch: the first retry's, doubled each
#: attempt up to the maximum.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do about one failed call, and why (for the error text)."""

    action: Action
    reason: str
    #: What the provider asked for (Retry-After, ``retry-after-ms``), in seconds; None: nothing.
    retry_after_s: float | None = None


def classify(
    *,
    status: int | None = None,
    timeout: bool = False,
    connection: bool = False,
    error_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> Verdict:
    """The verdict on a failed call: ``status`` of the answer (None: no answer), ``timeout`` /
    ``connection`` when none came, the body's ``error.type`` or ``error.code``, its headers."""
    if timeout:
        return Verdict("switch", "timed out")
    if connection:
        return Verdict("switch", "connection failed")
    if status is None:
        return Verdict("fail", "the request failed")
    if error_type in _QUOTA_SPENT:
        return Verdict("fail", f"HTTP {status} {error_type}: the account's quota is spent")
    after = retry_after(headers or {}, now or datetime.now(UTC))
    if status == 429:
        return Verdict("wait", "HTTP 429 rate limited", after)
    if status == OVERLOADED or error_type == "overloaded_error":
        return Verdict("wait", f"HTTP {status} overloaded", after)
    if status in _TRANSIENT_4XX or status >= 500:
        return Verdict("switch", f"HTTP {status}", after)
    if status >= 400:
        return Verdict("fail", f"HTTP {status}")
    return Verdict("fail", f"unexpected HTTP {status}")


def retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    """Seconds the provider asks to wait: ``retry-after-ms``, else ``retry-after`` (seconds or
    an HTTP date), capped at MAX_RETRY_AFTER_S; None when neither is there or readable."""
    lower = {k.lower(): v for k, v in headers.items()}
    seconds: float | None = None
    if "retry-after-ms" in lower:
        seconds = _number(lower["retry-after-ms"])
        seconds = None if seconds is None else seconds / 1000.0
    if seconds is None and "retry-after" in lower:
        raw = lower["retry-after"].strip()
        seconds = _number(raw)
        if seconds is None:
            try:
                when = parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError):
                when = None
            if when is not None:
                when = when if when.tzinfo else when.replace(tzinfo=UTC)
                seconds = (when - now).total_seconds()
    if seconds is None:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1 = the first retry) when the provider named none."""
    return min(BACKOFF_FIRST_S * 2.0 ** max(attempt - 1, 0), BACKOFF_MAX_S)


def pause(verdict: Verdict, attempt: int) -> float:
    """How long the next attempt waits: what the provider asked for, else the backoff."""
    if verdict.retry_after_s is not None:
        return verdict.retry_after_s
    return backoff(attempt)
