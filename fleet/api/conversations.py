"""ListConversations, GetConversation, ResetConversation, DeleteConversation,
PruneConversations: the conversation lifecycle for operator keys (``operator = true``).

An operator sees every scope of its deployments in the tenants it reaches (its own, or those its
caller file lists), so keys are scoped (``api:acme:ticket-4711``, ``webhook:orders:4711``; a
bare key is an API one of ``tenant``, else of the caller's own tenant, as on every other
endpoint: ``Lifecycle.tenant_of``); another tenant's conversation answers 404 like a missing
one. Routes stay thin: the lifecycle manager (``fleet.dispatch.lifecycle``)
decides and the store writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from pydantic.alias_generators import to_camel

from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.dispatch.lifecycle import delete_json, info_json, prune_json, reset_json
from fleet.domain import lifecycle as rules
from fleet.domain import operator as op
from fleet.errors import Forbidden, InputError
from fleet.runtime import Runtime
from fleet.store.operator import ConversationFilter
from fleet.views import iso

router = APIRouter(tags=["conversations"])

_AUTH = (401, 403, 503)
#: Most conversations one ListConversations returns.
MAX_LISTED = 500

ConversationKey = Annotated[
    str,
    Path(
        alias="conversationKey",
        min_length=1,
        description="The scoped conversation key (`api:acme:ticket-4711`, `api:k` of the "
        "shared scope); a bare key is an API one of the caller's own tenant.",
    ),
]
Deployment = Annotated[str, Query(min_length=1, description="The conversation's deployment.")]
Tenant = Annotated[
    str | None,
    Query(
        pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$",
        description="Whose conversation (default: what the key's scope tells, else the "
        "caller's own tenant); needed for delegated and singleton conversations, and bare keys, "
        "of another tenant.",
    ),
]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ResetRequest(_Body):
    keep_notes: StrictBool = Field(
        default=False, description="Keep the conversation's notes into the new generation."
    )
    cancel_running: StrictBool = Field(
        default=False,
        description="Stop a running task first (else a running task makes this a 409).",
    )


class PruneRequest(_Body):
    deployment: str | None = Field(default=None, min_length=1, description="Only this one.")
    older_than: str | None = Field(
        default=None,
        description="Delete messages older than this (`30d`, `12h`) instead of each "
        "deployment's `retention`; stored caps are enforced either way.",
    )
    dry_run: StrictBool = Field(default=False, description="Only count what would go.")


def _operator(rt: Runtime, caller: Caller, deployment: str | None = None) -> Caller:
    """Operator keys only (an API without keys is open, as its UI is)."""
    if caller is not ANONYMOUS and not caller.operator:
        raise Forbidden(
            f"caller {caller.name!r} is not an operator (operator = true in its caller file)"
        )
    if deployment is not None:
        caller.check_deployment(deployment)
    return caller


def _by(caller: Caller) -> str:
    return "api" if caller is ANONYMOUS else f"operator:{caller.name}"


@router.get(
    "/v1/conversations",
    operation_id="ListConversations",
    responses=problem_responses(*_AUTH, 422),
    summary="List conversations (operators)",
)
def list_conversations(
    rt: RuntimeDep,
    caller: CallerDep,
    deployment: Annotated[str | None, Query(min_length=1)] = None,
    state: Annotated[op.State | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 100,
) -> JSONResponse:
    """Conversations with unfinished work first (stuck, running, queued, waiting), then the most
    recently active; every scope of the operator's deployments."""
    who = _operator(rt, caller, deployment)
    if deployment is not None:
        rt.dispatcher.lifecycle.ref(deployment, "x")  # 422 naming the configured ones
    flt = ConversationFilter(
        deployments=who.deployments,
        deployment=deployment,
        state=state,
        limit=limit,
        tenants=who.reach,
    )
    rows = rt.store.conversations(flt, datetime.now(UTC))
    return JSONResponse(
        {
            "conversations": [
                {
                    "id": str(r.id),
                    "deployment": r.deployment,
                    "tenant": r.tenant,
                    "conversation": r.conversation,
                    "state": r.state,
                    "reason": r.reason or None,
                    "waiting": r.pending.waiting,
                    "updatedAt": iso(r.updated_at),
                }
                for r in rows
            ]
        }
    )


