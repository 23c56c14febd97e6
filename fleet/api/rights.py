"""ExportResource, EraseResource, ExportConversation, EraseConversation: a person's data.

For operator keys within their reach, and for keys whose caller file says ``erase = true``
(their own tenant only); another key gets 403, a tenant outside the key's reach 404. Resource
ids may hold any printable character: the routes take them as a path that may contain ``/``
(percent-encode ``?``, ``#`` and ``%``). Exports stream JSON lines (``application/x-ndjson``),
one self-describing object a line, the ``export`` header first. The manager is
``fleet.dispatch.rights``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from pydantic.alias_generators import to_camel

from fleet.api.audit import note
from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.dispatch.rights import Erasure, erasure_json
from fleet.domain import rights as rules
from fleet.errors import Forbidden, NotFound
from fleet.runtime import Runtime

router = APIRouter(tags=["data rights"])

_AUTH = (401, 403, 503)
NDJSON = "application/x-ndjson"

Resource = Annotated[
    str,
    Path(min_length=1, description="The resource id (any printable characters; `/` allowed)."),
]
Tenant = Annotated[
    str | None,
    Query(
        pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$",
        description="Whose resource (default: the key's own tenant).",
    ),
]
CancelRunning = Annotated[
    bool,
    Query(
        alias="cancelRunning",
        description="Cancel its running, waiting and queued tasks first (default); false: "
        "409 and nothing erased while any runs or waits.",
    ),
]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ConversationRequest(_Body):
    deployment: str = Field(min_length=1, description="The conversation's deployment.")
    conversation_key: str = Field(min_length=1, description="Its scoped key (`api:acme:k`).")
    tenant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    cancel_running: StrictBool = Field(default=True, description="Cancel its tasks first.")


def _who(caller: Caller, tenant: str | None) -> tuple[Caller, str]:
    """The caller and the tenant it acts in, if it may: 403 for a key that is neither an
    operator nor ``erase = true``; 404 for a tenant outside its reach."""
    if caller is ANONYMOUS:
        return caller, tenant or caller.tenant
    if not (caller.operator or caller.erase):
        raise Forbidden(
            f"caller {caller.name!r} may not export or erase a person's data "
            "(operator = true, or erase = true, in its caller file)"
        )
    tenant = tenant or caller.tenant
    allowed = caller.reaches(tenant) if caller.operator else tenant == caller.tenant
    if not allowed:
        raise NotFound(f"no tenant {tenant!r} within this key's reach", field="tenant")
    return caller, tenant


def _by(caller: Caller) -> str:
    if caller is ANONYMOUS:
        return "api"
    return f"operator:{caller.name}" if caller.operator else f"caller:{caller.name}"


def _erased(request: Request, erasure: Erasure) -> JSONResponse:
    """The answer, its counts noted in the audit entry (the entry names no data)."""
    found = erasure_json(erasure)
    note(request, counts={k: n for k, n in found["counts"].items() if n})
    return JSONResponse(found)


def _lines(found: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    for line in found:
        yield (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()


@router.get(
    "/v1/resources/{resource:path}/export",
    operation_id="ExportResource",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Everything held about a resource, as JSON lines",
    response_class=StreamingResponse,
)
def export_resource(
    resource: Resource, rt: RuntimeDep, caller: CallerDep, tenant: Tenant = None
) -> StreamingResponse:
    """Every conversation a task naming the resource joined (messages, tasks, runs, steps,
    notes, observations, waits, deliveries), the working memory kept for it and the memory
    versions its runs wrote: one JSON object a line, never a push token or a delivery's
    credentials. A resource with nothing held answers the header line alone."""
    _, tenant = _who(caller, tenant)
    resource = rules.named(resource)
    tenant = rt.dispatcher.rights.tenant_of(resource, tenant, own=tenant)  # a known one
    lines = rt.dispatcher.rights.export_resource(tenant, resource)
    return StreamingResponse(_lines(lines), media_type=NDJSON)


@router.delete(
    "/v1/resources/{resource:path}",
    operation_id="EraseResource",
    responses=problem_responses(*_AUTH, 404, 409, 422),
    summary="Erase everything held about a resource",
)
def erase_resource(
    resource: Resource,
    rt: RuntimeDep,
    caller: CallerDep,
    request: Request,
    *,
    tenant: Tenant = None,
    cancel_running: CancelRunning = True,
) -> JSONResponse:
    """Its conversations with everything derived from them, its working memory, the memory
    versions its runs wrote, its buffered stream text; then new tasks naming it are refused
    until `refusedUntil` (`FLEET_ERASED_HOLD`). Counts per kind. Idempotent: run it again
    after a failure and it finishes."""
    who, tenant = _who(caller, tenant)
    resource = rules.named(resource)
    tenant = rt.dispatcher.rights.tenant_of(resource, tenant, own=tenant)  # a known one
    erasure = rt.dispatcher.rights.erase_resource(
        tenant, resource, by=_by(who), cancel_running=cancel_running
    )
    return _erased(request, erasure)


def _tenant_of(rt: Runtime, caller: Caller, key: str, tenant: str | None) -> str:
    """Whose conversation: as every operator path reads it (``Lifecycle.tenant_of``)."""
    return rt.dispatcher.lifecycle.tenant_of(key, tenant, own=caller.tenant)


def _conversation(rt: Runtime, who: Caller, tenant: str, deployment: str, key: str) -> Any:
    who.check_deployment(deployment)
    return rt.dispatcher.lifecycle.show(deployment, key, tenant=tenant, reach=None, own=tenant)


@router.get(
    "/v1/conversations:export",
    operation_id="ExportConversation",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Everything one conversation holds, as JSON lines",
    response_class=StreamingResponse,
)
def export_conversation(
    rt: RuntimeDep,
    caller: CallerDep,
    request: Request,
    *,
    deployment: Annotated[str, Query(min_length=1)],
    conversation_key: Annotated[str, Query(alias="conversationKey", min_length=1)],
    tenant: Tenant = None,
) -> StreamingResponse:
    """As ExportResource, for one conversation."""
    who, tenant = _who(caller, _tenant_of(rt, caller, conversation_key, tenant))
    info = _conversation(rt, who, tenant, deployment, conversation_key)
    request.state.audit_tenant = info.tenant
    request.state.audit_object = f"conversation:{info.id}"
    lines = rt.dispatcher.rights.export_conversation(info.id, info.tenant)
    return StreamingResponse(_lines(lines), media_type=NDJSON)


@router.post(
    "/v1/conversations:erase",
    operation_id="EraseConversation",
    responses=problem_responses(*_AUTH, 400, 404, 409, 422),
    summary="Erase one conversation with everything derived from it",
)
def erase_conversation(
    rt: RuntimeDep, caller: CallerDep, body: ConversationRequest, request: Request
) -> JSONResponse:
    """As EraseResource, for one conversation; its key's tombstone lets a later submission
    start afresh (`freshAfterDelete`), unlike an erased resource's."""
    who, tenant = _who(caller, _tenant_of(rt, caller, body.conversation_key, body.tenant))
    info = _conversation(rt, who, tenant, body.deployment, body.conversation_key)
    erasure = rt.dispatcher.rights.erase_conversation(
        info.id, info.tenant, by=_by(who), cancel_running=body.cancel_running
    )
    request.state.audit_tenant = info.tenant
    request.state.audit_object = f"conversation:{info.id}"
    return _erased(request, erasure)
