"""The operator UI at ``/ui``: server-rendered pages (Jinja2 templates shipped in ``fleet/ui``),
a little JavaScript that follows task events live, and forms for actions.

Pages read the store through the same reads and JSON shapes as the API (``fleet.views``), but
an operator sees every scope of its deployments in the tenants it reaches. Who may look is
``fleet.api.ui_auth``'s call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from fleet import views
from fleet.api import ui_format
from fleet.api.audit import note
from fleet.api.auth import ANONYMOUS, KeyRing, Unauthorized
from fleet.api.event_stream import snapshot
from fleet.api.events import hub_of, sse_response, start_position
from fleet.api.ui_auth import COOKIE, SESSION_S, UiAuth, Viewer
from fleet.domain import operator as op
from fleet.domain.values import Task, TaskStatus
from fleet.errors import FleetError, Forbidden, NotFound
from fleet.runtime import Runtime
from fleet.store.operator import ConversationFilter
from fleet.version import __version__
from fleet.views.tenants import everyone, read_tenants

_T = TypeVar("_T")

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
#: Most pending approvals the approvals page lists (the oldest first).
APPROVALS_SHOWN = 200
#: Who a decision names when the UI is open (no callers configured, so no operator's name).
UI_DECIDER = "operator"
#: Static files the pages load, and their types (nothing else is served from the folder).
STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}

router = APIRouter(prefix="/ui", include_in_schema=False)
_env = Environment(
    loader=FileSystemLoader(UI_DIR / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(ui_format.FILTERS)


class UiRefused(Exception):
    """A UI request that gets an HTML page instead of what it asked for (sign in, not found)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _rt(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def _auth(request: Request) -> UiAuth:
    found: UiAuth | None = getattr(request.app.state, "ui_auth", None)
    if found is None:
        secret = _rt(request).settings.ui_secret
        found = UiAuth(
            request.app.state.keyring, secret.get_secret_value().encode() if secret else None
        )
        request.app.state.ui_auth = found
    return found


def _viewer(request: Request) -> Viewer:
    auth = _auth(request)
    if auth.mode == "off":
        raise UiRefused(404, "The operator UI is off: no caller has operator = true.")
    try:
        viewer = auth.viewer(request.cookies.get(COOKIE))
    except Unauthorized as exc:
        raise UiRefused(401, exc.message) from None
    # who acts, for the audit log (``fleet.api.audit``)
    ring: KeyRing = request.app.state.keyring
    named = ring.named(viewer.name) if viewer.name is not None else None
    request.state.caller = named[0] if named is not None else ANONYMOUS
    return viewer


def _page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    body = _env.get_template(template).render(
        request=request,
        version=__version__,
        now=datetime.now(UTC),
        **context,
    )
    headers = {
        "Cache-Control": "no-store",
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }
    return HTMLResponse(body, status_code=status, headers=headers)


def _deployments(rt: Runtime, viewer: Viewer) -> list[str]:
    return sorted(d for d in rt.config.deployments if viewer.may_see(d))


def _seen(viewer: Viewer, deployment: str, what: str, tenant: str) -> None:
    if not viewer.may_see(deployment, tenant):
        raise UiRefused(404, f"No {what} with that id.")


def _csrf(viewer: Viewer, form: dict[str, str]) -> None:
    try:
        UiAuth.check_csrf(viewer, form.get("csrf"))
    except Forbidden as exc:
        raise UiRefused(403, exc.message) from None


def _next(value: str | None) -> str:
    """Where to go after a form: a path inside the UI only (never another site)."""
    if value and value.startswith("/ui") and not value.startswith("//"):
        return value
    return "/ui"


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


# -- sign in -------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    auth = _auth(request)
    if auth.mode == "off":
        raise UiRefused(404, "The operator UI is off: no caller has operator = true.")
    if auth.mode == "open":
        return RedirectResponse(_next(next), status_code=303)
    return _page(request, "login.html", next=_next(next), error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    auth = _auth(request)
    if auth.mode != "keys":
        return RedirectResponse("/ui/login", status_code=303)
    form = await _form(request)
    target = _next(form.get("next"))
    try:
        cookie, _ = auth.sign_in(form.get("key", ""))
    except FleetError as exc:
        return _page(request, "login.html", exc.status, next=target, error=exc.message)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_S,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    viewer = _viewer(request)
    _csrf(viewer, await _form(request))
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


# -- pages ---------------------------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    viewer = _viewer(request)
    rt = _rt(request)
    names = _deployments(rt, viewer)
    figures = await run_in_threadpool(
        partial(rt.store.figures, tenants=viewer.tenants), names, datetime.now(UTC)
    )
    rows = [figures[n] for n in names]
    reach = viewer.tenants  # the tenants table: the same reach as its conversations
    reaches = everyone if reach is None else reach.__contains__
    tenants = await run_in_threadpool(read_tenants, rt, reaches)
    schedules = await run_in_threadpool(_schedules, rt, viewer)
    return _page(
        request,
        "overview.html",
        viewer=viewer,
        rows=rows,
        tenants=tenants,
        schedules=schedules,
        window_s=op.RECENT_S,
    )


def _schedules(rt: Runtime, viewer: Viewer) -> list[dict[str, Any]]:
    """The schedules of the deployments and tenants the viewer sees, with their next tick."""
    from fleet.dispatch.schedules import with_files
    from fleet.views.schedules import schedule_json, when_text

    shown = []
    for rec in with_files(rt.config, rt.store.list_schedules(), rt.dispatcher.clock()):
        if viewer.may_see(str(rec.spec.get("deployment")), rec.tenant):
            view = schedule_json(rec)
            view["when"] = when_text(view)
            shown.append(view)
    return shown


@router.get("/conversations", response_class=HTMLResponse)
async def conversations(
    request: Request,
    deployment: Annotated[str | None, Query()] = None,
    scope: Annotated[str | None, Query()] = None,
    state: Annotated[str | None, Query()] = None,
) -> Response:
    viewer = _viewer(request)
    rt = _rt(request)
    names = _deployments(rt, viewer)
    deployment = deployment or None
    if deployment is not None and deployment not in names:
        raise UiRefused(404, f"No deployment {deployment!r} among yours.")
    chosen = state if state in op.STATES else None
    flt = ConversationFilter(
        deployments=None if viewer.deployments is None else frozenset(names),
        deployment=deployment,
        scope=(scope or "").strip() or None,
        state=chosen,
        limit=200,
        tenants=viewer.tenants,
    )
    rows = await run_in_threadpool(rt.store.conversations, flt, datetime.now(UTC))
    return _page(
        request,
        "conversations.html",
        viewer=viewer,
        rows=rows,
        deployments=names,
        states=op.STATES,
        chosen={"deployment": deployment or "", "scope": flt.scope or "", "state": chosen or ""},
    )


@router.get("/conversations/{conversation_id}", response_class=HTMLResponse)
async def conversation(request: Request, conversation_id: uuid.UUID) -> Response:
    viewer = _viewer(request)
    rt = _rt(request)
    found = await _read("conversation", rt.store.conversation, conversation_id)
    _seen(viewer, found.deployment, "conversation", found.tenant)
    runs = await run_in_threadpool(rt.store.runs_by_task, [t.id for t in found.tasks])
    messages = await run_in_threadpool(rt.store.messages, found.id, limit=200)
    # The live section follows the first unfinished task from its start (queued, each step).
    head = next((t for t in found.tasks if not t.status.terminal), None)
    return _page(
        request,
        "conversation.html",
        viewer=viewer,
        conversation=found,
        tasks=[views.task_json(t) for t in found.tasks],
        runs={str(k): v for k, v in runs.items()},
        messages=[views.message_json(m) for m in messages],
        head=head,
        **await _pending(rt, head),
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: uuid.UUID) -> Response:
    viewer = _viewer(request)
    rt = _rt(request)
    detail = await _read("run", rt.store.get_run, run_id)
    task = await _read("run", rt.store.get_task, detail.run.task_id)
    _seen(viewer, task.deployment, "run", task.tenant)
    _, position = await snapshot(hub_of(request), task.id)
    run = views.run_json(detail.run, detail.steps)
    return _page(
        request,
        "run.html",
        viewer=viewer,
        run=run,
        task=views.task_json(task),
        conversation_id=str(task.conversation_id),
        after=str(position) if position else None,
        live=not task.status.terminal,
        **await _pending(rt, task),
    )


async def _pending(rt: Runtime, task: Task | None) -> dict[str, Any]:
    """A waiting task's pending approvals (as ``pendingApprovals``) and what else it waits
    for (events, a pause, delegates: as ``waitingFor``); none for any other task."""
    if task is None or task.status != TaskStatus.WAITING:
        return {"approvals": [], "waits": []}
    waits = await run_in_threadpool(partial(rt.store.waits_of, pending=True), task.id)
    return {
        "approvals": [views.approval_json(w) for w in waits if w.kind == "approval"],
        "waits": [views.waiting_json(w) for w in waits if w.kind != "approval"],
    }


@router.get("/approvals", response_class=HTMLResponse)
async def approvals(request: Request) -> Response:
    """The approvals waiting for a decision in the viewer's reach, oldest first."""
    viewer = _viewer(request)
    rt = _rt(request)
    found = await run_in_threadpool(
        partial(rt.store.pending_approvals, tenants=viewer.tenants, limit=APPROVALS_SHOWN)
    )
    rows = [
        {"approval": views.approval_json(w), "task": views.task_json(t)}
        for w, t in found
        if viewer.may_see(t.deployment, t.tenant)
    ]
    return _page(request, "approvals.html", viewer=viewer, rows=rows, limit=APPROVALS_SHOWN)


@router.post("/tasks/{task_id}/approvals/{approval_id}", response_class=HTMLResponse)
async def decide(request: Request, task_id: uuid.UUID, approval_id: uuid.UUID) -> Response:
    """Approve or reject a pending approval (DecideApproval, decided by the viewer's caller:
    ``operator`` on an open API); back to ``next``. A task or approval out of reach is "not
    found"; one decided already or expired is an error page saying so (409)."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    note(request, decision=form.get("decision", ""), approval=str(approval_id))
    task = await _task(request, viewer, task_id)
    request.state.audit_tenant = task.tenant
    target = _next(form.get("next") or "/ui/approvals")
    rt = _rt(request)
    try:
        await run_in_threadpool(
            partial(
                rt.dispatcher.waiting.decide,
                by=viewer.name or UI_DECIDER,
                reason=form.get("reason") or None,
            ),
            task,
            approval_id,
            form.get("decision", ""),
        )
    except NotFound:
        raise UiRefused(404, "No approval with that id.") from None
    except FleetError as exc:
        raise UiRefused(exc.status, exc.message) from None
    return RedirectResponse(target, status_code=303)


@router.get("/tasks/{task_id}")
async def task_page(request: Request, task_id: uuid.UUID) -> Response:
    """A task is shown on its conversation's page."""
    viewer = _viewer(request)
    task = await _task(request, viewer, task_id)
    return RedirectResponse(
        f"/ui/conversations/{task.conversation_id}#task-{task.id}", status_code=303
    )


@router.post("/tasks/{task_id}/cancel", response_class=HTMLResponse)
async def cancel(request: Request, task_id: uuid.UUID) -> Response:
    """Cancel after a confirmation (the page's dialog, or this answer's own form without JS)."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    task = await _task(request, viewer, task_id)
    target = _next(form.get("next") or f"/ui/conversations/{task.conversation_id}")
    if form.get("confirmed") != "yes":
        request.state.audit_skip = True  # only asked to confirm: nothing done yet
        return _page(
            request, "confirm.html", viewer=viewer, task=views.task_json(task), next=target
        )
    request.state.audit_tenant = task.tenant
    rt = _rt(request)
    await run_in_threadpool(rt.dispatcher.cancel, task.id, scope=task.scope)
    return RedirectResponse(target, status_code=303)


@router.post("/conversations/{conversation_id}/reset", response_class=HTMLResponse)
async def reset(request: Request, conversation_id: uuid.UUID) -> Response:
    """ResetConversation after a confirmation (the page's dialog, or a page of its own without
    JS); a running task makes it an error page saying so (409)."""
    viewer = _viewer(request)
    form = await _form(request)
    _csrf(viewer, form)
    rt = _rt(request)
    found = await _read("conversation", partial(rt.store.conversation, tasks=1), conversation_id)
    _seen(viewer, found.deployment, "conversation", found.tenant)
    target = f"/ui/conversations/{found.id}"
    if form.get("confirmed") != "yes":
        request.state.audit_skip = True  # only asked to confirm: nothing done yet
        return _page(request, "confirm_reset.html", viewer=viewer, conversation=found, next=target)
    request.state.audit_tenant = found.tenant
    try:
        await run_in_threadpool(
            partial(rt.dispatcher.lifecycle.reset, tenant=found.tenant),
            found.deployment,
            found.conversation,
        )
    except FleetError as exc:
        raise UiRefused(exc.status, exc.message) from None
    return RedirectResponse(target, status_code=303)


@router.get("/tasks/{task_id}/events")
async def task_events(
    request: Request, task_id: uuid.UUID, after: Annotated[str | None, Query()] = None
) -> Response:
    """The task's event stream (as StreamTaskEvents) for the pages' live updates."""
    viewer = _viewer(request)
    task = await _task(request, viewer, task_id)
    position = start_position(request.headers.get("last-event-id"), after)
    return sse_response(hub_of(request), task.id, position, _rt(request).settings)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC:
        raise UiRefused(404, "No such file.")
    body = (UI_DIR / "static" / name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


async def _task(request: Request, viewer: Viewer, task_id: uuid.UUID) -> Any:
    task = await _read("task", _rt(request).store.get_task, task_id)
    _seen(viewer, task.deployment, "task", task.tenant)
    return task


async def _read(what: str, read: Callable[..., _T], *args: Any) -> _T:
    """``read(*args)`` on a pool thread; NotFound is the page "No <what> with that id." (404)."""
    try:
        return await run_in_threadpool(read, *args)
    except NotFound:
        raise UiRefused(404, f"No {what} with that id.") from None


def install(app: FastAPI) -> None:
    """Serve the UI and answer its refusals with pages (sign in, not found, forbidden)."""

    @app.exception_handler(UiRefused)
    async def _refused(request: Request, exc: UiRefused) -> Response:
        if exc.status == 401:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return _page(request, "login.html", 401, next=_next(target), error=exc.message)
        return _page(request, "error.html", exc.status, message=exc.message)

    app.include_router(router)
