"""SendEvent: ``POST /v1/events`` hands the fleet an event from outside (a payment cleared, a
job finished); the runs waiting for it (``wait_for_event``) in the caller's tenant and scope
resume with its data. The path is not a task event stream (``fleet.api.events``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from fleet import views
from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import _Camel, problem_responses
from fleet.domain import event_waits as rules
from fleet.errors import Forbidden
from fleet.runtime import Runtime

router = APIRouter(tags=["events"])


class SendEventRequest(_Camel):
    """An event from outside."""

    event: str | None = Field(
        default=None, description="Its name: `payment.cleared`, `ci.finished`."
    )
    key: str | None = Field(
        default=None, description="Which one it is about (an order id): waits name the same key."
    )
    data: Any = Field(
        default=None,
        description="Any JSON value (at most the agents' `max_input_bytes`), given to the "
        "waiting run as outside data, never as instructions; secrets are redacted.",
    )
    id: str | None = Field(
        default=None,
        description="The sender's id of the event, unique in the tenant: a repeated id "
        "changes nothing (send it again safely).",
    )
    tenant: str | None = Field(
        default=None,
        description="Operator keys: the tenant it is for (default the key's own; within its "
        "reach). Other keys send to their own tenant only.",
    )


class SendEventResponse(_Camel):
    id: str
    event: str
    key: str
    tenant: str
    resolved: int = Field(
        description="How many waits it resolved: when it came, and since, waits that started "
        "within the lookback window (a repeat answers the first event's count)."
    )
    duplicate: bool = Field(description="Its id was seen before: nothing changed.")
    received_at: datetime


def walls(caller: Caller, tenant: str | None) -> tuple[str, str | None]:
    """The tenant and scope a caller's event reaches: an operator's, any scope of a tenant in
    its reach; another key's, its own tenant and scope."""
    if caller is ANONYMOUS:
        return tenant or caller.tenant, caller.scope
    if caller.operator:
        target = tenant or caller.tenant
        if not caller.reaches(target):
            raise Forbidden(
                f"tenant {target!r} is not within this operator key's reach", field="tenant"
            )
        return target, None
    if tenant is not None and tenant != caller.tenant:
        raise Forbidden(
            f"this key sends events to its own tenant ({caller.tenant!r}) only", field="tenant"
        )
    return caller.tenant, caller.scope


def send(rt: Runtime, caller: Caller, body: SendEventRequest) -> rules.Sent:
    tenant, scope = walls(caller, body.tenant)
    event = rt.dispatcher.waiting.new_event(
        name=body.event,
        key=body.key,
        data=body.data,
        event_id=body.id,
        tenant=tenant,
        scope=scope,
        sender=caller.name,
    )
    return rt.dispatcher.waiting.send_event(event)


@router.post(
    "/v1/events",
    operation_id="SendEvent",
    status_code=202,
    summary="Send an event: the runs waiting for its name and key resume with its data",
    responses={
        200: {"model": SendEventResponse, "description": "A repeated id: nothing changed."},
        202: {"model": SendEventResponse, "description": "The event, and the waits it resolved."},
        **problem_responses(400, 401, 403, 422, 503),
    },
)
async def send_event(
    rt: RuntimeDep, caller: CallerDep, body: Annotated[SendEventRequest, Body()]
) -> JSONResponse:
    """An event resolves every pending `wait_for_event` of its name and key in the caller's
    tenant and scope (an operator key's: every scope of the tenant), and is kept for
    `FLEET_EVENT_LOOKBACK` (15 min) for waits that start after it."""
    sent = await run_in_threadpool(send, rt, caller, body)
    return JSONResponse(views.sent_json(sent), status_code=200 if sent.duplicate else 202)
