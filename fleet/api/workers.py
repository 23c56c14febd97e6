"""ListWorkers: the fleet's live processes (workers, API servers, beats) with their release,
runs in flight and free slots, for operator keys (a rolling upgrade shows who runs what).

The registry is the fleet's, not a tenant's: an operator key sees every process, whichever
tenants it reaches (no tenant's data is in an entry). Embedded, the one serving process.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from fleet.api.auth import require_operator
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.runtime import Runtime, redis_client
from fleet.views.workers import View, read_workers

router = APIRouter(tags=["workers"])


def _read(rt: Runtime) -> View:
    if rt.settings.embedded:
        from fleet.dispatch.registry import Membership, Registry

        this = Membership(Registry(None), "embedded", ttl_s=rt.settings.registry_ttl).entry()
        return read_workers(rt.settings, None, this=this)
    if rt.membership is not None:  # this API process's own client
        return read_workers(rt.settings, rt.membership.registry.client)
    client = redis_client(rt.settings)
    try:
        return read_workers(rt.settings, client)
    finally:
        client.close()


@router.get(
    "/v1/workers",
    operation_id="ListWorkers",
    responses=problem_responses(401, 403, 503),
    summary="List the fleet's live processes and their releases (operators)",
)
async def list_workers(rt: RuntimeDep, caller: CallerDep) -> JSONResponse:
    """Every registered process (role, host, pid, release, schema revision, runs in flight,
    free slots), and the releases among them; an entry not renewed within
    `FLEET_REGISTRY_TTL` is gone."""
    require_operator(caller)
    return JSONResponse(await run_in_threadpool(_read, rt))
