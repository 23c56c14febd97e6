"""Bulk actions: ``POST /v1/tasks:bulk`` retries or cancels the tasks a filter names (a dry run
counts them), as a job that runs in batches; ``GET /v1/tasks:bulk/{id}`` follows it.

A job acts only on what its key could act on one by one: its tenant and scope (an operator
key's: every scope of the tenants it reaches; the ``tenant`` filter is for operators), its
deployments. Another key's job answers 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from fleet.api.audit import note
from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import _Camel, problem_responses
from fleet.domain import bulk as rules
from fleet.errors import Forbidden, NotFound
from fleet.runtime import Runtime

router = APIRouter(tags=["tasks"])


class BulkFilter(_Camel):
    """Which tasks (all that is given must hold)."""

    status: list[str] | str | None = Field(
        default=None,
        description="retry: `failed` (default) and/or `cancelled`; cancel: unfinished "
        "statuses (default all of them).",
    )
    tenant: str | None = Field(default=None, description="Operator keys: one tenant they reach.")
    deployment: str | None = None
    since: str | None = Field(default=None, description="Created at or after (ISO, with offset).")
    until: str | None = Field(default=None, description="Created before (ISO, with offset).")
    labels: dict[str, str] | None = Field(default=None, description="Each must match exactly.")
    error_class: str | None = Field(default=None, description="`rate_limit`, `timeout`, …")


class BulkRequest(_Camel):
    action: Literal["retry", "cancel"] = Field(
        description="`retry`: a new task with the same input on the same conversation, "
        "queued behind what is there, labelled `retry_of`; `cancel`: as CancelTask."
    )
    filter: BulkFilter = Field(default_factory=BulkFilter)
    all: bool = Field(
        default=False, description="cancel: an empty filter means every unfinished task."
    )
    dry_run: bool = Field(default=False, description="Count and list; change nothing.")
    idempotency_key: str | None = Field(
        default=None,
        max_length=200,
        description="The same key again answers the first job: nothing is done twice.",
    )


def walls(caller: Caller, tenant: str | None) -> rules.Walls:
    """What the caller could act on one by one."""
    deployments = None if caller.deployments is None else frozenset(caller.deployments)
    if caller is ANONYMOUS or caller.operator:
        if tenant is not None and not caller.reaches(tenant):
            raise Forbidden(
                f"tenant {tenant!r} is not within this key's reach", field="filter.tenant"
            )
        return rules.Walls(caller.reach, None, deployments)
    if tenant is not None:
        raise Forbidden(
            "the tenant filter is for operator keys: this key acts on its own tenant only",
            field="filter.tenant",
        )
    return rules.Walls(frozenset({caller.tenant}), caller.scope, deployments)


def _parse(req: BulkRequest) -> tuple[rules.Action, rules.Filter]:
    raw = req.filter.model_dump(by_alias=True, exclude_none=True)
    return req.action, rules.parse_filter(raw, req.action, everything=req.all)


def _bulk(rt: Runtime, caller: Caller, req: BulkRequest) -> tuple[dict[str, Any], int, Any]:
    action, found = _parse(req)
    fence = walls(caller, found.tenant)
    bulk = rt.dispatcher.bulk
    if req.dry_run:
        count, sample = bulk.dry_run(found, fence)
        body = {"matched": count, "sample": [str(i) for i in sample], "dryRun": True}
        return body, 200, None
    job, new = bulk.start(
        action,
        found,
        fence,
        tenant=caller.tenant,
        owner=caller.name,
        idempotency_key=req.idempotency_key,
    )
    run = None
    if new and job.status == "running":
        run = BackgroundTask(run_in_threadpool, bulk.run, job.id)
    return job.json(), 202 if new else 200, run


@router.post(
    "/v1/tasks:bulk",
    operation_id="BulkTasks",
    status_code=202,
    summary="Retry or cancel the tasks a filter names (a job, run in batches)",
    responses={
        200: {"description": "A dry run's count, or the job a repeated idempotency key made."},
        202: {"description": "The job, started."},
        **problem_responses(400, 401, 403, 422, 503),
    },
)
async def bulk_tasks(
    rt: RuntimeDep, caller: CallerDep, body: BulkRequest, request: Request
) -> JSONResponse:
    """Acts only on tasks the key could act on one by one; a job matches the tasks created up
    to its start (its own retries never), and survives a restart (the sweeper goes on from its
    cursor). Follow it with `GET /v1/tasks:bulk/{id}`."""
    note(request, bulk=body.action, dryRun=body.dry_run)
    out, status, run = await run_in_threadpool(_bulk, rt, caller, body)
    if "id" in out:
        request.state.audit_object = f"bulk:{out['id']}"
    return JSONResponse(out, status_code=status, background=run)


@router.get(
    "/v1/tasks:bulk/{id}",
    operation_id="GetBulkJob",
    responses=problem_responses(401, 404, 422, 503),
    summary="A bulk job's progress: matched, done, failed",
)
async def get_bulk_job(
    rt: RuntimeDep, caller: CallerDep, job_id: Annotated[uuid.UUID, Path(alias="id")]
) -> JSONResponse:
    job = await run_in_threadpool(rt.store.bulk_job, job_id)
    if job is None or job.owner != caller.name:
        raise NotFound(f"no bulk job with id {job_id}", field="id")
    return JSONResponse(job.json())
