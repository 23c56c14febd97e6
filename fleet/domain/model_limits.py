"""Model limits (pure): which limits a call falls under, and whether it may go now or must wait.

A ``[[model_limits]]`` entry matches calls by a ``provider:model`` glob (``openai:*``,
``openai:gpt-4o*``); every entry that matches a call applies. Each holds, fleet-wide:

- a request bucket: ``requests_per_minute`` with ``burst`` requests at once above the steady
  rate (default one second of it);
- a token bucket: ``tokens_per_minute``, each call taking its estimated tokens (a tokenizer,
  else 4 bytes a token: ``fleet.agents.tokens``), corrected by the reported usage once it
  answered; it holds as many seconds of tokens as the request bucket holds of requests (one
  second without a request rate);
- ``max_concurrent`` calls in flight at once;
- a cooldown: after a 429 (or 529), no call of the limit starts before it ends.

Buckets are GCRA cells (a theoretical arrival time, ``tat``): a call of cost ``c`` may go when
``max(tat, now) + c * interval - now <= max(capacity, c) * interval``; then ``tat`` moves by
``c * interval``. A call bigger than a bucket goes once the bucket is full and leaves it in debt.
Over any window of ``T`` seconds at most ``capacity + T / interval`` calls start. A call takes
all its limits at once or none (all-or-nothing: waiting on one never spends another). The same
math runs in Redis (``fleet.dispatch.model_capacity``) and in process (embedded).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

#: Why a call waits: a cooldown after a 429, the request rate, the token rate, or the calls in
#: flight.
Reason = Literal["cooldown", "requests", "tokens", "concurrency"]
#: How often a call waiting for a free place of ``max_concurrent`` asks again (seconds): when a
#: place frees up is not known in advance.
CONCURRENCY_POLL_S = 0.05
#: Waits shorter than this are no wait (float noise in the bucket arithmetic).
EPSILON_S = 1e-6


@dataclass(frozen=True, slots=True)
class Limit:
    """One ``[[model_limits]]`` entry, as the limiter uses it."""

    match: str
    requests_per_minute: int | None = None
    burst: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent: int | None = None
    max_wait_s: float = 60.0

    @property
    def request_interval(self) -> float:
        """Seconds between requests at the steady rate (0: no request rate)."""
        return 60.0 / self.requests_per_minute if self.requests_per_minute else 0.0

    @property
    def request_capacity(self) -> float:
        """Requests the bucket holds: ``burst``, else one second of the rate (at least 1)."""
        if not self.requests_per_minute:
            return 0.0
        return float(self.burst or max(1, math.ceil(self.requests_per_minute / 60.0)))

    @property
    def burst_s(self) -> float:
        """Seconds of steady rate the buckets hold."""
        if not self.requests_per_minute:
            return 1.0
        return self.request_capacity * self.request_interval

    @property
    def token_interval(self) -> float:
        """Seconds per token at the steady rate (0: no token rate)."""
        return 60.0 / self.tokens_per_minute if self.tokens_per_minute else 0.0

    @property
    def token_capacity(self) -> float:
        """Tokens the bucket holds: as many seconds of tokens as the request bucket holds."""
        if not self.tokens_per_minute:
            return 0.0
        return max(1.0, self.tokens_per_minute / 60.0 * self.burst_s)


def matches(limit: Limit, model: str) -> bool:
    """Does ``limit`` apply to calls of ``model`` (``provider:model``)? Globs are case-sensitive."""
    return fnmatch.fnmatchcase(model, limit.match)


def matching(limits: Sequence[Limit], model: str) -> tuple[Limit, ...]:
    """Every limit that applies to calls of ``model``, in configured order."""
    return tuple(limit for limit in limits if matches(limit, model))


@dataclass(frozen=True, slots=True)
class State:
    """One limit's cells: request and token arrival times, cooldown end, calls in flight."""

    requests_tat: float = 0.0
    tokens_tat: float = 0.0
    cool_until: float = 0.0
    in_flight: int = 0


def take(
    tat: float, now: float, interval: float, capacity: float, cost: float
) -> tuple[float, float]:
    """GCRA: (the cell's new ``tat``, 0) when ``cost`` fits now, else (``tat``, seconds to wait)."""
    new = max(tat, now) + cost * interval
    wait = new - now - max(capacity, cost) * interval
    if wait > EPSILON_S:
        return tat, wait
    return new, 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """A call's answer: go (``wait_s`` 0, the limits' new states) or wait, naming the limit and
    why (the longest wait of all its limits)."""

    wait_s: float
    limit: str | None = None
    reason: Reason | None = None
    states: tuple[State, ...] = ()

    @property
    def go(self) -> bool:
        return self.wait_s <= 0.0


