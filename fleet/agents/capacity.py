"""Model capacity: the port a managed model asks before each call, and its in-process form.

A call takes a place under every limit that matches it (``fleet.domain.model_limits``), or is told
how long to wait and for which limit; once answered it gives its place back with the token
estimate corrected; a 429 sets a cooldown on its limits. In a fleet every process shares one
capacity through Redis (``fleet.dispatch.model_capacity``); embedded, the one process holds it
here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from fleet.domain import model_limits
from fleet.domain.model_limits import Limit, State


class Wait(NamedTuple):
    """Not now: how long to wait, for which limit (its ``match``), and why."""

    seconds: float
    limit: str
    reason: str


class Capacity(Protocol):
    """Fleet-wide places for model calls under their limits."""

    def acquire(
        self, limits: Sequence[Limit], tokens: int, grant: str, hold_s: float
    ) -> Wait | None:
        """Take a place under every one of ``limits`` for a call of ``tokens`` estimated tokens
        (None), or none and say how long to wait. ``grant`` names the place; ``hold_s`` is the
        longest it is held if its process dies without giving it back."""
        ...

    def release(self, limits: Sequence[Limit], grant: str, token_delta: int) -> None:
        """The call ended: give its place back; ``token_delta`` corrects its token estimate."""
        ...

    def cool(self, limits: Sequence[Limit], seconds: float) -> None:
        """A 429: no call under ``limits`` starts for ``seconds``."""
        ...


class LocalCapacity:
    """Capacity within one process (embedded mode, tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, State] = {}

    def acquire(
        self, limits: Sequence[Limit], tokens: int, grant: str, hold_s: float
    ) -> Wait | None:
        with self._lock:
            now = self._clock()
            decision = model_limits.decide(
                limits, [self._states.get(lim.match, State()) for lim in limits], now, tokens
            )
            if not decision.go:
                assert decision.limit is not None and decision.reason is not None
                return Wait(decision.wait_s, decision.limit, decision.reason)
            for limit, state in zip(limits, decision.states, strict=True):
                self._states[limit.match] = state
            return None

    def release(self, limits: Sequence[Limit], grant: str, token_delta: int) -> None:
        with self._lock:
            now = self._clock()
            for limit in limits:
                state = self._states.get(limit.match, State())
                self._states[limit.match] = model_limits.settle(limit, state, now, token_delta)

    def cool(self, limits: Sequence[Limit], seconds: float) -> None:
        with self._lock:
            now = self._clock()
            for limit in limits:
                state = self._states.get(limit.match, State())
                self._states[limit.match] = model_limits.cool(state, now, seconds)
