"""The a2a-sdk request handler: A2A calls admitted into fleet's queue and read from its store.

The SDK's JSON-RPC dispatcher parses both protocol versions (v1.0 ``SendMessage``… and v0.3
``message/send``…) into v1.0 protobuf requests and calls this handler; the route in
:mod:`fleet.api.a2a` has already authenticated the caller and put it, with the deployment, in the
call context's state. Every fleet error leaves here as an A2A error with a clear message.

A task waiting for a person's approval of a tool call is ``input-required``: a message to it
(same taskId) carrying a decision data part decides it (:meth:`FleetRequestHandler._decide`).

Near 480 lines: one method per A2A operation the SDK's handler interface names, each short; the
task mapping and the push configs have rooms of their own (``fleet.a2a.tasks``, ``a2a_push``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from google.protobuf.json_format import MessageToDict
from starlette.concurrency import run_in_threadpool

from fleet.a2a.tasks import ReplyChunks, asks, stream_events, to_a2a
from fleet.api import a2a_push as push
from fleet.api.auth import Caller
from fleet.api.event_hub import EventHub
from fleet.api.event_stream import follow, snapshot
from fleet.domain import a2a as rules
from fleet.domain import delivery as rules_delivery
from fleet.domain import keys
from fleet.domain.deltas import Delta
from fleet.domain.events import TaskEvent
from fleet.domain.values import Task as FleetTask
from fleet.domain.values import TaskStatus
from fleet.domain.waits import Wait
from fleet.errors import Conflict, FleetError, InputError, NotFound
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from fleet.store.db import is_outage

log = logging.getLogger(__name__)

#: Call-context state keys the route fills in.
CALLER = "fleet.caller"
DEPLOYMENT = "fleet.deployment"
#: The route checked the tenant's rate and budget before the SDK (``fleet.api.a2a``).
GATED = "fleet.gated"
#: ListTasks: default and largest page.
LIST_PAGE = 50
LIST_MAX = 100
#: Seconds between store reads while waiting for a task (grows to the second value).
POLL_FIRST_S, POLL_MAX_S = 0.05, 0.5


@contextmanager
def a2a_errors() -> Iterator[None]:
    """Translate fleet errors to A2A errors; an unexpected one is logged, never shown."""
    try:
        yield
    except A2AError:
        raise
    except NotFound as exc:
        raise TaskNotFoundError(exc.message) from None
    except FleetError as exc:
        if exc.status >= 500:
            raise InternalError(f"{exc.message} (retry later)") from None
        raise InvalidParamsError(exc.message) from None
    except Exception as exc:
        if is_outage(exc):
            raise InternalError("a backing service is unavailable; retry later") from None
        log.exception("A2A call failed")
        raise InternalError("an unexpected error occurred; it was logged") from None


def _who(context: ServerCallContext) -> tuple[Caller, str]:
    caller: Caller = context.state[CALLER]
    deployment: str = context.state[DEPLOYMENT]
    return caller, deployment


def _task_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"no task with id {value!r} (task ids are UUIDs)") from None


class FleetRequestHandler(RequestHandler):
    """Answers A2A calls for any deployment from the runtime's dispatcher and store."""

    def __init__(self, runtime: Runtime, hub: EventHub) -> None:
        self.rt = runtime
        self.hub = hub

    async def _task(self, context: ServerCallContext, task_id: str) -> FleetTask:
        """The caller's task on this endpoint's deployment, or NotFound."""
        caller, deployment = _who(context)
        try:
            task: FleetTask | None = await run_in_threadpool(
                self.rt.store.get_task, _task_id(task_id)
            )
        except NotFound:
            task = None
        # Another scope's task is "not found" too: its existence is not revealed.
        if (
            task is None
            or task.deployment != deployment
            or not caller.sees(task.tenant, task.scope)
        ):
            raise NotFound(f"no task with id {task_id} on deployment {deployment!r}")
        return task

    async def _callers_task(
        self, context: ServerCallContext, task_id: str
    ) -> tuple[Caller, FleetTask]:
        """The caller, and its task as ``_task`` finds it (push-notification configs are
        the caller's own)."""
        caller, _ = _who(context)
        return caller, await self._task(context, task_id)

    async def _asked(self, task: FleetTask, *, fresh: bool = False) -> list[Wait]:
        """The approvals ``task`` asks its caller to decide now: none unless it is waiting or,
        ``fresh``, unfinished (a stream's task row is read before its runs: a run parked
        between the reads shows the row still running)."""
        return rules.asking(await self._pending(task, fresh=fresh), self.rt.dispatcher.clock())

    async def _pending(self, task: FleetTask, *, fresh: bool = False) -> list[Wait]:
        if task.status.terminal or (task.status != TaskStatus.WAITING and not fresh):
            return []
        return await run_in_threadpool(
            functools.partial(self.rt.store.waits_of, task.id, pending=True)
        )

    async def _answer(self, task: FleetTask, history_length: int | None = None) -> Task:
        """The task as A2A shows it now (``input-required`` when it asks for approvals;
        ``working`` saying what it waits for otherwise)."""
        pending = await self._pending(task)
        asked = rules.asking(pending, self.rt.dispatcher.clock())
        return to_a2a(task, asked=asked, waiting=pending, history_length=history_length)

    async def _wait(self, task: FleetTask, timeout: float) -> FleetTask:
        """Poll the store (never holding a thread while asleep) until the task ends, asks for
        an approval (``input-required``: the caller must act), or timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = POLL_FIRST_S
        while not task.status.terminal and not await self._asked(task):
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 1.5, POLL_MAX_S)
            task = await run_in_threadpool(self.rt.store.get_task, task.id)
        return task

    async def _admit(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[FleetTask, float]:
        """Admit the message's task (or find the one its messageId already made); the task and
        how long SendMessage waits for it."""
        caller, deployment = _who(context)
        msg = params.message
        try:
            request_meta = MessageToDict(params.metadata) if params.HasField("metadata") else None
            message_meta = MessageToDict(msg.metadata) if msg.HasField("metadata") else None
            raw_parts = MessageToDict(msg).get("parts", [])
            parts = rules.input_parts(raw_parts)
        except ValueError as exc:  # NaN or Infinity somewhere: JSON cannot carry them
            raise InputError(f"the message cannot be read as JSON: {exc}") from None
        labels = rules.labels(request_meta, message_meta)
        delivery = rules.delivery(request_meta, message_meta)
        resource = rules.resource(request_meta, message_meta)
        wait = rules.wait_seconds(
            params.configuration.return_immediately, request_meta, message_meta
        )
        push_params = None
        if params.configuration.HasField("task_push_notification_config"):
            # Checked before the task is admitted: a config refused admits nothing.
            push_params = params.configuration.task_push_notification_config
            push.config(uuid.uuid4(), push_params, caller.name)
        key = msg.context_id or None
        if msg.task_id:
            # A follow-up to one of our tasks continues that task's conversation.
            earlier = await self._task(context, msg.task_id)
            if key is not None and key != earlier.key:
                raise InputError(
                    f"message.taskId {msg.task_id} belongs to contextId {earlier.key!r}, "
                    f"not {key!r}; send one of them",
                    field="message.contextId",
                )
            key = earlier.key
            # An answer to an input-required task (or a decision sent again) decides it;
            # it never becomes a task of its own.
            if rules.is_decision(raw_parts) or await self._asked(earlier):
                decided = await self._decide(earlier, raw_parts, caller)
                if push_params is not None:
                    await self._set_push(decided, push_params, caller)
                return decided, wait
        admission = await run_in_threadpool(
            self.rt.dispatcher.submit,
            deployment,
            parts,
            scope=caller.scope,
            key=key,
            labels=labels,
            idempotency_key=msg.message_id or None,
            caller=caller.name,
            delivery=delivery,
            resource_id=resource,
            tenant=caller.tenant,
            gated=bool(context.state.get(GATED)),
        )
        if push_params is not None:
            await self._set_push(admission.task, push_params, caller)
        return admission.task, wait

    async def _decide(
        self, task: FleetTask, parts: Sequence[Mapping[str, Any]], caller: Caller
    ) -> FleetTask:
        """Record the caller's decisions (data parts) on the task's approvals, all checked
        first; the task as it is after them. The decider is ``a2a:<caller>``."""
        by = f"a2a:{caller.name}"
        found = await run_in_threadpool(self.rt.store.waits_of, task.id)
        wanted = rules.decisions(str(task.id), parts, found, self.rt.dispatcher.clock(), by=by)
        for one in wanted:
            await run_in_threadpool(
                functools.partial(
                    self.rt.dispatcher.waiting.decide,
                    task,
                    uuid.UUID(one.approval),
                    one.answer,
                    by=by,
                    reason=one.reason,
                )
            )
        return await run_in_threadpool(self.rt.store.get_task, task.id)

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        with a2a_errors():
            task, wait = await self._admit(params, context)
            task = await self._wait(task, wait)
            history = (
                params.configuration.history_length
                if params.configuration.HasField("history_length")
                else None
            )
            return await self._answer(task, history)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        with a2a_errors():
            task = await self._task(context, params.id)
            history = params.history_length if params.HasField("history_length") else None
            return await self._answer(task, history)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        with a2a_errors():
            task = await self._task(context, params.id)
            result = await run_in_threadpool(self.rt.dispatcher.cancel, task.id, scope=task.scope)
            if result.effect == "finished":
                raise TaskNotCancelableError(
                    f"task {task.id} already finished ({rules.state(result.task.status)})"
                )
            # A running task stops at its next step boundary; give it a moment to get there.
            return await self._answer(await self._wait(result.task, rules.CANCEL_WAIT_S))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        with a2a_errors():
            caller, deployment = _who(context)
            if params.page_token:
                raise InputError("pageToken is not supported; narrow by contextId or status")
            size = params.page_size or LIST_PAGE
            if not 1 <= size <= LIST_MAX:
                raise InputError(f"pageSize must be 1 to {LIST_MAX}, got {size}")
            wanted = None
            if params.status:
                if params.status not in TaskState.values():
                    raise InputError(
                        f"status {params.status} is not a task state; use one of "
                        + ", ".join(TaskState.keys()[1:])
                    )
                name = TaskState.Name(params.status).removeprefix("TASK_STATE_").lower()
                name = name.replace("_", "-")
                wanted = rules.statuses_of(name)
            after = None
            if params.HasField("status_timestamp_after"):
                after = params.status_timestamp_after.ToDatetime(tzinfo=UTC)
            kind = self.rt.config.deployments[deployment].kind
            scope = keys.SINGLETON_SCOPE if kind == "singleton" else caller.scope
            key = None
            if params.context_id:  # checked and unscoped as a SendMessage contextId is
                ref = keys.resolve(kind, caller.scope, params.context_id)
                scope, key = ref.scope, ref.key
            asking = None
            if wanted is not None and TaskStatus.WAITING in wanted:
                # a waiting task is working or input-required by what it waits for
                asking = (name == rules.INPUT_REQUIRED, self.rt.dispatcher.clock())
            flt = TaskFilter(
                deployment=deployment,
                scope=scope,
                conversation_key=key,
                statuses=wanted,
                changed_after=after,
                limit=size,
                tenants=frozenset({caller.tenant}),
                asking=asking,
            )
            found = await run_in_threadpool(self.rt.store.list_tasks, flt)
            total = await run_in_threadpool(self.rt.store.count_tasks, flt)
            tasks = list(reversed(found))  # newest first
            history = params.history_length if params.HasField("history_length") else None
            page = [await self._answer(t, history) for t in tasks]
            return ListTasksResponse(tasks=page, page_size=size, total_size=total)

    # -- streaming: the task's events as they are stored ------------------------------------

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task, then a status update per status change and step, the reply artifact, and
        the final status (its end); or up to ``input-required``, where the caller must act (an
        answer to it streams what follows)."""
        with a2a_errors():
            task, _ = await self._admit(params, context)
        async for event in self._stream(task.id, stop_asking=True):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it is now, then what follows, as ``message/stream`` sends it (a task
        ``input-required`` now is followed until it ends or asks again: a decision may come
        from elsewhere)."""
        with a2a_errors():
            task = await self._task(context, params.id)
        async for event in self._stream(task.id, stop_asking=False):
            yield event

    async def _stream(self, task_id: uuid.UUID, *, stop_asking: bool) -> AsyncGenerator[Event]:
        """The task's snapshot and its updates until it ends or asks for an approval
        (``stop_asking``: also when the snapshot does)."""
        with a2a_errors():
            task, position = await snapshot(self.hub, task_id)
            first = to_a2a(task, asked=await self._asked(task, fresh=True))
        yield first
        if task.status.terminal or (stop_asking and asks(first)):
            return
        chunks = ReplyChunks()
        with a2a_errors():
            async for ev in follow(self.hub, task_id, position, deltas=True):
                if isinstance(ev, Delta):
                    yield chunks.delta(str(task.id), task.key, ev)
                    continue
                if ev.kind == "reply":
                    yield chunks.reply(ev.task)
                    continue
                for out in stream_events(ev, await self._asked_at(ev)):
                    yield out
                    if asks(out):
                        return

    async def _asked_at(self, ev: TaskEvent) -> list[Wait]:
        """What a ``waiting`` status event asks the caller: the task's pending approvals if
        that wait is the task's current one (its run is the task's last attempt), else none
        (a wait since ended shows as ``working``)."""
        current = (
            ev.kind == "status"
            and ev.status == TaskStatus.WAITING
            and ev.run is not None
            and ev.run.attempt == ev.task.attempts
        )
        return await self._asked(ev.task, fresh=True) if current else []

    # -- push notifications: the task's final state POSTed to the caller's URL, journaled -----

    async def _set_push(
        self, task: FleetTask, params: TaskPushNotificationConfig, caller: Caller
    ) -> rules_delivery.PushConfig:
        """Store the caller's config; a task that finished already (the settle saw no config)
        gets its notification now. Another caller's config of that id is not replaced."""
        cfg = push.config(task.id, params, caller.name)
        stored = await run_in_threadpool(self.rt.store.set_push_config, cfg, datetime.now(UTC))
        if not stored:
            raise Conflict(
                f"task {task.id} has a push-notification config {cfg.id!r} set by another "
                "caller; give yours another id",
                field="id",
            )
        now = await run_in_threadpool(self.rt.store.get_task, task.id)
        if now.status.terminal:
            await run_in_threadpool(self.rt.dispatcher.deliveries.schedule, task.id)
        return cfg

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        with a2a_errors():
            caller, task = await self._callers_task(context, params.task_id)
            return push.to_a2a(await self._set_push(task, params, caller))

    async def _push_configs(
        self, context: ServerCallContext, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        """The caller's own configs of the task (another caller's are not shown)."""
        caller, task = await self._callers_task(context, task_id)
        found = await run_in_threadpool(
            functools.partial(self.rt.store.push_configs, task.id, owner=caller.name)
        )
        return [push.to_a2a(c) for c in found]

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        with a2a_errors():
            wanted = params.id or params.task_id
            for cfg in await self._push_configs(context, params.task_id):
                if cfg.id == wanted:
                    return cfg
            raise NotFound(f"task {params.task_id} has no push-notification config {wanted!r}")

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        with a2a_errors():
            found = await self._push_configs(context, params.task_id)
            return ListTaskPushNotificationConfigsResponse(configs=found)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        with a2a_errors():
            caller, task = await self._callers_task(context, params.task_id)
            gone = await run_in_threadpool(
                functools.partial(
                    self.rt.store.delete_push_config,
                    task.id,
                    params.id or params.task_id,
                    owner=caller.name,
                )
            )
            if not gone:
                raise NotFound(
                    f"task {params.task_id} has no push-notification config {params.id!r}"
                )

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError("this agent has no extended card")