def decide(limits: Sequence[Limit], states: Sequence[State], now: float, tokens: int) -> Decision:
    """May a call of ``tokens`` estimated tokens start now under all of ``limits`` (whose cells
    are ``states``)? All or nothing: a call that waits takes nothing."""
    worst = Decision(0.0)
    taken: list[State] = []
    for limit, state in zip(limits, states, strict=True):
        waits: list[tuple[float, Reason]] = []
        if state.cool_until - now > EPSILON_S:
            waits.append((state.cool_until - now, "cooldown"))
        requests_tat, tokens_tat = state.requests_tat, state.tokens_tat
        if limit.request_interval:
            requests_tat, wait = take(
                state.requests_tat, now, limit.request_interval, limit.request_capacity, 1.0
            )
            waits.append((wait, "requests"))
        if limit.token_interval and tokens > 0:
            tokens_tat, wait = take(
                state.tokens_tat, now, limit.token_interval, limit.token_capacity, float(tokens)
            )
            waits.append((wait, "tokens"))
        if limit.max_concurrent is not None and state.in_flight >= limit.max_concurrent:
            waits.append((CONCURRENCY_POLL_S, "concurrency"))
        wait, reason = max(waits, default=(0.0, None), key=lambda w: w[0])
        if wait > worst.wait_s:
            worst = Decision(wait, limit.match, reason)
        taken.append(State(requests_tat, tokens_tat, state.cool_until, state.in_flight + 1))
    if not worst.go:
        return worst
    return Decision(0.0, states=tuple(taken))


def settle(limit: Limit, state: State, now: float, token_delta: int) -> State:
    """A call of ``limit`` ended: its place in flight is free, and its token estimate is
    corrected by ``token_delta`` (reported minus estimated tokens; negative gives some back)."""
    tat = state.tokens_tat
    if limit.token_interval and token_delta:
        base = max(tat, now) if token_delta > 0 else tat
        tat = max(base + token_delta * limit.token_interval, now)
    return replace(state, tokens_tat=tat, in_flight=max(state.in_flight - 1, 0))


def cool(state: State, now: float, seconds: float) -> State:
    """A 429 (or 529): no call of the limit starts for ``seconds`` (a longer cooldown stays)."""
    return replace(state, cool_until=max(state.cool_until, now + seconds))


#: Why a call waits for capacity, as a person reads it (by the reason a wait names).
WAIT_REASONS = {
    "cooldown": "cooldown after a 429",
    "requests": "requests per minute",
    "tokens": "tokens per minute",
    "concurrency": "calls in flight",
}


def wait_reason(reason: str) -> str:
    """``cooldown`` → ``cooldown after a 429`` (an unknown reason as it is)."""
    return WAIT_REASONS.get(reason, reason)


def waiting_text(limit: str, seconds: float, reason: str | None = None) -> str:
    """How a waiting call shows: ``waiting for model capacity: openai:*, 1.2 s (requests per
    minute)``."""
    why = f" ({wait_reason(reason)})" if reason else ""
    return f"waiting for model capacity: {limit}, {seconds:.1f} s{why}"


def wait_line(text: str, reason: str | None) -> str:
    """A stored wait's text with its reason: waits stored before the text named it get it
    added."""
    why = f"({wait_reason(reason)})" if reason else ""
    return text if not why or why in text else f"{text} {why}"


#: What lets more calls of a limit start sooner, by why they wait (the key to raise).
_RAISE = {"requests": "requests_per_minute", "tokens": "tokens_per_minute"}


def past_max_wait_advice(reason: str, seconds: float) -> str:
    """What can let a call through that would wait ``seconds`` (for ``reason``, a ``Reason``)
    past its limit's ``max_wait``.

    A cooldown is the provider's own pause after a 429 (its Retry-After, else a backoff): no
    rate of fleet's shortens it, so only a longer ``max_wait`` or another model helps.
    """
    where = "config/fleet.toml [[model_limits]]"
    if reason == "cooldown":
        return (
            "the provider asked for that pause after a 429 (its Retry-After), and no rate of "
            f"fleet's shortens it: raise the limit's max_wait to at least {math.ceil(seconds)}s "
            f"in {where}, or give the agent a fallback model ([model] fallbacks) that the limit "
            "does not match"
        )
    key = _RAISE.get(reason, "max_concurrent")
    return f"raise its max_wait or its {key} in {where}, or lower the load"
