"""A2A decisions (pure): task states, message parts, ``fleet.labels`` metadata, wait bounds.

The SDK's protobuf types stay in :mod:`fleet.api.a2a`; this module sees their JSON form
(``{"text": …}`` / ``{"data": …}`` parts, metadata as plain dicts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from fleet.domain.labels import merge_labels
from fleet.domain.values import TaskStatus
from fleet.errors import InputError

#: How long SendMessage waits for the task to finish when the client blocks (v1.0 default; v0.3
#: ``configuration.blocking``) and names no ``fleet.wait`` (seconds).
DEFAULT_WAIT_S = 30.0
#: The longest a client may ask SendMessage to wait (``fleet.wait``, seconds).
MAX_WAIT_S = 60.0
#: How long CancelTask waits for a running task to stop at its next step boundary (seconds).
CANCEL_WAIT_S = 10.0
#: Metadata key (request or message) carrying labels.
LABELS_KEY = "fleet.labels"
#: Metadata key (request or message) carrying the blocking wait in seconds.
WAIT_KEY = "fleet.wait"
#: Metadata key choosing what the message does if its conversation is busy (a queue mode).
DELIVERY_KEY = "fleet.delivery"
#: Metadata key naming who or what the message is about across conversations.
RESOURCE_KEY = "fleet.resource"

#: fleet task status → A2A task state. ``interrupted`` (a crashed run waiting for its retry) shows
#: as ``working``: the work started and will go on without the client doing anything.
STATES: dict[TaskStatus, str] = {
    TaskStatus.QUEUED: "submitted",
    TaskStatus.LEASED: "submitted",
    TaskStatus.RUNNING: "working",
    TaskStatus.INTERRUPTED: "working",
    TaskStatus.SUCCEEDED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "canceled",
    TaskStatus.SUPERSEDED: "canceled",  # stopped for a newer message (its report is kept)
    TaskStatus.WAITING: "working",
}


def state(status: TaskStatus) -> str:
    """The A2A state name (``submitted``, ``working``, ``completed``, ``failed``, ``canceled``)."""
    return STATES[status]


def input_parts(parts: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A2A message parts (JSON form) → fleet input parts; file parts are refused."""
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        if "text" in part:
            out.append({"type": "text", "text": str(part["text"])})
        elif "data" in part:
            data = part["data"]
            out.append(
                {"type": "data", "data": data if isinstance(data, dict) else {"value": data}}
            )
        elif "url" in part or "raw" in part:
            raise InputError(
                f"message part {i} is a file; this agent accepts text and data parts only",
                field=f"message.parts.{i}",
            )
        else:
            raise InputError(
                f"message part {i} has no content; send a text or data part",
                field=f"message.parts.{i}",
            )
    if not out:
        raise InputError("the message has no parts; send at least one text part", field="message")
    return out


def _labels_in(metadata: Mapping[str, Any] | None, where: str) -> dict[str, str]:
    if not metadata or LABELS_KEY not in metadata:
        return {}
    value = metadata[LABELS_KEY]
    if not isinstance(value, dict):
        raise InputError(
            f"{where}.metadata[{LABELS_KEY!r}] must be an object of string values, "
            f'e.g. {{"project": "apollo"}}',
            field=f"{where}.metadata.{LABELS_KEY}",
        )
    return value


def labels(
    request_metadata: Mapping[str, Any] | None, message_metadata: Mapping[str, Any] | None
) -> dict[str, str]:
    """``fleet.labels`` from the request's and the message's metadata (the message's win)."""
    return merge_labels(
        _labels_in(request_metadata, "params"), _labels_in(message_metadata, "message")
    )


def wait_seconds(
    return_immediately: bool,
    request_metadata: Mapping[str, Any] | None,
    message_metadata: Mapping[str, Any] | None,
) -> float:
    """How long SendMessage may wait for the task to finish (0 = answer at once)."""
    if return_immediately:
        return 0.0
    given = _given(WAIT_KEY, request_metadata, message_metadata)
    if given is None:
        return DEFAULT_WAIT_S
    _, value = given
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_WAIT_S
    ):
        raise InputError(
            f"metadata[{WAIT_KEY!r}] must be a number of seconds from 0 to "
            f"{MAX_WAIT_S:g}, got {value!r}",
            field=f"metadata.{WAIT_KEY}",
        )
    return float(value)


def _given(
    key: str,
    request_metadata: Mapping[str, Any] | None,
    message_metadata: Mapping[str, Any] | None,
) -> tuple[str, Any] | None:
    """Where ``key`` is given, ``message`` or ``params`` (the message's wins), and its value."""
    for where, meta in (("message", message_metadata), ("params", request_metadata)):
        if meta and key in meta:
            return where, meta[key]
    return None


def _checked(
    key: str,
    wanted: str,
    ok: Callable[[Any], bool],
    request_metadata: Mapping[str, Any] | None,
    message_metadata: Mapping[str, Any] | None,
) -> Any:
    """``key``'s value (the message's wins; None where neither gives it); one ``ok`` refuses is
    an InputError saying it must be ``wanted``."""
    given = _given(key, request_metadata, message_metadata)
    if given is None:
        return None
    where, value = given
    if not ok(value):
        raise InputError(
            f"{where}.metadata[{key!r}] must be {wanted}, got {value!r}",
            field=f"{where}.metadata.{key}",
        )
    return value


def delivery(
    request_metadata: Mapping[str, Any] | None, message_metadata: Mapping[str, Any] | None
) -> str | None:
    """``fleet.delivery`` (the message's wins): a queue mode for this one submission."""
    from fleet.domain.admission import QUEUE_MODES

    modes = ", ".join(QUEUE_MODES)
    value = _checked(
        DELIVERY_KEY,
        f"one of {modes}",
        QUEUE_MODES.__contains__,
        request_metadata,
        message_metadata,
    )
    return None if value is None else str(value)


def resource(
    request_metadata: Mapping[str, Any] | None, message_metadata: Mapping[str, Any] | None
) -> str | None:
    """``fleet.resource`` (the message's wins): the submission's resource id."""
    value = _checked(
        RESOURCE_KEY, "a string", lambda v: isinstance(v, str), request_metadata, message_metadata
    )
    return None if value is None else str(value)
