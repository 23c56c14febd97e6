"""A model under fleet's traffic control: its limits, its retries, its fallbacks.

Each call takes a place under every model limit that matches it (waiting for one up to the
limits' ``max_wait``, and saying so through ``waiting``), then calls the provider's SDK with the
SDK's own retries off: fleet counts ``max_retries``, so no retry passes by the limiter or a
cooldown. A failure is sorted (``fleet.domain.model_errors``): ``wait`` (429, 529) sets a cooldown
on the call's limits, shared by every process, then tries again once it passed; ``switch`` (5xx,
timeouts) tries again after a backoff of its own; ``fail`` (a wrong request) ends the call. Once a
model's retries are spent on wait or switch, the next of ``fallbacks`` is tried, under its own
limits. The response says which configured model answered and how long the call waited.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleet.agents import tokens
from fleet.agents.capacity import Capacity, Wait
from fleet.agents.models.base import ChatMessage, Model, ModelResponse, ToolSpec
from fleet.domain import model_errors
from fleet.domain.model_limits import Limit, past_max_wait_advice
from fleet.errors import ModelError

#: A wait shorter than this is not shown as a step (a burst's spacing is no news).
SHOW_WAIT_S = 0.1
#: A place of ``max_concurrent`` outlives its call's timeout by this much if its process dies
#: holding it (then it expires).
HOLD_MARGIN_S = 30.0

#: Told when a call starts waiting for capacity (once per wait): the wait, and the model; what
#: it answers (if anything) is told the seconds the wait lasted once it ends (a place taken,
#: given up, or stopped).
Waiting = Callable[[Wait, str], Callable[[float], None] | None]
#: A waiting call asks this at least every STOP_POLL_S: must it stop (a cancel, a lost lease)?
Stop = Callable[[], bool]
#: Longest a waiting call sleeps before it asks ``stop`` again.
STOP_POLL_S = 0.5


class Stopped(Exception):
    """A call stopped waiting for capacity because its run must stop."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model a managed call may use: its adapter (SDK retries off), the limits that match
    it, the retries fleet makes of it, and its timeout."""

    model: Model
    limits: tuple[Limit, ...]
    max_retries: int
    timeout_s: float

    @property
    def counts_tokens(self) -> bool:
        return any(limit.tokens_per_minute for limit in self.limits)


class ManagedModel:
    """The model port over one or more candidates (the model, then its fallbacks)."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        capacity: Capacity,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not candidates:
            raise ValueError("a managed model needs at least one candidate")
        self.candidates = tuple(candidates)
        self.capacity = capacity
        self._sleep = sleep
        self._clock = clock
        first = self.candidates[0].model
        self.name = first.name
        self.provider = getattr(first, "provider", None) or self.name.partition(":")[0]

    def close(self) -> None:
        """Close every candidate's SDK client."""
        for cand in self.candidates:
            close = getattr(cand.model, "close", None)
            if close is not None:
                close()

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        waiting: Waiting | None = None,
        stop: Stop | None = None,
    ) -> ModelResponse:
        """The first answer of the candidates in order; ModelError when none answered (at
        once for a ``fail``); Stopped when ``stop`` said so while it waited."""
        tried: list[str] = []
        waited = 0.0
        last: ModelError | None = None
        for cand in self.candidates:
            try:
                resp, spent = self._call(cand, messages, tools, waiting, stop)
            except _Failed as failed:
                waited += failed.waited_s
                last = failed.error
                tried.append(f"{cand.model.name}: {failed.error.message}")
                if failed.error.action == "fail":
                    raise failed.error from None
                continue
            return resp.model_copy(
                update={
                    "answered_by": cand.model.name,
                    "waited_s": round(waited + spent, 3),
                    "fallback": cand is not self.candidates[0],
                }
            )
        assert last is not None
        if len(tried) == 1:
            raise last
        raise ModelError(
            "every model failed: " + "; then ".join(tried),
            retryable=True,
            action=last.action,
            status_code=last.status_code,
        )

    def _call(
        self,
        cand: Candidate,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        waiting: Waiting | None,
        stop: Stop | None,
    ) -> tuple[ModelResponse, float]:
        """One candidate's answer and the seconds it waited; raises _Failed once its retries
        are spent (or at once on a ``fail``, or a wait past ``max_wait``)."""
        estimate = _estimate(messages, tools) if cand.counts_tokens else 0
        attempt, waited = 0, 0.0
        while True:
            grant, spent = self._place(cand, estimate, waiting, stop)
            waited += spent
            try:
                resp = cand.model.complete(messages, tools)
            except ModelError as exc:
                self.capacity.release(cand.limits, grant, 0)
                if exc.action == "fail" or attempt >= cand.max_retries:
                    raise _Failed(_counted(exc, attempt + 1), waited) from None
                attempt += 1
                pause = (
                    exc.retry_after_s
                    if exc.retry_after_s is not None
                    else model_errors.backoff(attempt)
                )
                if exc.action == "wait" and cand.limits:
                    self.capacity.cool(cand.limits, pause)  # the next place waits it out
                else:
                    self._pause(pause, stop)
                    waited += pause
                continue
            except BaseException:
                self.capacity.release(cand.limits, grant, 0)
                raise
            reported = resp.usage.total_tokens
            self.capacity.release(cand.limits, grant, reported - estimate if reported else 0)
            return resp, waited

    def _pause(self, seconds: float, stop: Stop | None) -> None:
        """Sleep ``seconds``, asking ``stop`` every STOP_POLL_S; raises Stopped."""
        if stop is None:
            self._sleep(seconds)
            return
        end = self._clock() + seconds
        while (left := end - self._clock()) > 0:
            if stop():
                raise Stopped("stopped while waiting for model capacity")
            self._sleep(min(left, STOP_POLL_S))

    def _place(
        self, cand: Candidate, estimate: int, waiting: Waiting | None, stop: Stop | None
    ) -> tuple[str, float]:
        """A place under the candidate's limits, and the seconds it took; raises _Failed when
        the wait would pass the limits' ``max_wait``."""
        grant = uuid.uuid4().hex
        if not cand.limits:
            return grant, 0.0
        budget = min(limit.max_wait_s for limit in cand.limits)
        started = self._clock()
        shown = False
        ended: Callable[[float], None] | None = None
        try:
            while True:
                wait = self.capacity.acquire(
                    cand.limits, estimate, grant, cand.timeout_s + HOLD_MARGIN_S
                )
                waited = self._clock() - started
                if wait is None:
                    return grant, waited
                ahead = 0.0 if wait.reason == "concurrency" else wait.seconds
                if waited + ahead > budget:
                    raise _Failed(_too_long(cand, wait, waited + ahead, budget), waited)
                if (
                    not shown
                    and waiting is not None
                    and (wait.seconds >= SHOW_WAIT_S or waited >= SHOW_WAIT_S)
                ):
                    shown = True
                    ended = waiting(wait, cand.model.name)
                self._pause(min(wait.seconds, max(budget - waited, 0.0)), stop)
        finally:
            if ended is not None:  # the shown wait is over: how long it lasted
                ended(self._clock() - started)


