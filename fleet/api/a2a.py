"""A2A per deployment: ``POST /a2a/{deployment}`` (JSON-RPC, v1.0 and v0.3) and its agent card.

The official a2a-sdk parses and answers the JSON-RPC (its ``JsonRpcDispatcher``, v0.3 methods
through its compat adapter); :class:`~fleet.api.a2a_handler.FleetRequestHandler` admits into our
queue. This route only authenticates, checks the deployment, and hands over; the SDK is loaded
on the first A2A request (``fleet.api.a2a_sdk``).

Callers: with callers configured, a bearer key of a caller with ``source = "a2a"`` (scope
``a2a:<caller>``); other keys get 403, none or a wrong one 401 (problem+json, before any
JSON-RPC). With no callers configured at all (open mode) everyone is ``a2a:anonymous``, so they
share contextIds. One conversation per (contextId, caller): the contextId is the conversation key
within the caller's scope.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from fleet.api.auth import Caller, KeyRing
from fleet.api.deps import RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.config import DeploymentConfig
from fleet.domain import a2a as rules
from fleet.errors import NotFound
from fleet.runtime import Runtime

router = APIRouter(tags=["a2a"])

#: The caller of the A2A endpoints when no callers are configured at all.
ANONYMOUS = Caller(name="anonymous", scope="a2a:anonymous", deployments=None)

DeploymentName = Annotated[str, Path(description="A deployment (a file in config/deployments).")]


def _deployment(rt: Runtime, name: str) -> DeploymentConfig:
    """The deployment behind ``/a2a/<name>``; 404 without listing the others."""
    dep = rt.config.deployments.get(name)
    if dep is None:
        raise NotFound(f"no A2A agent at /a2a/{name}", field="deployment")
    return dep


def a2a_caller(ring: KeyRing, authorization: str | None, deployment: str) -> Caller:
    """The A2A caller of a request; 401 without a valid key, 403 for another source's key."""
    if ring.open:
        return ANONYMOUS
    caller = ring.authenticate(authorization)
    caller.check_source("a2a")
    caller.check_deployment(deployment)
    return caller


@router.get(
    "/a2a/{deployment}/.well-known/agent-card.json",
    operation_id="GetAgentCard",
    summary="The deployment's A2A agent card",
    responses=problem_responses(404),
)
async def get_agent_card(request: Request, rt: RuntimeDep, deployment: DeploymentName) -> Response:
    dep = _deployment(rt, deployment)
    rpc_url = str(request.url_for("a2a_rpc", deployment=dep.name))
    ring: KeyRing = request.app.state.keyring
    from fleet.api import a2a_sdk

    card = a2a_sdk.agent_card(dep, rpc_url, secured=not ring.open)
    return JSONResponse(a2a_sdk.agent_card_to_dict(card))


# The card's name before A2A 0.3 (clients of 0.2 look here).
router.add_api_route(
    "/a2a/{deployment}/.well-known/agent.json",
    get_agent_card,
    methods=["GET"],
    include_in_schema=False,
)

_ENVELOPE: dict[str, Any] = {
    "type": "object",
    "required": ["jsonrpc", "method", "id"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"type": ["string", "integer"]},
        "method": {
            "type": "string",
            "description": "v1.0: SendMessage, SendStreamingMessage, SubscribeToTask, GetTask, "
            "CancelTask, ListTasks (header `A2A-Version: 1.0`); v0.3: message/send, "
            "message/stream, tasks/resubscribe, tasks/get, tasks/cancel. The streaming methods "
            "answer with Server-Sent Events.",
        },
        "params": {"type": "object"},
    },
}


@router.post(
    "/a2a/{deployment}",
    name="a2a_rpc",
    operation_id="A2AJsonRpc",
    summary="A2A JSON-RPC: answers are JSON-RPC results or errors (HTTP 200)",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ENVELOPE}}}
    },
    responses=problem_responses(401, 403, 404, 429),
)
async def a2a_rpc(
    request: Request,
    rt: RuntimeDep,
    deployment: DeploymentName,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    # Authenticate first: an unknown caller learns nothing about which deployments exist.
    caller = a2a_caller(request.app.state.keyring, authorization, deployment)
    dep = _deployment(rt, deployment)
    request.state.a2a_caller = caller
    request.state.a2a_deployment = dep.name
    if rt.config.tenant(caller.tenant).quotas and await _submits(request):
        # the tenant's quotas answer as SubmitTask's do: 429 problem+json, before the SDK
        await run_in_threadpool(rt.dispatcher.quotas.gate, caller.tenant, queued=True)
        request.state.a2a_gated = True
    from fleet.api import a2a_sdk

    return await a2a_sdk.dispatcher(request).handle_requests(request)


#: JSON-RPC methods that submit a message (both protocol versions).
SENDS = frozenset({"SendMessage", "SendStreamingMessage", "message/send", "message/stream"})


async def _submits(request: Request) -> bool:
    """Does this JSON-RPC request send a message that may become a task (the SDK reads the
    same cached body)? A decision for one of the caller's waiting tasks (a data part with a
    ``decision``, given its ``taskId``) never does: like DecideApproval it is not gated, so a
    tenant whose queue is full of tasks waiting for approvals can still approve them."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        return False  # the SDK answers it with a parse error
    if not isinstance(body, dict) or body.get("method") not in SENDS:
        return False
    params = body.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict) or not message.get("taskId"):
        return True
    parts = message.get("parts")
    return not (
        isinstance(parts, list) and rules.is_decision([p for p in parts if isinstance(p, dict)])
    )
