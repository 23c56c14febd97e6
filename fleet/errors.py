"""Errors that cross layers; each message says what was wrong, the value, and what to do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class FleetError(Exception):
    """Base of every error fleet raises on purpose."""

    #: HTTP status the API maps this error to.
    status: int = 400
    #: Short problem title (RFC 9457 ``title``).
    title: str = "Bad request"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __init_subclass__(
        cls, *, status: int | None = None, title: str | None = None, **kwargs: Any
    ) -> None:
        """A subclass names its HTTP status and title in its header: ``status=404, title=...``."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if title is not None:
            cls.title = title


class InputError(FleetError, status=422, title="Invalid input"):
    """A caller sent a value fleet cannot accept."""


class ConfigError(FleetError, title="Invalid configuration"):
    """A configuration file or setting is invalid."""

    def __init__(self, file: str, key: str, reason: str) -> None:
        super().__init__(f"{file}: {key}: {reason}", field=key)
        self.file = file
        self.key = key
        self.reason = reason

    @property
    def every(self) -> tuple[ConfigError, ...]:
        """Each error it reports (one here; several in ``ConfigErrors``)."""
        return (self,)


class ConfigErrors(ConfigError):
    """Every configuration error one load found, each naming its file and key (one a line)."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        found = tuple(e for error in errors for e in error.every)
        first = found[0]
        super().__init__(first.file, first.key, first.reason)
        self.message = "\n".join(e.message for e in found)
        self.args = (self.message,)
        self.found = found

    @property
    def every(self) -> tuple[ConfigError, ...]:
        return self.found


def raise_all(errors: Sequence[ConfigError]) -> None:
    """Raise what ``errors`` hold, if anything: the one error, or ``ConfigErrors`` of all."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


class NotFound(FleetError, status=404, title="Not found"):
    """The named object does not exist (or is outside the caller's scope)."""


class Forbidden(FleetError, status=403, title="Forbidden"):
    """The caller may not touch this object."""


class Conflict(FleetError, status=409, title="Conflict"):
    """The request conflicts with the current state."""


class QueueFull(FleetError, status=429, title="Queue full"):
    """The conversation's queue is at its cap and its policy is to refuse (``on_full``)."""


class Unavailable(FleetError, status=503, title="Service unavailable"):
    """A backing service (database, Redis) cannot be reached; retry later."""


class ModelError(FleetError, status=502, title="Model call failed"):
    """A model call failed; ``retryable`` says whether trying again may help, ``action`` what
    fleet does about it (``fleet.domain.model_errors``: wait, switch or fail)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status_code: int | None = None,
        action: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code
        #: ``wait`` (rate limited: a shared cooldown), ``switch`` (the provider failed: retry,
        #: then a fallback) or ``fail`` (the request is wrong: no retry, no fallback).
        self.action = action or ("switch" if retryable else "fail")
        #: What the provider asked to wait (Retry-After), in seconds.
        self.retry_after_s = retry_after_s


class LeaseLost(FleetError, status=409, title="Lease lost"):
    """This worker no longer holds the task: another took over (fencing number moved on)."""
