"""CreateSchedule, ListSchedules, GetSchedule, DeleteSchedule: a caller's schedules.

A schedule belongs to the caller that made it: its tenant and scope, which its tasks take. A
caller sees, lists and deletes only its own scope's schedules (also those a file in
``config/schedules`` gives its caller; deleting one of those is refused: delete the file); any
other answers 404 exactly as a missing one does. Bad values answer 422 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import _Camel, problem_responses
from fleet.config.base import _NAME, _matching
from fleet.config.schedules import ScheduleSpec
from fleet.dispatch import schedules as manager
from fleet.errors import InputError, NotFound
from fleet.runtime import Runtime
from fleet.views.schedules import schedule_json

router = APIRouter(tags=["schedules"])

_AUTH = (401, 403, 503)

ScheduleName = Annotated[str, Path(min_length=1, max_length=63, description="The schedule's name.")]


class CreateScheduleRequest(_Camel, ScheduleSpec):
    """A schedule: a cron (in a time zone) or an interval that submits a task at each tick."""

    name: Annotated[str, _matching(_NAME, "must be 1-63 lowercase letters, digits, '-' or '_'")] = (
        Field(description="Its name in the caller's scope (lowercase letters, digits, - and _).")
    )


def _own(caller: Caller) -> tuple[str, str]:
    caller.check_source("api")
    return caller.tenant, caller.scope


def _deployment(rt: Runtime, caller: Caller, name: str) -> None:
    """A deployment the caller may use (403) and that exists (422 naming the caller's ones,
    and no server path)."""
    caller.check_deployment(name)
    if name not in rt.config.deployments:
        allowed = caller.deployments
        yours = ", ".join(
            d for d in sorted(rt.config.deployments) if allowed is None or d in allowed
        )
        raise InputError(
            f"no deployment named {name!r}; yours: {yours or 'none'}", field="deployment"
        )


@router.post(
    "/v1/schedules",
    operation_id="CreateSchedule",
    status_code=201,
    responses=problem_responses(*_AUTH, 400, 409, 422),
    summary="Create a schedule (its tasks take the caller's tenant and scope)",
)
def create_schedule(
    body: CreateScheduleRequest, rt: RuntimeDep, caller: CallerDep, request: Request
) -> JSONResponse:
    """Store a schedule; the beat admits one task at each tick (labels `schedule` and `tick`).

    Give `cron` (5 fields, read in `timezone`) or `every` (`15m`, at least `1s`). A name the
    caller's scope already has answers 409.
    """
    tenant, scope = _own(caller)
    _deployment(rt, caller, body.deployment)
    request.state.audit_object = body.name
    spec = ScheduleSpec.model_validate(body.model_dump(exclude={"name"}))
    rec = manager.create(
        rt.dispatcher,
        body.name,
        spec,
        tenant=tenant,
        scope=scope,
        caller=None if caller is ANONYMOUS else caller.name,
    )
    return JSONResponse(
        schedule_json(rec), status_code=201, headers={"Location": f"/v1/schedules/{rec.name}"}
    )


@router.get(
    "/v1/schedules",
    operation_id="ListSchedules",
    responses=problem_responses(*_AUTH),
    summary="List the caller's schedules with their next tick",
)
def list_schedules(rt: RuntimeDep, caller: CallerDep) -> JSONResponse:
    """The schedules of the caller's tenant and scope (made over the API or in
    config/schedules for its caller), by name."""
    tenant, scope = _own(caller)
    stored = rt.store.list_schedules(tenant=tenant, scope=scope)
    found = manager.with_files(rt.config, stored, rt.dispatcher.clock(), only=(tenant, scope))
    return JSONResponse({"schedules": [schedule_json(r) for r in found]})


@router.get(
    "/v1/schedules/{name}",
    operation_id="GetSchedule",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Get one of the caller's schedules",
)
def get_schedule(name: ScheduleName, rt: RuntimeDep, caller: CallerDep) -> JSONResponse:
    """The schedule, its next and last tick, and what the last tick became."""
    tenant, scope = _own(caller)
    found = manager.one(rt.dispatcher, tenant, scope, name)
    if found is None:
        raise NotFound(f"no schedule named {name!r}", field="name")
    body: dict[str, Any] = schedule_json(found)
    return JSONResponse(body)


@router.delete(
    "/v1/schedules/{name}",
    operation_id="DeleteSchedule",
    status_code=204,
    responses=problem_responses(*_AUTH, 404, 409, 422),
    summary="Delete one of the caller's schedules (not one from config/schedules)",
)
def delete_schedule(name: ScheduleName, rt: RuntimeDep, caller: CallerDep) -> Response:
    """No tick fires after it; tasks already admitted stay."""
    tenant, scope = _own(caller)
    manager.delete(rt.dispatcher, name, tenant=tenant, scope=scope)
    return Response(status_code=204)
