"""ListTenants, GetTenant: each tenant's weight, quotas, backlog, tokens today and refusals, for
operator keys (``operator = true``), in the tenants they reach.

An operator sees the tenants its caller file lets it reach (its own unless it lists more); a
tenant outside that reach answers 404 exactly like one that does not exist, so a key cannot
learn other customers' names. Shaping is ``fleet.views.tenants``' (the CLI and the UI share it).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from fleet.api.auth import require_operator
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.views.tenants import one_tenant, read_tenants

router = APIRouter(tags=["tenants"])

_AUTH = (401, 403, 503)

TenantName = Annotated[str, Path(min_length=1, description="The tenant's name (`acme`).")]


@router.get(
    "/v1/tenants",
    operation_id="ListTenants",
    responses=problem_responses(*_AUTH),
    summary="List tenants with their quotas, backlog and budget (operators)",
)
def list_tenants(rt: RuntimeDep, caller: CallerDep) -> JSONResponse:
    """Every configured tenant the key reaches, and any other it reaches that has unfinished
    tasks or used tokens today, sorted by name."""
    who = require_operator(caller)
    return JSONResponse({"tenants": read_tenants(rt, who.reaches)})


@router.get(
    "/v1/tenants/{tenant}",
    operation_id="GetTenant",
    responses=problem_responses(*_AUTH, 404),
    summary="Get one tenant's quotas, backlog and budget (operators)",
)
def get_tenant(tenant: TenantName, rt: RuntimeDep, caller: CallerDep) -> JSONResponse:
    """One tenant as ListTenants shows it; out of reach or unknown: 404, alike."""
    who = require_operator(caller)
    return JSONResponse(one_tenant(read_tenants(rt, who.reaches), tenant))
