"""A model under fleet's traffic control: its limits, its retries, its fallbacks.

Each call takes a place under every model limit that matches it (waiting for one up to the
limits' ``max_wait``, and saying so through ``waiting``), then calls the provider's SDK with the
SDK's own retries off: fleet counts ``max_retries``, so no retry passes by the limiter or a
cooldown. A failure is sorted (``fleet.domain.model_errors``): ``wait`` (429, 529) sets a cooldown
on the call's limits, shared by every process, then tries again once it passed; ``switch`` (5xx,
timeouts) tries again after a backoff of its own; ``fail`` (a wrong request) ends the call. Once a
model's retries are spent on wait or switch, the next of ``fallbacks`` is tried, under its own
limits. The response says which configured model answered and how long the call waited.

A listener is told the reply's text through every attempt: text an attempt told before it failed
is void, so the listener is reset before the next attempt's first text (or, if the answer has
none, once it came). What the listener raises ends the call as it is, never taken for the
model's failure.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleet import metrics
from fleet.agents import tokens
from fleet.agents.capacity import Capacity, Wait
from fleet.agents.models.base import (
    Abort,
    ChatMessage,
    Listener,
    Model,
    ModelResponse,
    Stopped,
    ToolSpec,
    opened,
    streams,
)
from fleet.domain import error_classes, model_errors
from fleet.domain.model_limits import Limit, past_max_wait_advice
from fleet.errors import ModelError

log = logging.getLogger(__name__)

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
        #: ``complete`` takes ``listen`` when the model itself (the first candidate) streams.
        self.streams = streams(first)

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
        listen: Listener | None = None,
    ) -> ModelResponse:
        """The first answer of the candidates in order; ModelError when none answered (at
        once for a ``fail``); Stopped when ``stop`` said so while it waited; whatever
        ``listen`` raised."""
        relay = _Relay(listen) if listen is not None else None
        try:
            return self._complete(messages, tools, waiting, stop, relay)
        except _Heard as heard:
            raise heard.error from None

    def _complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        waiting: Waiting | None,
        stop: Stop | None,
        relay: _Relay | None,
    ) -> ModelResponse:
        tried: list[str] = []
        waited = 0.0
        last: ModelError | None = None
        for cand in self.candidates:
            try:
                resp, spent = self._call(cand, messages, tools, waiting, stop, relay=relay)
            except _Failed as failed:
                waited += failed.waited_s
                last = failed.error
                tried.append(f"{cand.model.name}: {failed.error.message}")
                if failed.error.action == "fail":
                    raise failed.error from None
                continue
            if relay is not None:
                relay.settle()
            if cand is not self.candidates[0]:
                metrics.model_fallback(cand.model.name)
                log.warning(
                    "fallback %s answered after %s",
                    cand.model.name,
                    "; then ".join(tried),
                    extra={"event": "model.fallback", "model": cand.model.name, "failed": tried},
                )
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
        *,
        relay: _Relay | None,
    ) -> tuple[ModelResponse, float]:
        """One candidate's answer and the seconds it waited; raises _Failed once its retries
        are spent (or at once on a ``fail``, or a wait past ``max_wait``)."""
        estimate = _estimate(messages, tools) if cand.counts_tokens else 0
        attempt, waited = 0, 0.0
        while True:
            grant, spent = self._place(cand, estimate, waiting, stop)
            waited += spent
            try:
                resp = _attempt(cand.model, messages, tools, relay)
            except ModelError as exc:
                self.capacity.release(cand.limits, grant, 0)
                failed = error_classes.of_model(exc.status_code, exc.message)
                metrics.model_attempt(cand.model.name, failed)
                if exc.action == "fail" or attempt >= cand.max_retries:
                    raise _Failed(_counted(exc, attempt + 1), waited) from None
                attempt += 1
                pause = (
                    exc.retry_after_s
                    if exc.retry_after_s is not None
                    else model_errors.backoff(attempt)
                )
                _told_retry(cand, exc, failed, attempt, pause)
                if exc.action == "wait" and cand.limits:
                    self.capacity.cool(cand.limits, pause)  # the next place waits it out
                    _told_cooldown(cand, pause)
                else:
                    self._pause(pause, stop)
                    waited += pause
                continue
            except BaseException:
                self.capacity.release(cand.limits, grant, 0)
                raise
            reported = resp.usage.total_tokens
            self.capacity.release(cand.limits, grant, reported - estimate if reported else 0)
            metrics.model_attempt(cand.model.name, "ok")
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
            metrics.capacity_waited(cand.model.name, self._clock() - started)
            if ended is not None:  # the shown wait is over: how long it lasted
                ended(self._clock() - started)


def _told_retry(cand: Candidate, exc: ModelError, failed: str, attempt: int, pause: float) -> None:
    """A retry's log line: which model, why (its class and HTTP status), when it goes again."""
    metrics.model_retry(cand.model.name, failed)
    log.info(
        "model %s failed (%s%s); attempt %d of %d in %.1fs",
        cand.model.name,
        failed,
        f", HTTP {exc.status_code}" if exc.status_code else "",
        attempt + 1,
        cand.max_retries + 1,
        pause,
        extra={
            "event": "model.retry",
            "model": cand.model.name,
            "error_class": failed,
            "http_status": exc.status_code,
            "attempt": attempt + 1,
            "after_s": round(pause, 3),
        },
    )


