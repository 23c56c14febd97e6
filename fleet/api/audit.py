"""The audit log over HTTP: every audited request recorded (``AuditTrail``), and
ListAuditEntries (``GET /v1/audit``, operator keys, the tenants they reach).

``AuditTrail`` is ASGI middleware: once the app has answered it knows the route (its operation,
or the UI form's method and path), the caller the key named (``request.state.caller``, set by
``fleet.api.deps.caller`` and the UI's sign-in), the status, and what the route added
(``request.state.audit``: a decision, counts); it appends one entry on the thread pool. A
request refused for its key (401) is one ``key.refused`` entry per address a minute.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleet.api.auth import ANONYMOUS, Caller, require_operator
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.domain import audit
from fleet.domain.bulk import moment
from fleet.errors import NotFound
from fleet.store.audit import AuditFilter, Recorded
from fleet.views import iso

router = APIRouter(tags=["audit"])
log = logging.getLogger(__name__)


def actor_of(caller: Caller | None) -> str:
    """Who acted, as an entry names it (never a key)."""
    if caller is None:
        return "unknown key"
    if caller is ANONYMOUS:
        return "api"
    return f"operator:{caller.name}" if caller.operator else f"caller:{caller.name}"


class AuditTrail:
    """ASGI middleware: one audit entry per audited request (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.refusals = audit.RefusalGate()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            entry = self._entry(scope, status)
            if entry is not None:
                rt = scope["app"].state.runtime
                try:
                    await run_in_threadpool(rt.store.record, entry)
                except Exception:  # a lost entry is logged, never a failed request
                    log.warning(
                        "audit entry not recorded: %s %s",
                        entry.action,
                        entry.outcome,
                        exc_info=True,
                    )

    def _entry(self, scope: Scope, status: int) -> audit.Entry | None:
        client = scope.get("client")
        address = str(client[0]) if client else None
        now = datetime.now(UTC)
        if status == 401:
            seen = self.refusals.let(address or "?", time.monotonic())
            if seen is None:
                return None
            return audit.Entry(
                at=now,
                actor="unknown key",
                action=audit.KEY_REFUSED,
                outcome="refused 401",
                address=address,
                object=f"{scope['method']} {scope['path']}"[:300],
                detail={"refusals": seen},
            )
        route = scope.get("route")
        if route is None:
            return None
        state: dict[str, Any] = scope.get("state") or {}
        if state.get("audit_skip"):
            return None
        action = (
            state.get("audit_action")  # a route that acted beyond its own (an interrupt)
            or audit.ACTIONS.get(getattr(route, "operation_id", None) or "")
            or audit.ACTIONS.get(f"{scope['method']} {getattr(route, 'path', '')}")
        )
        if action is None:
            return None
        caller: Caller | None = state.get("caller")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        named = (query.get("tenant") or [None])[0]
        # the tenant acted in when the key reaches it; else the key's own (an attempt on
        # another tenant is its actor's record, never shown to that tenant)
        own = caller.tenant if caller else None
        reached = named if caller is not None and named and caller.reaches(named) else None
        tenant = state.get("audit_tenant") or reached or own
        params = scope.get("path_params") or {}
        return audit.Entry(
            at=now,
            actor=actor_of(caller),
            action=action,
            outcome=audit.outcome_of(status),
            tenant=tenant,
            object=state.get("audit_object") or audit.object_of(params, tenant),
            address=address,
            detail=dict(state.get("audit") or {}),
        )


def note(request: Request, **detail: Any) -> None:
    """What a route adds to its audit entry (a decision, counts): no text of what it acted on."""
    found = getattr(request.state, "audit", None) or {}
    request.state.audit = {**found, **detail}


def entry_json(found: Recorded) -> dict[str, Any]:
    e = found.entry
    return {
        "id": found.id,
        "at": iso(e.at),
        "tenant": e.tenant,
        "actor": e.actor,
        "action": e.action,
        "object": e.object,
        "address": e.address,
        "outcome": e.outcome,
        "detail": e.detail,
    }


@router.get(
    "/v1/audit",
    operation_id="ListAuditEntries",
    responses=problem_responses(401, 403, 404, 422, 503),
    summary="Who did what, newest first (operators)",
)
def list_audit_entries(
    rt: RuntimeDep,
    caller: CallerDep,
    *,
    tenant: Annotated[str | None, Query(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")] = None,
    action: Annotated[
        str | None, Query(max_length=64, description="`task.cancel`, or `task`")
    ] = None,
    actor: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[str | None, Query(description="From this time (ISO, with offset)")] = None,
    until: Annotated[str | None, Query(description="Before this time (ISO, with offset)")] = None,
    before: Annotated[
        int | None, Query(ge=1, description="Entries before this id (paging)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=audit.MAX_LISTED)] = 100,
) -> JSONResponse:
    """The entries of the tenants the key reaches (a key that reaches every tenant also sees
    those of no tenant: refused keys)."""
    who = require_operator(caller)
    if tenant is not None and not who.reaches(tenant):
        raise NotFound(f"no tenant {tenant!r} within this key's reach", field="tenant")
    flt = AuditFilter(
        tenants=who.reach,
        tenant=tenant,
        action=action,
        actor=actor,
        since=moment(since, "since", field="since"),
        until=moment(until, "until", field="until"),
        before_id=before,
        limit=limit,
    )
    return JSONResponse({"entries": [entry_json(e) for e in rt.store.audit_entries(flt)]})
