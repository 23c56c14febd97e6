"""SubmitTask, GetTask (with a bounded long-poll), ListTasks, CancelTask, ListConversationMessages.

Routes stay thin: parse, check the caller, call the dispatcher or the store, map to JSON. A caller
sees only its own scope: another scope's task is "not found" (its existence is not revealed), a
conversation key carrying another scope is forbidden.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from fleet import views
from fleet.api.audit import note
from fleet.api.auth import ANONYMOUS, Caller
from fleet.api.deps import CallerDep, IntakeDep, RuntimeDep
from fleet.api.schemas import (
    ApprovalList,
    CancelTaskResponse,
    DecideApprovalRequest,
    DecideApprovalResponse,
    MessageList,
    SignalTaskRequest,
    SubmitTaskRequest,
    SubmitTaskResponse,
    TaskDetail,
    TaskList,
    problem_responses,
)
from fleet.constants import MIN_TASK_ID_PREFIX
from fleet.domain import ids, keys
from fleet.domain.audit import INTERRUPT
from fleet.domain.values import Task, TaskStatus
from fleet.domain.waits import Wait
from fleet.errors import InputError, NotFound
from fleet.runtime import Runtime
from fleet.store import TaskFilter

router = APIRouter(tags=["tasks"])

#: Longest ``wait`` GetTask accepts (seconds): longer waits are repeated calls.
MAX_WAIT_S = 60.0
#: Long-poll store reads start this often and back off to ``POLL_MAX_S``.
POLL_MIN_S, POLL_MAX_S = 0.05, 0.5
#: Most tasks or messages one list call returns.
MAX_LIST = 1000
#: The scoped key of every singleton deployment's one conversation.
SINGLETON = f"{keys.SINGLETON_SCOPE}:{keys.SINGLETON_KEY}"

_AUTH = (401, 403, 503)


def _api_caller(caller: Caller) -> Caller:
    caller.check_source("api")
    return caller


def _may_use(caller: Caller, deployment: str) -> bool:
    return caller.deployments is None or deployment in caller.deployments


def _visible(rt: Runtime, caller: Caller, task_id: uuid.UUID) -> Task:
    """The task if this caller may see it (its tenant, its scope); NotFound either way
    otherwise (existence hidden)."""
    try:
        task = rt.store.get_task(task_id)
    except NotFound:
        task = None
    if (
        task is None
        or not caller.sees(task.tenant, task.scope)
        or not _may_use(caller, task.deployment)
    ):
        raise NotFound(f"no task with id {task_id}", field="id")
    return task


def _deployment(rt: Runtime, caller: Caller, name: str) -> str:
    """A deployment the caller may use (403) and that exists (422, naming the caller's ones).

    The message names no server path and no deployment the caller may not use.
    """
    caller.check_deployment(name)
    if name not in rt.config.deployments:
        yours = ", ".join(d for d in sorted(rt.config.deployments) if _may_use(caller, d))
        raise InputError(
            f"no deployment named {name!r}; yours: {yours or 'none'}", field="deployment"
        )
    return name


@router.post(
    "/v1/tasks",
    operation_id="SubmitTask",
    status_code=202,
    response_model=SubmitTaskResponse,
    responses=problem_responses(*_AUTH, 400, 409, 413, 422, 429),
    summary="Submit a task",
)
async def submit_task(
    body: SubmitTaskRequest, intake: IntakeDep, caller: CallerDep, request: Request
) -> JSONResponse:
    """Admit work for a deployment (one transaction) and answer at once; follow it with GetTask.

    In a `collect` deployment a submission made while the conversation's previous task is still
    queued is merged into it: the answer is that task, with `mergedInto` set.
    """
    caller = _api_caller(caller)
    caller.check_deployment(body.deployment)
    adm = await intake.submit(
        body.deployment,
        body.input_value(),
        scope=caller.scope,
        key=body.conversation_key,
        labels=body.labels,
        idempotency_key=body.idempotency_key,
        caller=None if caller is ANONYMOUS else caller.name,
        delivery=body.delivery,
        resource_id=body.resource_id,
        tenant=caller.tenant,
        priority=body.priority,
    )
    if adm.interrupted is not None:  # it stopped a running task: an operator's act to record
        request.state.audit_action = INTERRUPT
        request.state.audit_object = str(adm.interrupted)
        note(request, by=str(adm.task.id))
    return JSONResponse(
        views.admission_json(adm),
        status_code=202,
        headers={"Location": f"/v1/tasks/{adm.task.id}"},
    )


@router.get(
    "/v1/tasks/{id}",
    operation_id="GetTask",
    response_model=TaskDetail,
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Get a task, optionally waiting for it to finish",
)
async def get_task(
    task_id: Annotated[uuid.UUID, Path(alias="id")],
    rt: RuntimeDep,
    caller: CallerDep,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            description="Seconds to wait for the task to finish (long-poll); it is returned "
            "as it is when the time is up.",
        ),
    ] = 0.0,
) -> JSONResponse:
    caller = _api_caller(caller)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    pause = POLL_MIN_S
    while True:
        # Each poll is one primary-key read on a pool thread; waiting holds no thread.
        task = await run_in_threadpool(_visible, rt, caller, task_id)
        left = deadline - loop.time()
        if task.status.terminal or left <= 0:
            found = await run_in_threadpool(rt.store.task_deliveries, task.id)
            waits: list[Wait] = []
            if task.status == TaskStatus.WAITING:
                waits = await run_in_threadpool(rt.store.waits_of, task.id, pending=True)
            return JSONResponse(views.task_with_deliveries(task, found, waits))
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX_S)


@router.get(
    "/v1/tasks",
    operation_id="ListTasks",
    response_model=TaskList,
    responses=problem_responses(*_AUTH, 422),
    summary="List the caller's tasks",
)
def list_tasks(
    rt: RuntimeDep,
    caller: CallerDep,
    *,
    conversation_key: Annotated[
        str | None,
        Query(
            alias="conversationKey",
            min_length=1,
            description="Only this conversation (bare or scoped key).",
        ),
    ] = None,
    deployment: Annotated[str | None, Query(min_length=1)] = None,
    status: Annotated[TaskStatus | None, Query()] = None,
    id_prefix: Annotated[
        str | None,
        Query(
            alias="idPrefix",
            description="Only tasks whose id starts with this: at least "
            f"{MIN_TASK_ID_PREFIX} hex digits, dashes optional (`fleet tasks show 67bdb609`).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
) -> JSONResponse:
    caller = _api_caller(caller)
    prefix = None if id_prefix is None else ids.hex_prefix(id_prefix, field="idPrefix")
    scope, key = caller.scope, None
    if conversation_key == SINGLETON:
        scope, key = keys.SINGLETON_SCOPE, keys.SINGLETON_KEY
    elif conversation_key is not None:
        scope, key = keys.resolve("pool", caller.scope, conversation_key)
    flt = TaskFilter(
        deployment=None if deployment is None else _deployment(rt, caller, deployment),
        deployments=caller.deployments,
        scope=scope,
        conversation_key=key,
        status=status,
        id_prefix=prefix,
        limit=limit,
        tenants=frozenset({caller.tenant}),
    )
    return JSONResponse({"tasks": [views.task_json(t) for t in rt.store.list_tasks(flt)]})


@router.post(
    "/v1/tasks/{id}/cancel",
    operation_id="CancelTask",
    response_model=CancelTaskResponse,
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Cancel a task",
)
def cancel_task(
    task_id: Annotated[uuid.UUID, Path(alias="id")], rt: RuntimeDep, caller: CallerDep
) -> JSONResponse:
    """A queued task is cancelled at once; a running one stops at its next step boundary."""
    task = _visible(rt, _api_caller(caller), task_id)
    result = rt.dispatcher.cancel(task.id, scope=task.scope)
    return JSONResponse({"effect": result.effect, "task": views.task_json(result.task)})


@router.post(
    "/v1/tasks/{id}/approvals/{approvalId}",
    operation_id="DecideApproval",
    response_model=DecideApprovalResponse,
    responses=problem_responses(*_AUTH, 400, 404, 409, 422),
    summary="Approve or reject a tool call a waiting task asked about",
)
def decide_approval(
    task_id: Annotated[uuid.UUID, Path(alias="id")],
    approval_id: Annotated[uuid.UUID, Path(alias="approvalId")],
    body: DecideApprovalRequest,
    rt: RuntimeDep,
    *,
    caller: CallerDep,
    request: Request,
) -> JSONResponse:
    """`approve`: the call runs once, with the arguments `pendingApprovals` showed; `reject`:
    it never runs, the model is told who decided and why. The task's own caller scope decides,
    or an operator key of a tenant it reaches. Once none of the task's approvals is
    pending, it resumes (on any worker). 409 when it was decided already or expired."""
    who = _api_caller(caller)
    note(request, decision=body.decision, approval=str(approval_id))
    task = _decidable(rt, who, task_id)
    wait = rt.dispatcher.waiting.decide(
        task, approval_id, body.decision, by=decider(who), reason=body.reason
    )
    now = rt.store.get_task(task.id)
    return JSONResponse({"approval": views.approval_json(wait), "task": views.task_json(now)})


@router.get(
    "/v1/approvals",
    operation_id="ListApprovals",
    response_model=ApprovalList,
    responses=problem_responses(*_AUTH, 422),
    summary="List the approvals waiting for a decision",
)
def list_approvals(
    rt: RuntimeDep,
    caller: CallerDep,
    task_id_prefix: Annotated[
        str | None,
        Query(
            alias="taskIdPrefix",
            description="Only the approvals of tasks whose id starts with this: at least "
            f"{MIN_TASK_ID_PREFIX} hex digits, dashes optional "
            "(`fleet approvals approve 67bdb609 9ac341cb`).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
) -> JSONResponse:
    """The caller's pending approvals (its tenant and scope; an operator's: every scope of
    the tenants it reaches), oldest first."""
    who = _api_caller(caller)
    prefix = (
        None if task_id_prefix is None else ids.hex_prefix(task_id_prefix, field="taskIdPrefix")
    )
    if who.operator:
        found = rt.store.pending_approvals(tenants=who.reach, task_prefix=prefix, limit=limit)
    else:
        found = rt.store.pending_approvals(
            tenants=frozenset({who.tenant}), scope=who.scope, task_prefix=prefix, limit=limit
        )
    return JSONResponse(
        {
            "approvals": [
                views.approval_json(w) for w, task in found if _may_use(who, task.deployment)
            ]
        }
    )


def _decidable(rt: Runtime, caller: Caller, task_id: uuid.UUID) -> Task:
    """A task whose approvals this caller may decide: one it sees (its scope), or, for an
    operator, one of a tenant it reaches and a deployment it may use; NotFound otherwise."""
    try:
        return _visible(rt, caller, task_id)
    except NotFound:
        if not caller.operator:
            raise
    try:
        task = rt.store.get_task(task_id)
    except NotFound:
        task = None
    if task is None or not caller.reaches(task.tenant) or not _may_use(caller, task.deployment):
        raise NotFound(f"no task with id {task_id}", field="id")
    return task


def decider(caller: Caller) -> str:
    """Who an approval's decision names: the caller, or ``api`` on an open API."""
    return "api" if caller is ANONYMOUS else caller.name


