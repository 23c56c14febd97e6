"""Webhook triggers: ``POST /v1/triggers/{name}`` turns a delivery into a task (or, for a
trigger with ``[event]``, into an event that waiting runs resume on: ``wait_for_event``).

Who may deliver, in this order:

1. the trigger has a ``[signature]``: the HMAC signature must verify (bearer keys do not replace
   it); a secret env var that is not set on the server is a 503, so the sender retries later and
   nothing is accepted unsigned;
2. otherwise, if callers with ``source = "webhook:<name>"`` are configured: a bearer key of one;
3. otherwise the trigger is open (anyone who knows the URL) if it says ``public = true`` or the
   whole server is open (no callers configured at all); else every delivery is refused (401):
   a server that checks keys does not take unsigned, unauthenticated deliveries by default.

A refused delivery stores nothing. The task's conversation lives in scope ``webhook:<name>``;
an event reaches the waits of ``[event] scope`` (default ``webhook:<name>``) in the trigger's
tenant.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from fleet import views
from fleet.api.auth import Caller, KeyRing, Unauthorized
from fleet.api.deps import RuntimeDep
from fleet.api.schemas import SubmitTaskResponse, problem_responses
from fleet.config import FleetConfig, TriggerConfig
from fleet.constants import MAX_WEBHOOK_BYTES
from fleet.domain import event_waits, webhooks
from fleet.errors import FleetError, NotFound, Unavailable
from fleet.runtime import Runtime
from fleet.views import admission_json

log = logging.getLogger(__name__)

router = APIRouter(tags=["triggers"])

#: Open triggers already warned about (once per process).
_warned_open: set[str] = set()
#: A delivery body larger than this is refused (413) before it is read whole (GitHub caps at 25 MB).
MAX_BODY_BYTES = MAX_WEBHOOK_BYTES


class PayloadTooLarge(FleetError):
    """The delivery body is larger than the server accepts."""

    status = 413
    title = "Payload too large"


def find_trigger(config: FleetConfig, name: str) -> TriggerConfig:
    trigger = config.triggers.get(name)
    if trigger is None:  # callers are not authenticated yet: name nothing else
        raise NotFound(f"no trigger named {name!r}", field="name")
    return trigger


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body (signatures cover these exact bytes), refused past ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is {declared} bytes; a delivery may be {limit} at most")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over {limit} bytes; a delivery may be {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def authenticate(
    trigger: TriggerConfig,
    config: FleetConfig,
    ring: KeyRing,
    *,
    body: bytes,
    headers: dict[str, str],
    authorization: str | None,
) -> str | None:
    """Apply the rules in the module docstring; raise 401/403/503 errors, or return who sent
    the delivery: a webhook caller's name, ``trigger:<name>`` for a verified signature, None
    for an open trigger."""
    scope = f"webhook:{trigger.name}"
    if trigger.signature is not None:
        secret = os.environ.get(trigger.signature.secret_env, "")
        if not secret:
            log.error(
                "trigger %r: environment variable %s is not set; refusing deliveries",
                trigger.name,
                trigger.signature.secret_env,
            )
            raise Unavailable(
                f"trigger {trigger.name!r} cannot verify signatures yet: its secret is not set "
                "on the server; retry the delivery later"
            )
        webhooks.verify(trigger.signature, secret.encode(), body, headers, now=time.time())
        return f"trigger:{trigger.name}"
    if not any(c.home == scope for c in config.callers.values()):
        if not (trigger.public or ring.open):
            raise Unauthorized(
                f"trigger {trigger.name!r} accepts no deliveries: it has neither a signature nor "
                "callers; the operator must configure one (or mark it public = true)"
            )
        if trigger.name not in _warned_open:
            _warned_open.add(trigger.name)
            log.warning("trigger %r has no signature and no callers: anyone may deliver", scope)
        return None
    caller: Caller = ring.authenticate(authorization)
    caller.check_source(scope)
    if trigger.deployment is not None:
        caller.check_deployment(trigger.deployment)
    return caller.name


@router.post(
    "/v1/triggers/{name}",
    operation_id="DeliverWebhook",
    status_code=202,
    summary="Deliver a webhook: its fields become a task of the trigger's deployment",
    responses={
        200: {
            "model": SubmitTaskResponse,
            "description": "A repeated delivery id: the original "
            "task (`duplicate: true`); nothing new was created.",
        },
        202: {"model": SubmitTaskResponse, "description": "The admitted task."},
        **problem_responses(401, 403, 404, 409, 413, 422, 503),
        413: {"description": "The body is larger than the server accepts."},
    },
)
async def deliver(
    request: Request,
    rt: RuntimeDep,
    name: Annotated[str, Path(description="The trigger (a file in config/triggers).")],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> JSONResponse:
    trigger = find_trigger(rt.config, name)
    body = await read_body(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    sender = authenticate(
        trigger,
        rt.config,
        request.app.state.keyring,
        body=body,
        headers=headers,
        authorization=authorization,
    )
    document = webhooks.parse_body(body)
    tenant = rt.config.tenant_of_trigger(trigger.name)
    if trigger.deployment is None:  # an [event] trigger
        sent = await run_in_threadpool(_send_event, rt, trigger, document, headers, sender)
        return JSONResponse(views.sent_json(sent), status_code=200 if sent.duplicate else 202)
    delivery = webhooks.extract(trigger, document, headers)
    admission = await run_in_threadpool(
        rt.dispatcher.submit,
        trigger.deployment,
        delivery.input,
        scope=f"webhook:{trigger.name}",
        key=delivery.key,
        labels=delivery.labels,
        idempotency_key=delivery.idempotency_key,
        caller=sender,
        resource_id=delivery.resource_id,
        tenant=tenant,
    )
    return JSONResponse(admission_json(admission), status_code=200 if admission.duplicate else 202)


def _send_event(
    rt: Runtime,
    trigger: TriggerConfig,
    document: object,
    headers: dict[str, str],
    sender: str | None,
) -> event_waits.Sent:
    """A delivery to an ``[event]`` trigger: an event in the trigger's tenant, reaching the
    waits of its ``scope`` (default the trigger's own)."""
    assert trigger.event is not None
    found = webhooks.extract_event(trigger, document, headers)
    waiting = rt.dispatcher.waiting
    event = waiting.new_event(
        name=found.name,
        key=found.key,
        data=found.data,
        event_id=found.event_id,
        tenant=rt.config.tenant_of_trigger(trigger.name),
        scope=trigger.event.scope or trigger.scope,
        sender=sender or f"trigger:{trigger.name}",
    )
    return waiting.send_event(event)
