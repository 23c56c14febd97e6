"""The operator UI's failures page (``/ui/failures``): the tasks that failed in the last hours,
grouped by error class, each group with a button that retries it; and the unfinished tasks by
deployment and status, each group with a button that cancels it (bulk jobs as the viewer's
caller, within its reach: ``fleet.dispatch.bulk``)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from fleet.api.audit import note
from fleet.api.ui import UI_DECIDER, UiRefused, _csrf, _form, _page, _rt, _viewer
from fleet.api.ui_auth import Viewer
from fleet.domain import bulk as rules
from fleet.domain import error_classes
from fleet.errors import FleetError

router = APIRouter(prefix="/ui", include_in_schema=False)
#: The window the page looks back over when it names none, and the longest it takes.
DEFAULT_HOURS, MAX_HOURS = 24, 24 * 30
#: Batches a job runs before the page answers (the rest runs after it).
FIRST_BATCHES = 3


def _walls(viewer: Viewer) -> rules.Walls:
    return rules.Walls(viewer.tenants, None, viewer.deployments)


def _owner(viewer: Viewer) -> str:
    return viewer.name or UI_DECIDER


@router.get("/failures", response_class=HTMLResponse)
async def failures(
    request: Request,
    hours: Annotated[int, Query(ge=1, le=MAX_HOURS)] = DEFAULT_HOURS,
    job: Annotated[uuid.UUID | None, Query()] = None,
) -> Response:
    """The failed tasks of the last ``hours`` in the viewer's reach, by error class; the
    unfinished ones by deployment and status."""
    viewer = _viewer(request)
    rt = _rt(request)
    since = rt.dispatcher.clock() - timedelta(hours=hours)
    found = await run_in_threadpool(rt.store.failure_groups, _walls(viewer), since)
    unfinished = await run_in_threadpool(rt.store.unfinished_groups, _walls(viewer))
    groups = [
        {
            "errorClass": cls,
            "meaning": error_classes.MEANING.get(cls, "")
            if cls
            else "ended under an older release (no class)",
            "count": n,
            "newest": newest,
        }
        for cls, n, newest in found
    ]
    pending = [
        {"deployment": d, "status": st, "count": n, "oldest": oldest}
        for d, st, n, oldest in unfinished
    ]
    shown: dict[str, Any] | None = None
    if job is not None:
        got = await run_in_threadpool(rt.store.bulk_job, job)
        shown = got.json() if got is not None and got.owner == _owner(viewer) else None
    return _page(
        request,
        "failures.html",
        viewer=viewer,
        groups=groups,
        pending=pending,
        hours=hours,
        job=shown,
    )


@router.post("/failures/retry", response_class=HTMLResponse)
async def retry_group(request: Request) -> Response:
    """Retry a group (a bulk retry of its class in the window); back to the page, showing the
    job's progress."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    try:
        hours = min(max(int(form.get("hours", DEFAULT_HOURS)), 1), MAX_HOURS)
    except ValueError:
        raise UiRefused(422, "hours must be a whole number") from None
    since = _rt(request).dispatcher.clock() - timedelta(hours=hours)
    raw = {"since": since.isoformat(), "errorClass": form.get("errorClass") or None}
    return await _job(request, viewer, "retry", raw, hours)


@router.post("/failures/cancel", response_class=HTMLResponse)
async def cancel_group(request: Request) -> Response:
    """Cancel a group of unfinished tasks (a deployment's, of one status); back to the page."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    raw = {"deployment": form.get("deployment") or None, "status": form.get("status") or None}
    if raw["deployment"] is None or raw["status"] is None:
        raise UiRefused(422, "a group names its deployment and its status")
    return await _job(request, viewer, "cancel", raw, DEFAULT_HOURS)


async def _job(
    request: Request, viewer: Viewer, action: rules.Action, raw: dict[str, Any], hours: int
) -> Response:
    """A bulk job of the group as the viewer's caller: its first batches now, the rest after
    the answer; back to the page, showing the job."""
    rt = _rt(request)
    try:
        f = rules.parse_filter(
            {k: v for k, v in raw.items() if v is not None}, action, everything=False
        )
        job, _ = await run_in_threadpool(
            partial(
                rt.dispatcher.bulk.start,
                tenant=next(iter(sorted(viewer.tenants or {"default"}))),
                owner=_owner(viewer),
                idempotency_key=None,
            ),
            action,
            f,
            _walls(viewer),
        )
        held = await run_in_threadpool(
            partial(rt.dispatcher.bulk.run, max_batches=FIRST_BATCHES), job.id
        )
    except FleetError as exc:
        raise UiRefused(exc.status, exc.message) from None
    rest = None
    if held is not None and held.status == "running":
        rest = BackgroundTask(run_in_threadpool, rt.dispatcher.bulk.go_on, held)
    request.state.audit_object = f"bulk:{job.id}"
    note(request, bulk=action)
    target = f"/ui/failures?hours={hours}&job={job.id}"
    return RedirectResponse(target, status_code=303, background=rest)


__all__ = ["router"]
