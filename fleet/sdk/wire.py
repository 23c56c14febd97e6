"""What the HTTP client reads off the wire: server-sent events, problem+json answers and the
errors they become (an :class:`ApiError` that is also the store's error for its status)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from fleet.errors import (
    Conflict,
    FleetError,
    Forbidden,
    InputError,
    NotFound,
    QueueFull,
)


@dataclass(frozen=True, slots=True)
class Event:
    """One Server-Sent Event of StreamTaskEvents."""

    id: str | None
    kind: str
    data: dict[str, Any]


def parse_sse(lines: Iterable[str]) -> Iterator[Event]:
    """Events from the lines of a ``text/event-stream`` (comments and ``retry`` skipped)."""
    event_id: str | None = None
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield Event(event_id, kind, json.loads("\n".join(data)))
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name == "id":
            event_id = value


class ApiError(FleetError):
    """The server refused the request (4xx); ``message`` is the problem's detail."""

    def __init__(self, message: str, *, status: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.status = status


# A server's 4xx answers are also the errors the store raises for the same request, so that SDK
# code catches the same errors in every mode.


class _InputError(ApiError, InputError):
    """The server refused a value (400, 413, 422)."""


class _Forbidden(ApiError, Forbidden):
    """The caller may not touch this object (403)."""


class _NotFound(ApiError, NotFound):
    """No such object in the caller's reach (404)."""


class _Conflict(ApiError, Conflict):
    """The request conflicts with the current state (409)."""


class _QueueFull(ApiError, QueueFull):
    """The conversation's queue is full (429)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: _InputError,
    403: _Forbidden,
    404: _NotFound,
    409: _Conflict,
    413: _InputError,
    422: _InputError,
    429: _QueueFull,
}


def _problem(response: httpx.Response) -> tuple[str, str | None]:
    """The one line to show for an error answer, and the field it names."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        params = body.get("invalidParams") or [{}]
        field = params[0].get("name") if isinstance(params[0], dict) else None
        return body["detail"].splitlines()[0], field
    lines = response.text.strip().splitlines()
    first = lines[0] if lines else response.reason_phrase
    return f"server answered {response.status_code}: {first}", None
