"""Conversation lifecycle decisions (pure): which conversation an operator names, whether a
reset or delete may go ahead, what retention and the stored cap take away."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from fleet.constants import DEFAULT_TENANT, LIMITS
from fleet.domain.keys import (
    SINGLETON_KEY,
    SINGLETON_SCOPE,
    ConversationRef,
    DeploymentKind,
    api_scope,
    check_bare,
    check_scope,
    split_scoped,
)
from fleet.domain.values import ACTIVE, TaskStatus
from fleet.errors import Conflict, InputError

Action = Literal["reset", "delete"]
#: A task whose run has started and is not over: leased or running, or handed back
#: (``interrupted``: its finished steps journaled, their side effects done) and waiting for
#: a worker to resume it. Reset and delete refuse while one exists (unless --cancel-running).
BUSY = (*ACTIVE, TaskStatus.INTERRUPTED)
#: Why a queued task of an older generation was cancelled (its ``error``).
RESET_REASON = "cancelled: conversation reset by an operator (a new generation started)"
DELETE_REASON = "cancelled: conversation deleted by an operator"
#: What a stopped run's task says when ``--cancel-running`` stopped it.
STOP_REASON = "cancelled: the operator reset or deleted its conversation"
#: Messages one batch of a prune deletes (each batch is its own short transaction).
PRUNE_BATCH = 500
#: The longest ``--older-than`` (ten years: surely a typo beyond that).
MAX_AGE_S = 3650 * 86400.0
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 86400.0}


def operator_tenant(value: str, tenants: Collection[str], own: str = DEFAULT_TENANT) -> str | None:
    """The tenant an operator's key names by its API scope, read tenant first:
    ``api:acme:ticket-4711`` is tenant acme's when acme is a configured tenant (else the
    ``default`` tenant's key ``acme:ticket-4711``); ``api:k`` is ``default``'s (the shared
    ``api`` scope: a scoped key names the conversation as listings show it). A bare key is the
    operator's ``own`` tenant's (``default`` for an open API and the operator's own CLI), as it is
    on every endpoint of a caller (``keys.resolve``). None for other scopes (their trigger's or
    caller's tenant, or the one given)."""
    head, sep, rest = value.partition(":")
    if not sep:
        return own
    if head != "api":
        return None
    tenant, sep2, key = rest.partition(":")
    if sep2 and key and tenant in tenants and tenant != DEFAULT_TENANT:
        return tenant
    return DEFAULT_TENANT


def operator_ref(kind: DeploymentKind, value: str, tenant: str = DEFAULT_TENANT) -> ConversationRef:
    """The conversation an operator names in ``tenant``: ``api:acme:ticket-4711``,
    ``webhook:t:k``, ``a2a:c:k``; a bare key is an API one (``api:<tenant>``); a singleton
    deployment has its one conversation."""
    if kind == "singleton":
        return ConversationRef(SINGLETON_SCOPE, SINGLETON_KEY)
    own = api_scope(tenant)
    scope, bare = split_scoped(value, own)
    if scope == "api":
        scope = own
    if scope == SINGLETON_SCOPE:
        raise InputError(
            f"conversation key {value!r}: only a singleton deployment has the "
            f"{SINGLETON_SCOPE!r} scope",
            field="conversationKey",
        )
    scope = check_scope(scope or own)
    hint = " (scoped like api:ticket-4711, or bare for api)"
    return ConversationRef(scope, check_bare(value, bare, hint))


def parse_age(value: str) -> float:
    """Seconds from ``--older-than``: ``30d``, ``12h``, ``90m``, ``45s``; a bare number is days."""
    m = _AGE.match(value)
    if not m:
        raise InputError(
            f"--older-than {value!r} is not an age like 30d, 12h, 90m or 45s", field="olderThan"
        )
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_AGE_S:
        raise InputError(
            f"--older-than {value!r} must be more than 0 and at most {MAX_AGE_S / 86400:g}d",
            field="olderThan",
        )
    return seconds


@dataclass(frozen=True, slots=True)
class Busy:
    """What of a conversation is unfinished when an operator acts on it."""

    #: The leased, running or handed-back task (None: no run is under way).
    active: str | None = None
    queued: int = 0
    #: ``active`` was handed back mid-run (``interrupted``) and waits to be resumed.
    resuming: bool = False


def busy(status: TaskStatus) -> bool:
    """Does a task in ``status`` hold a run under way (one a reset or delete would break)?"""
    return status in BUSY


Go = Literal["go", "stop_first"]


def guard(action: Action, conversation: str, busy: Busy, *, cancel_running: bool) -> Go:
    """May ``action`` go ahead now (``go``), after stopping the active run (``stop_first``), or
    not at all (Conflict naming the run and the way out)?"""
    if busy.active is None:
        return "go"
    if cancel_running:
        return "stop_first"
    what = "a task handed back mid-run, waiting to resume" if busy.resuming else "a running task"
    raise Conflict(
        f"conversation {conversation!r} has {what} ({busy.active}); {action} refused. "
        f"Wait for it, or {action} with --cancel-running (HTTP: cancelRunning=true) to stop it",
        field="cancelRunning",
    )


#: Pending deliveries a refused delete names (the rest are counted).
NAMED_DELIVERIES = 5


def pending_deliveries(conversation: str, pending: list[tuple[str, str]]) -> Conflict:
    """Delete refused: the conversation's replies are still being delivered (``pending``:
    delivery id and target); deleting would drop them with their journal."""
    named = ", ".join(f"{d} ({t})" for d, t in pending[:NAMED_DELIVERIES])
    more = len(pending) - NAMED_DELIVERIES
    if more > 0:
        named += f" and {more} more"
    return Conflict(
        f"conversation {conversation!r} has {len(pending)} pending reply "
        f"deliver{'y' if len(pending) == 1 else 'ies'}: {named}; delete refused (they would be "
        "dropped unsent). Wait for them, or delete with --cancel-running "
        "(HTTP: cancelRunning=true) to drop them",
        field="cancelRunning",
    )


def inbox_fate(run_generation: int, conversation_generation: int) -> Literal["requeue", "cancel"]:
    """Messages steered into a run that ended before taking them: queued as tasks of their own,
    or (the conversation was reset since the run began) cancelled, never new-generation input."""
    return "requeue" if run_generation == conversation_generation else "cancel"


def stop_timed_out(action: Action, conversation: str, task: str, waited_s: float) -> Conflict:
    """The run was asked to stop but is still going after ``waited_s``."""
    return Conflict(
        f"conversation {conversation!r}: task {task} was asked to stop but still runs after "
        f"{waited_s:g}s (it stops at its next step boundary); {action} again once it stopped",
        field="cancelRunning",
    )


def retention_cutoff(now: datetime, retention_s: float) -> datetime:
    """Messages said before this are past their retention."""
    return now - timedelta(seconds=retention_s)


def over_cap(stored: int, cap: int) -> int:
    """How many of the oldest messages go so that ``cap`` remain (never negative)."""
    return max(0, stored - cap)


def batches(total: int, size: int = PRUNE_BATCH) -> list[int]:
    """The sizes of the batches that delete ``total`` rows, ``size`` at most each."""
    if size < 1:
        raise ValueError("a batch holds at least one row")
    full, rest = divmod(max(0, total), size)
    return [size] * full + ([rest] if rest else [])


def default_retention_s() -> float:
    return LIMITS["retention_days"].default * 86400.0


def fresh_notice(conversation: str, deleted_at: datetime) -> str:
    """What the first submission after a delete is told."""
    return (
        f"conversation {conversation!r} was deleted at {deleted_at.isoformat()}; "
        "this task starts it fresh (no earlier history or notes)"
    )
