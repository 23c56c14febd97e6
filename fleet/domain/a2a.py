"""A2A decisions (pure): task states, message parts, ``fleet.labels`` metadata, wait bounds,
and a caller's decision on a tool approval (the data part answering an ``input-required`` task).

The SDK's protobuf types stay in :mod:`fleet.api.a2a`; this module sees their JSON form
(``{"text": …}`` / ``{"data": …}`` parts, metadata as plain dicts).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.domain import waits
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
#: as ``working``: the work started and will go on without the client doing anything; so does
#: ``waiting`` for a delegate or a time (one waiting for a person's approval is ``input-required``:
#: :func:`state`).
STATES: dict[TaskStatus, str] = {
    TaskStatus.QUEUED: "submitted",
    TaskStatus.LEASED: "submitted",
    TaskStatus.RUNNING: "working",
    TaskStatus.INTERRUPTED: "working",
    TaskStatus.WAITING: "working",
    TaskStatus.SUCCEEDED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "canceled",
    TaskStatus.SUPERSEDED: "canceled",  # stopped for a newer message (its report is kept)
}


#: The A2A state of a task that waits for a caller's decision on a tool call.
INPUT_REQUIRED = "input-required"
#: The keys of a decision's data part (``approval`` may be left out when one is pending).
DECISION_KEYS = ("approval", "decision", "reason")


def state(status: TaskStatus, *, asks: bool = False) -> str:
    """The A2A state name (``submitted``, ``working``, ``input-required``, ``completed``,
    ``failed``, ``canceled``); ``asks``: the task asks for an approval (see :func:`asking`)."""
    if asks and status == TaskStatus.WAITING:
        return INPUT_REQUIRED
    return STATES[status]


def statuses_of(name: str) -> frozenset[TaskStatus]:
    """The fleet statuses of tasks that may show as A2A state ``name`` (ListTasks' filter in
    the store; a ``waiting`` one is ``working`` or ``input-required`` by what it waits for)."""
    if name == INPUT_REQUIRED:
        return frozenset({TaskStatus.WAITING})
    return frozenset(st for st, a2a in STATES.items() if a2a == name)


def asking(found: Iterable[waits.Wait], now: datetime) -> list[waits.Wait]:
    """The approvals a task asks its caller to decide: pending ones before their deadline (one
    past it has expired, whatever its row says until the resumed run marks it), oldest first."""
    return [
        w for w in found if w.kind == "approval" and w.status == "pending" and now < w.expires_at
    ]


def call_text(wait: waits.Wait) -> str:
    """A tool call as the caller is asked about it: ``refund({"order": "A-1"})``."""
    args = json.dumps(wait.arguments, ensure_ascii=False, sort_keys=True)
    return f"{wait.tool}({args})"


def _calls(asked: Sequence[waits.Wait]) -> str:
    """What is asked: ``approval of refund({…}) (approval <id>)``, several joined."""
    calls = "; ".join(f"{call_text(w)} (approval {w.id})" for w in asked)
    noun = "approval" if len(asked) == 1 else f"{len(asked)} approvals"
    return f"{noun} of {calls}"


def _how(asked: Sequence[waits.Wait]) -> str:
    """How to answer: the data part, naming the approval when one is asked."""
    named = asked[0].id if len(asked) == 1 else "<approval id>"
    return (
        f'a data part {{"approval": "{named}", "decision": "approve" | "reject", "reason": "..."}}'
    )


def asking_text(asked: Sequence[waits.Wait]) -> str:
    """The status message's text of an ``input-required`` task: the calls, their approval ids,
    and how to answer."""
    return (
        f"Waiting for {_calls(asked)}. Answer with a message to this task carrying {_how(asked)}."
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """A caller's decision on one approval, read from a message's data part."""

    approval: str
    answer: waits.Answer
    reason: str | None = None


def is_decision(parts: Sequence[Mapping[str, Any]]) -> bool:
    """Does an A2A message (parts in JSON form) carry a decision: a data part with a
    ``decision`` key?"""
    return any(_decision_data(p) is not None for p in parts)


def _decision_data(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    data = part.get("data")
    return data if isinstance(data, Mapping) and "decision" in data else None


def decisions(
    task_id: str,
    parts: Sequence[Mapping[str, Any]],
    found: Sequence[waits.Wait],
    now: datetime,
    *,
    by: str,
) -> list[Decision]:
    """The decisions to record from a message to ``task_id`` (parts in JSON form), one per
    data part with a ``decision`` key, given the task's waits. All are checked before any is
    recorded; InputError naming what is expected otherwise. A decision ``by`` the same decider
    that is recorded already (the message sent again) is left out, so a resent message changes
    nothing and is no error."""
    asked = asking(found, now)
    pending = {w.id for w in asked}
    given = [(i, d) for i, p in enumerate(parts) if (d := _decision_data(p)) is not None]
    if not given:
        if asked:
            raise InputError(
                f"task {task_id} is input-required: it waits for {_calls(asked)}; answer with "
                f"{_how(asked)} (nothing was decided)",
                field="message.parts",
            )
        raise InputError(f"the message to task {task_id} carries no decision", field="message")
    out: list[Decision] = []
    seen: set[str] = set()
    for i, data in given:
        where = f"message.parts.{i}.data"
        unknown = sorted(set(data) - set(DECISION_KEYS))
        if unknown:
            raise InputError(
                f"{where} has unknown keys {', '.join(map(repr, unknown))}; a decision has "
                f"{', '.join(map(repr, DECISION_KEYS))}",
                field=where,
            )
        answer = data["decision"]
        if answer not in waits.ANSWERS:
            raise InputError(
                f"{where}.decision must be 'approve' or 'reject', got {answer!r}",
                field=f"{where}.decision",
            )
        reason = data.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError(
                f"{where}.reason must be a string, got {reason!r}", field=f"{where}.reason"
            )
        try:
            reason = waits.clean_reason(reason)
        except InputError as exc:
            raise InputError(exc.message, field=f"{where}.reason") from None
        approval = _approval(task_id, data.get("approval"), asked, found, where)
        if approval in seen:
            raise InputError(f"approval {approval} is decided twice in one message", field=where)
        seen.add(approval)
        if approval not in pending:
            _check_replay(task_id, approval, answer, found, by=by, where=where)
            continue  # recorded already: the message sent again
        out.append(Decision(approval, answer, reason))
    return out


def _approval(
    task_id: str,
    value: Any,
    asked: Sequence[waits.Wait],
    found: Sequence[waits.Wait],
    where: str,
) -> str:
    """The approval a decision names; left out, the task's one pending approval (or, with none
    pending, its one approval: a resent message)."""
    if value is None:
        approvals = asked or [w for w in found if w.kind == "approval"]
        if len(approvals) == 1:
            return approvals[0].id
        if not approvals:
            raise InputError(f"task {task_id} has no approval to decide", field=where)
        ids = ", ".join(w.id for w in approvals)
        raise InputError(
            f"task {task_id} waits for {len(approvals)} approvals ({ids}); name one in "
            f"{where}.approval",
            field=f"{where}.approval",
        )
    try:
        return str(uuid.UUID(value))  # as stored: lower case, hyphens
    except (TypeError, ValueError, AttributeError):
        raise InputError(
            f"{where}.approval must be an approval id (a UUID string), got {value!r}",
            field=f"{where}.approval",
        ) from None


def _check_replay(
    task_id: str, approval: str, answer: str, found: Sequence[waits.Wait], *, by: str, where: str
) -> None:
    """A decision on an approval that is not pending: fine when it repeats the one ``by``
    recorded; InputError saying why it cannot be decided otherwise."""
    wait = next((w for w in found if w.id == approval and w.kind == "approval"), None)
    if wait is None:
        raise InputError(f"task {task_id} has no approval {approval!r}", field=f"{where}.approval")
    if wait.status == waits.status_of(answer) and wait.decided_by == by:
        return
    if wait.status == "pending":  # past its deadline
        raise InputError(
            f"approval {approval} expired at {wait.expires_at.isoformat()}; it cannot be "
            "decided any more",
            field=f"{where}.approval",
        )
    who = f" by {wait.decided_by}" if wait.decided_by else ""
    raise InputError(
        f"approval {approval} is {wait.status}{who} already: a decision is final",
        field=f"{where}.approval",
    )


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