def _told_cooldown(cand: Candidate, pause: float) -> None:
    """A cooldown's log line and metric, per limit it starts on."""
    for limit in cand.limits:
        metrics.model_cooldown(limit.match)
    matched = ", ".join(limit.match for limit in cand.limits)
    log.warning(
        "cooldown of %.1fs started on model limit %s (model %s was rate limited)",
        pause,
        matched,
        cand.model.name,
        extra={
            "event": "model.cooldown",
            "model": cand.model.name,
            "limits": [limit.match for limit in cand.limits],
            "seconds": round(pause, 3),
        },
    )


def _attempt(
    model: Model,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    relay: _Relay | None,
) -> ModelResponse:
    """One call of one candidate, its text told to ``relay``: as it comes when the candidate
    streams, else all of it once it answered."""
    if relay is None:
        return model.complete(messages, tools)
    relay.begin()
    if streams(model):
        return model.complete(messages, tools, listen=relay)
    resp = model.complete(messages, tools)
    if resp.message.content:
        relay.text(resp.message.content)
    return resp


class _Relay:
    """The caller's listener as a call's attempts tell it.

    Text an attempt told before it failed is void: the listener is reset before the next
    attempt's first text, or, when the answer has none, once it came (:meth:`settle`). What
    the listener raises comes out as :class:`_Heard`, which no retry takes for a failure.
    """

    def __init__(self, listen: Listener) -> None:
        self._listen = listen
        #: The attempt under way told text.
        self._told = False
        #: An earlier attempt told text, and the listener was not yet reset since.
        self._void = False

    def begin(self) -> None:
        """An attempt begins: what the one before told (if anything) is void."""
        self._void = self._void or self._told
        self._told = False

    def text(self, chunk: str) -> None:
        self.settle()
        self._told = True
        _heard(self._listen.text, chunk)

    def reset(self) -> None:
        """The candidate itself starts over."""
        self._void = self._told = False
        _heard(self._listen.reset)

    def opened(self, abort: Abort | None) -> None:
        """How to hang up the attempt in flight: for the caller's listener to use."""
        opened(self._listen, abort)

    @property
    def aborted(self) -> bool:
        return bool(getattr(self._listen, "aborted", False))

    def settle(self) -> None:
        """A reset still owed is made."""
        if self._void:
            self._void = False
            _heard(self._listen.reset)


class _Heard(Exception):
    """What the listener raised, carried past the retries to the caller."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _heard(tell: Callable[..., None], *args: str) -> None:
    """``tell(*args)``, what it raises carried as :class:`_Heard`."""
    try:
        tell(*args)
    except Exception as exc:
        raise _Heard(exc) from exc


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
