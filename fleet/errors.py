"""Errors that cross layers; each message says what was wrong, the value, and what to do."""

from __future__ import annotations


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


class InputError(FleetError):
    """A caller sent a value fleet cannot accept."""

    status = 422
    title = "Invalid input"


class ConfigError(FleetError):
    """A configuration file or setting is invalid."""

    title = "Invalid configuration"

    def __init__(self, file: str, key: str, reason: str) -> None:
        super().__init__(f"{file}: {key}: {reason}", field=key)
        self.file = file
        self.key = key
        self.reason = reason


class NotFound(FleetError):
    """The named object does not exist (or is outside the caller's scope)."""

    status = 404
    title = "Not found"


class Forbidden(FleetError):
    """The caller may not touch this object."""

    status = 403
    title = "Forbidden"


class Conflict(FleetError):
    """The request conflicts with the current state."""

    status = 409
    title = "Conflict"


class QueueFull(FleetError):
    """The conversation's queue is at its cap and its policy is to refuse (``on_full``)."""

    status = 429
    title = "Queue full"


class Unavailable(FleetError):
    """A backing service (database, Redis) cannot be reached; retry later."""

    status = 503
    title = "Service unavailable"


class ModelError(FleetError):
    """A model call failed; ``retryable`` says whether trying again may help."""

    status = 502
    title = "Model call failed"

    def __init__(
        self, message: str, *, retryable: bool = False, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


class LeaseLost(FleetError):
    """This worker no longer holds the task: another took over (fencing number moved on)."""

    status = 409
    title = "Lease lost"
