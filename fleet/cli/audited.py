"""The audit entries of commands that act on the store here (without ``--server``; through a
server, the API records them): ``@audited("conversation.reset", names="key")`` names the
action and the parameter that names its object; ``recording(store)`` around the command's use
of the store appends the entry with its outcome, the actor ``cli:<OS user>``."""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from fleet.constants import DEFAULT_TENANT

if TYPE_CHECKING:
    from fleet.store.audit import AuditStore

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Pending:
    action: str
    object: str | None
    tenant: str | None
    resource: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


_PENDING: ContextVar[Pending | None] = ContextVar("fleet_cli_audit", default=None)


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def audited(
    action: str | Callable[[dict[str, Any]], str],
    *,
    names: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a command as audited: its store use (``recording``) appends one entry. ``action``
    (or what it makes of the command's options), ``names``: the option naming its object."""

    def wrap(command: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(command)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            named = kwargs.get(names) if names else None
            tenant = kwargs.get("tenant")
            resource = kwargs.get("resource")
            token = _PENDING.set(
                Pending(
                    action if isinstance(action, str) else action(dict(kwargs)),
                    None if named is None else str(named)[:300],
                    tenant if isinstance(tenant, str) else None,
                    resource if isinstance(resource, str) else None,
                    dict(detail or {}),
                )
            )
            try:
                return command(*args, **kwargs)
            finally:
                _PENDING.reset(token)

        return run

    return wrap


def refine(**fields: Any) -> None:
    """What the command learnt while it ran (the tenant it acted in, the object's id, a
    detail such as a bulk job's): its entry says so. Nothing without a pending entry."""
    pending = _PENDING.get()
    if pending is None:
        return
    detail = {**pending.detail, **fields.pop("detail", {})}
    _PENDING.set(replace(pending, detail=detail, **fields))


@contextmanager
def recording(store: AuditStore) -> Iterator[None]:
    """Append the pending command's entry once the block ends: ``ok``, or ``refused`` /
    ``failed`` as it raised (a command not marked ``audited`` records nothing)."""
    if _PENDING.get() is None:
        yield
        return
    outcome = "ok"
    try:
        yield
    except BaseException as exc:
        status = getattr(exc, "status", None)
        outcome = f"refused {status}" if isinstance(status, int) and status < 500 else "failed"
        raise
    finally:
        pending = _PENDING.get()  # as the command refined it
        if pending is not None:
            _record(store, pending, outcome)


def _record(store: AuditStore, pending: Pending, outcome: str) -> None:
    from fleet.domain import audit

    tenant = pending.tenant or DEFAULT_TENANT
    obj = pending.object
    if pending.resource is not None and (obj is None or not obj.startswith("resource:")):
        obj = audit.resource_object(tenant, pending.resource)
    store.record(
        audit.Entry(
            at=datetime.now(UTC),
            actor=f"cli:{os_user()}",
            action=pending.action,
            outcome=outcome,
            tenant=tenant,
            object=obj,
            address="local",
            detail=pending.detail,
        )
    )
