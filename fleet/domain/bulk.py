"""Acting on many tasks at once (pure): a bulk retry or cancel names its tasks by a filter, never
by a list, and acts only on what its key could act on one by one.

- A filter: ``status`` (one or more), ``tenant`` (operator keys), ``deployment``, ``since`` /
  ``until`` (created at), ``labels`` (``k=v``, all must hold), ``errorClass``. Unknown keys are
  refused, naming them.
- ``retry``: tasks that ended ``failed`` (by default) or ``cancelled``; each becomes a new task
  with the same input on the same conversation, queued behind what is there (so it answers
  after newer turns), labelled ``retry_of=<id>``, never with the original's idempotency key.
- ``cancel``: unfinished tasks (``queued``, ``waiting``, ``running`` … by default); an empty
  filter is refused unless ``all`` is said.
- A job matches the tasks created up to its own creation (the retries it makes never match it),
  runs in batches of ``BATCH`` and keeps a cursor, so a restart goes on where it stopped; each
  retry is admitted under an idempotency key of the job's, so nothing is retried twice.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from fleet.constants import RETRY_LABEL
from fleet.domain import error_classes
from fleet.domain.values import TERMINAL, TaskStatus
from fleet.errors import InputError

Action = Literal["retry", "cancel"]
ACTIONS: tuple[Action, ...] = ("retry", "cancel")
#: Tasks one batch of a job acts on (then the job's cursor and counts are stored).
BATCH = 100
#: Beyond this many tasks the CLI asks for ``--yes``.
HANDFUL = 10
#: Task ids a dry run lists.
SAMPLE = 20
#: What each action may act on, and what it acts on when the filter names no status.
RETRYABLE = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED})
CANCELLABLE = frozenset(s for s in TaskStatus if s not in TERMINAL)
DEFAULT_STATUSES: dict[Action, tuple[TaskStatus, ...]] = {
    "retry": (TaskStatus.FAILED,),
    "cancel": tuple(sorted(CANCELLABLE, key=lambda s: s.value)),
}
#: The filter's keys (camelCase over HTTP; the CLI's flags say the same).
FILTER_KEYS = ("status", "tenant", "deployment", "since", "until", "labels", "errorClass")
_LABEL = re.compile(r"^([A-Za-z0-9._/-]{1,128})=(.*)$")


@dataclass(frozen=True, slots=True)
class Filter:
    """Which tasks a job acts on (besides its key's walls)."""

    statuses: tuple[TaskStatus, ...] = ()
    tenant: str | None = None
    deployment: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    labels: dict[str, str] = field(default_factory=dict)
    error_class: str | None = None

    @property
    def empty(self) -> bool:
        """Names nothing at all (a cancel of everything: refused unless ``all``)."""
        return self == Filter()

    def json(self) -> dict[str, Any]:
        """As stored with its job and shown by GetBulkJob."""
        return {
            "status": [s.value for s in self.statuses],
            "tenant": self.tenant,
            "deployment": self.deployment,
            "since": None if self.since is None else self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "labels": dict(self.labels),
            "errorClass": self.error_class,
        }


@dataclass(frozen=True, slots=True)
class Walls:
    """What a job's key could act on one by one: its tenants (None: every tenant, an
    operator's reach of all) and its scope (None: every scope, an operator's)."""

    tenants: frozenset[str] | None
    scope: str | None
    #: The deployments it may use (None: all).
    deployments: frozenset[str] | None = None

    def json(self) -> dict[str, Any]:
        return {
            "tenants": None if self.tenants is None else sorted(self.tenants),
            "scope": self.scope,
            "deployments": None if self.deployments is None else sorted(self.deployments),
        }

    @classmethod
    def of(cls, stored: Mapping[str, Any] | list[str] | None, scope: str | None) -> Walls:
        """As a job stored them (``reach``: ``json()``, or a bare list of tenants)."""
        if stored is None or isinstance(stored, list):
            return cls(None if stored is None else frozenset(stored), scope)
        tenants, deployments = stored.get("tenants"), stored.get("deployments")
        return cls(
            None if tenants is None else frozenset(tenants),
            scope,
            None if deployments is None else frozenset(deployments),
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A bulk job as stored: its filter and walls, how far it got, its counts."""

    id: uuid.UUID
    tenant: str
    owner: str
    walls: Walls
    action: Action
    filter: Filter
    idempotency_key: str | None
    status: Literal["running", "done"]
    matched: int
    done: int
    failed: int
    errors: list[dict[str, str]]
    cursor: tuple[datetime, uuid.UUID] | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    def json(self) -> dict[str, Any]:
        """GetBulkJob's shape."""
        return {
            "id": str(self.id),
            "action": self.action,
            "filter": self.filter.json(),
            "status": self.status,
            "matched": self.matched,
            "done": self.done,
            "failed": self.failed,
            "errors": self.errors,
            "createdAt": self.created_at.isoformat(),
            "updatedAt": self.updated_at.isoformat(),
            "finishedAt": None if self.finished_at is None else self.finished_at.isoformat(),
        }


def filter_of(stored: Mapping[str, Any]) -> Filter:
    """A filter as its job stored it (``Filter.json``)."""
    return Filter(
        statuses=tuple(TaskStatus(v) for v in stored.get("status") or ()),
        tenant=stored.get("tenant"),
        deployment=stored.get("deployment"),
        since=None if stored.get("since") is None else datetime.fromisoformat(stored["since"]),
        until=None if stored.get("until") is None else datetime.fromisoformat(stored["until"]),
        labels=dict(stored.get("labels") or {}),
        error_class=stored.get("errorClass"),
    )


def parse_request(raw: Mapping[str, Any]) -> tuple[Action, Filter]:
    """BulkTasks' body (``action``, ``filter``, ``all``) as the CLI on the store sends it."""
    action = check_action(raw.get("action"))
    return action, parse_filter(raw.get("filter"), action, everything=bool(raw.get("all")))


def check_action(value: object) -> Action:
    for a in ACTIONS:
        if value == a:
            return a
    raise InputError(f"action must be 'retry' or 'cancel', got {value!r}", field="action")


def parse_filter(raw: Mapping[str, Any] | None, action: Action, *, everything: bool) -> Filter:
    """A filter as sent (JSON), checked for ``action``; InputError names the key or value."""
    raw = dict(raw or {})
    unknown = sorted(set(raw) - set(FILTER_KEYS))
    if unknown:
        raise InputError(
            f"unknown filter key {unknown[0]!r}: use {', '.join(FILTER_KEYS)}",
            field=f"filter.{unknown[0]}",
        )
    found = Filter(
        statuses=_statuses(raw.get("status"), action),
        tenant=_text(raw.get("tenant"), "tenant"),
        deployment=_text(raw.get("deployment"), "deployment"),
        since=moment(raw.get("since"), "since"),
        until=moment(raw.get("until"), "until"),
        labels=_labels(raw.get("labels")),
        error_class=_error_class(raw.get("errorClass")),
    )
    if found.since and found.until and found.since >= found.until:
        raise InputError("since must be before until", field="filter.since")
    if action == "cancel" and found.empty and not everything:
        raise InputError(
            "an empty filter would cancel every unfinished task: name a status, deployment, "
            "label, time or error class, or say all (--all) to mean it",
            field="filter",
        )
    if not found.statuses:
        found = Filter(
            DEFAULT_STATUSES[action],
            found.tenant,
            found.deployment,
            found.since,
            found.until,
            found.labels,
            found.error_class,
        )
    return found


def _statuses(value: Any, action: Action) -> tuple[TaskStatus, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise InputError("status must be a status or a list of them", field="filter.status")
    allowed = RETRYABLE if action == "retry" else CANCELLABLE
    out: list[TaskStatus] = []
    for item in items:
        try:
            status = TaskStatus(item)
        except ValueError:
            status = None
        if status is None or status not in allowed:
            names = ", ".join(sorted(s.value for s in allowed))
            raise InputError(
                f"a {action} acts on tasks that are {names}; status {item!r} is not one",
                field="filter.status",
            ) from None
        out.append(status)
    return tuple(dict.fromkeys(out))


def _text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} must be a non-empty string", field=f"filter.{name}")
    return value


def moment(value: Any, name: str, *, field: str | None = None) -> datetime | None:
    """An ISO time with its offset (None stays None), or InputError naming ``name``."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            found = datetime.fromisoformat(value)
        except ValueError:
            found = None
        if found is not None and found.tzinfo is not None:
            return found
    raise InputError(
        f"{name} must be a time with its offset (2026-12-07T09:00:00Z), got {value!r}",
        field=field or f"filter.{name}",
    )


def _labels(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):  # ["k=v", …] as the CLI gives them
        out = {}
        for item in value:
            m = _LABEL.match(item) if isinstance(item, str) else None
            if m is None:
                raise InputError(f"label {item!r} is not k=v", field="filter.labels")
            out[m.group(1)] = m.group(2)
        return out
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return dict(value)
    raise InputError("labels must be an object of strings", field="filter.labels")


def _error_class(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return error_classes.check(value) if isinstance(value, str) else None
    except ValueError as exc:
        raise InputError(str(exc), field="filter.errorClass") from None


def retry_labels(labels: Mapping[str, str], original: str) -> dict[str, str]:
    """A retry's labels: the original's, and ``retry_of`` naming it."""
    return {**labels, RETRY_LABEL: original}


def retry_key(job_id: str, task_id: str) -> str:
    """The idempotency key a job admits its retry of a task under (once, whatever happens)."""
    return f"bulk-retry:{job_id}:{task_id}"


__all__ = [
    "ACTIONS",
    "BATCH",
    "CANCELLABLE",
    "DEFAULT_STATUSES",
    "FILTER_KEYS",
    "HANDFUL",
    "RETRYABLE",
    "SAMPLE",
    "Action",
    "Filter",
    "Job",
    "Walls",
    "check_action",
    "filter_of",
    "parse_filter",
    "parse_request",
    "retry_key",
    "retry_labels",
]