@router.get(
    "/v1/conversations/{conversationKey:path}",
    operation_id="GetConversation",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Get a conversation's generation and counts (operators)",
)
def get_conversation(
    conversation_key: ConversationKey,
    deployment: Deployment,
    rt: RuntimeDep,
    caller: CallerDep,
    tenant: Tenant = None,
) -> JSONResponse:
    """404 for an unknown key; looking creates nothing."""
    who = _operator(rt, caller, deployment)
    info = rt.dispatcher.lifecycle.show(
        deployment, conversation_key, tenant=tenant, reach=who.reach, own=who.tenant
    )
    return JSONResponse(info_json(info))


@router.post(
    "/v1/conversations/{conversationKey:path}/reset",
    operation_id="ResetConversation",
    responses=problem_responses(*_AUTH, 400, 404, 409, 422),
    summary="Start a new generation of a conversation (operators)",
)
def reset_conversation(
    conversation_key: ConversationKey,
    deployment: Deployment,
    rt: RuntimeDep,
    caller: CallerDep,
    *,
    body: ResetRequest | None = None,
    tenant: Tenant = None,
) -> JSONResponse:
    """Earlier history (and notes, unless `keepNotes`) is no longer recalled; queued tasks of
    the old generation are cancelled with a reason; an idempotency key seen before still
    answers duplicate. 409 while a task runs, unless `cancelRunning`."""
    who = _operator(rt, caller, deployment)
    req = body or ResetRequest()
    info, done = rt.dispatcher.lifecycle.reset(
        deployment,
        conversation_key,
        keep_notes=req.keep_notes,
        cancel_running=req.cancel_running,
        tenant=tenant,
        reach=who.reach,
        own=who.tenant,
    )
    return JSONResponse(reset_json(info, done, keep_notes=req.keep_notes))


@router.delete(
    "/v1/conversations/{conversationKey:path}",
    operation_id="DeleteConversation",
    responses=problem_responses(*_AUTH, 404, 409, 422),
    summary="Delete a conversation, leaving a tombstone (operators)",
)
def delete_conversation(
    conversation_key: ConversationKey,
    deployment: Deployment,
    rt: RuntimeDep,
    caller: CallerDep,
    *,
    cancel_running: Annotated[bool, Query(alias="cancelRunning")] = False,
    tenant: Tenant = None,
) -> JSONResponse:
    """Its tasks, runs, messages and notes go; a later submission with its key starts fresh
    and its answer says so (`freshAfterDelete`). 409 while a task runs, unless
    `cancelRunning`."""
    who = _operator(rt, caller, deployment)
    stone = rt.dispatcher.lifecycle.delete(
        deployment,
        conversation_key,
        by=_by(who),
        cancel_running=cancel_running,
        tenant=tenant,
        reach=who.reach,
        own=who.tenant,
    )
    return JSONResponse(delete_json(stone))


@router.post(
    "/v1/conversations:prune",
    operation_id="PruneConversations",
    responses=problem_responses(*_AUTH, 400, 422),
    summary="Delete messages past retention and past each conversation's stored cap (operators)",
)
def prune_conversations(
    rt: RuntimeDep, caller: CallerDep, body: PruneRequest | None = None
) -> JSONResponse:
    """What the sweeper does on its clock, now and in full, in the conversations of the
    tenants the key reaches; `dryRun` only counts."""
    req = body or PruneRequest()
    who = _operator(rt, caller, req.deployment)
    older = None if req.older_than is None else rules.parse_age(req.older_than)
    if req.deployment is None and who.deployments is not None:
        raise InputError(
            "this key may prune only its own deployments: name one in `deployment`",
            field="deployment",
        )
    report = rt.dispatcher.lifecycle.prune(
        deployment=req.deployment, older_than_s=older, dry_run=req.dry_run, tenants=who.reach
    )
    out: dict[str, Any] = prune_json(report)
    return JSONResponse(out)
