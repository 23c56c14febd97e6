"""ListTaskRuns and GetRun: what a task's runs did, in the caller's scope like GetTask.

A run is visible exactly when its task is: another scope's run is "not found" like a missing one.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from fleet import views
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.run_schemas import RunList, RunView
from fleet.api.schemas import problem_responses
from fleet.api.tasks import _api_caller, _visible
from fleet.errors import NotFound

router = APIRouter(tags=["runs"])

_AUTH = (401, 403, 503)


@router.get(
    "/v1/tasks/{id}/runs",
    operation_id="ListTaskRuns",
    response_model=RunList,
    responses=problem_responses(*_AUTH, 404, 422),
    summary="List a task's runs",
)
def list_task_runs(
    task_id: Annotated[uuid.UUID, Path(alias="id")], rt: RuntimeDep, caller: CallerDep
) -> JSONResponse:
    """Every run of the task, first attempt first, with its context's provenance (no steps)."""
    task = _visible(rt, _api_caller(caller), task_id)
    return JSONResponse({"runs": [views.run_json(r) for r in rt.store.list_runs(task.id)]})


@router.get(
    "/v1/runs/{id}",
    operation_id="GetRun",
    response_model=RunView,
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Get a run with its model and tool steps",
)
def get_run(
    run_id: Annotated[uuid.UUID, Path(alias="id")],
    rt: RuntimeDep,
    caller: CallerDep,
    include: Annotated[
        Literal["messages"] | None,
        Query(description="`messages`: also the frozen prompt's messages (they can be large)."),
    ] = None,
) -> JSONResponse:
    caller = _api_caller(caller)
    try:
        detail = rt.store.get_run(run_id)
        _visible(rt, caller, detail.run.task_id)
    except NotFound:
        raise NotFound(f"no run with id {run_id}", field="id") from None
    body = views.run_json(detail.run, detail.steps, messages=include == "messages")
    return JSONResponse(body)