class _Failed(Exception):
    """A candidate gave up: the error, and how long it had waited for capacity."""

    def __init__(self, error: ModelError, waited_s: float) -> None:
        super().__init__(error.message)
        self.error = error
        self.waited_s = waited_s


def _counted(exc: ModelError, attempts: int) -> ModelError:
    """The error of a call's last attempt, saying how many fleet made."""
    if exc.action == "fail" or attempts == 1:
        return exc
    plural = "s" if attempts != 1 else ""
    return ModelError(
        f"{exc.message} ({attempts} attempt{plural} by fleet)",
        retryable=exc.retryable,
        status_code=exc.status_code,
        action=exc.action,
        retry_after_s=exc.retry_after_s,
    )


def _too_long(cand: Candidate, wait: Wait, seconds: float, budget: float) -> ModelError:
    return ModelError(
        f"{cand.model.name}: no model capacity within max_wait {budget:g}s: limit "
        f"{wait.limit!r} ({wait.reason}) would hold the call {seconds:.1f} s; "
        f"{past_max_wait_advice(wait.reason, seconds)}",
        retryable=True,
        action="wait",
    )


def _estimate(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> int:
    """The request's tokens, before it is sent (a tokenizer where fleet has one, else chars/4)."""
    tok = tokens.tokenizer()
    total = 0
    for m in messages:
        calls = [{"name": c.name, "arguments": c.arguments} for c in m.tool_calls] or None
        total += tokens.message_tokens(tok, m.content, calls)
    if tools:
        total += tok.count(json.dumps([t.model_dump() for t in tools]))
    return total
