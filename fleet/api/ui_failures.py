"""The operator UI's failures page (``/ui/failures``): the tasks that failed in the last hours,
grouped by error class, each group with a button that retries it (a bulk job as the viewer's
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

from fleet.api.ui import UI_DECIDER, UiRefused, _csrf, _form, _page, _rt, _viewer
from fleet.api.ui_auth import Viewer
from fleet.domain import bulk as rules
from fleet.domain import error_classes
from fleet.errors import FleetError

router = APIRouter(prefix="/ui", include_in_schema=False)
#: The window the page looks back over when it names none, and the longest it takes.
DEFAULT_HOURS, MAX_HOURS = 24, 24 * 30
#: Batches a retry runs before the page answers (the rest runs after it).
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
    """The failed tasks of the last ``hours`` in the viewer's reach, by error class."""
    viewer = _viewer(request)
    rt = _rt(request)
    since = rt.dispatcher.clock() - timedelta(hours=hours)
    found = await run_in_threadpool(rt.store.failure_groups, _walls(viewer), since)
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
    shown: dict[str, Any] | None = None
    if job is not None:
        got = await run_in_threadpool(rt.store.bulk_job, job)
        shown = got.json() if got is not None and got.owner == _owner(viewer) else None
    return _page(request, "failures.html", viewer=viewer, groups=groups, hours=hours, job=shown)


@router.post("/failures/retry", response_class=HTMLResponse)
async def retry_group(request: Request) -> Response:
    """Retry a group (a bulk retry of its class in the window); back to the page, showing the
    job's progress."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    rt = _rt(request)
    try:
        hours = min(max(int(form.get("hours", DEFAULT_HOURS)), 1), MAX_HOURS)
    except ValueError:
        raise UiRefused(422, "hours must be a whole number") from None
    since = rt.dispatcher.clock() - timedelta(hours=hours)
    raw = {"since": since.isoformat(), "errorClass": form.get("errorClass") or None}
    try:
        f = rules.parse_filter(
            {k: v for k, v in raw.items() if v is not None}, "retry", everything=False
        )
        job, _ = await run_in_threadpool(
            partial(
                rt.dispatcher.bulk.start,
                tenant=next(iter(sorted(viewer.tenants or {"default"}))),
                owner=_owner(viewer),
                idempotency_key=f"ui-{form.get('csrf', '')[:16]}-{uuid.uuid4().hex}",
            ),
            "retry",
            f,
            _walls(viewer),
        )
        # the first batches now (the page shows them done), the rest after the answer
        held = await run_in_threadpool(
            partial(rt.dispatcher.bulk.run, max_batches=FIRST_BATCHES), job.id
        )
    except FleetError as exc:
        raise UiRefused(exc.status, exc.message) from None
    rest = None
    if held is not None and held.status == "running":
        rest = BackgroundTask(run_in_threadpool, rt.dispatcher.bulk.go_on, held)
    target = f"/ui/failures?hours={hours}&job={job.id}"
    return RedirectResponse(target, status_code=303, background=rest)


__all__ = ["router"]