@router.post(
    "/v1/tasks/{id}/signal",
    operation_id="SignalTask",
    status_code=202,
    responses=problem_responses(*_AUTH, 400, 404, 409, 413, 422),
    summary="Send a message into a running task",
)
def signal_task(
    task_id: Annotated[uuid.UUID, Path(alias="id")],
    body: SignalTaskRequest,
    rt: RuntimeDep,
    caller: CallerDep,
) -> JSONResponse:
    """The message joins the run at its next step boundary (before its next model call); if the
    run ends first, it becomes the conversation's next task. 409 if the task is not running."""
    who = _api_caller(caller)
    task = _visible(rt, who, task_id)
    running = rt.dispatcher.signal(
        task.id,
        body.input_value(),
        scope=task.scope,
        caller=None if who is ANONYMOUS else who.name,
    )
    return JSONResponse({"deliveredTo": "run", "task": views.task_json(running)}, status_code=202)


@router.get(
    "/v1/conversations/{conversationKey:path}/messages",
    operation_id="ListConversationMessages",
    response_model=MessageList,
    responses=problem_responses(*_AUTH, 404, 422),
    summary="List a conversation's messages",
)
def list_conversation_messages(
    conversation_key: Annotated[
        str,
        Path(
            alias="conversationKey",
            min_length=1,
            description="The conversation key (bare or scoped, e.g. `api:acme:ticket-4711`).",
        ),
    ],
    rt: RuntimeDep,
    caller: CallerDep,
    deployment: Annotated[str, Query(min_length=1, description="The conversation's deployment.")],
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
) -> JSONResponse:
    """The newest `limit` messages of the conversation's current history, oldest first."""
    caller = _api_caller(caller)
    name = _deployment(rt, caller, deployment)
    ref = keys.resolve(rt.config.deployments[name].kind, caller.scope, conversation_key)
    conversation = f"{ref.scope}:{ref.key}"
    found = rt.store.find_conversation(name, ref.scope, ref.key, tenant=caller.tenant)
    if found is None:
        raise NotFound(
            f"no conversation {conversation!r} in deployment {name!r}", field="conversationKey"
        )
    messages = rt.store.messages(found, limit=limit)
    return JSONResponse(
        {
            "conversation": conversation,
            "deployment": name,
            "messages": [views.message_json(m) for m in messages],
        }
    )
