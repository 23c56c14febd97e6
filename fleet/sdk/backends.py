"""Where the SDK's calls go: the store (embedded or fleet mode) or a ``fleet serve`` over HTTP.

A server is :class:`~fleet.sdk.client.FleetClient` itself, the one HTTP client (the CLI's too);
:class:`StoreTasks` answers the same calls from the store, in the API's JSON shapes
(:mod:`fleet.views`) and with the errors the server's answers stand for. So the SDK, and the CLI
that builds on both, read one shape whichever way they talk.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from fleet.constants import DEFAULT_TENANT
from fleet.domain.values import TaskStatus
from fleet.errors import InputError, NotFound

if TYPE_CHECKING:
    from fleet.config import Settings
    from fleet.runtime import Runtime

View = dict[str, Any]
Input = str | list[dict[str, Any]]

#: Store reads while waiting start this often and back off to the second figure (seconds).
POLL_MIN_S, POLL_MAX_S = 0.005, 0.1
#: Messages a task handle looks through for its own (the API's largest page).
MESSAGES_PAGE = 1000
#: Who a decision made straight through the store names (the CLI's and the SDK's store mode).
LOCAL_DECIDER = "operator"


class Submission(TypedDict, total=False):
    """What a submission may say besides its input: its ``labels``, an ``idempotency_key``
    (repeats return the first task) and a ``delivery`` mode overriding the deployment's."""

    labels: dict[str, str] | None
    idempotency_key: str | None
    delivery: str | None


class BackendSubmission(Submission, total=False):
    """A submission as a backend takes it: with its conversation's key and its resource."""

    conversation_key: str | None
    resource_id: str | None


def terminal(view: View) -> bool:
    return TaskStatus(view["status"]).terminal


class Backend(Protocol):
    """The calls a Fleet makes, named as the HTTP client names them (SubmitTask, GetTask...)."""

    def submit(self, deployment: str, input: Input, **options: Unpack[BackendSubmission]) -> View:
        """The admitted task (with ``mergedInto``, ``duplicate``, ``deliveredTo``)."""
        ...

    def get_task(self, task_id: str) -> View: ...

    def wait(self, task_id: str, timeout: float | None) -> View:
        """The task once terminal, or as it is when ``timeout`` seconds passed."""
        ...

    async def wait_async(self, task_id: str, timeout: float | None) -> View:
        """``wait`` without blocking the event loop."""
        ...

    def cancel(self, task_id: str) -> View:
        """``{"effect": cancelled|requested|finished, "task": {...}}``."""
        ...

    def texts(self, task_id: str, timeout: float | None) -> Iterator[View]:
        """The task's model text as it is written: each ``delta`` event's data (``text``,
        ``step``, ``attempt``, ``reset``), until the task ends or ``timeout`` passes."""
        ...

    def messages(self, conversation_key: str, deployment: str, *, limit: int = 100) -> View:
        """``{"messages": [...]}``, oldest first; NotFound (field ``conversationKey``) for a
        conversation not started yet."""
        ...

    def list_approvals(self, *, limit: int = 100, task_id_prefix: str | None = None) -> list[View]:
        """ListApprovals: the approvals waiting for a decision, oldest first (``task_id_prefix``:
        of the tasks whose id starts with it)."""
        ...

    def decide_approval(
        self, task_id: str, approval_id: str, decision: str, *, reason: str | None = None
    ) -> View:
        """DecideApproval: ``{"approval": {...}, "task": {...}}``; NotFound for no such
        approval of the task, Conflict when it was decided already or expired."""
        ...

    def send_event(
        self,
        event: str,
        key: str,
        data: Any = None,
        *,
        event_id: str | None = None,
        tenant: str | None = None,
    ) -> View:
        """SendEvent: the runs waiting for its name and key resume with ``data``;
        ``{"id", "event", "key", "tenant", "resolved", "duplicate", "receivedAt"}``."""
        ...

    def bulk(self, request: dict[str, Any]) -> View:
        """BulkTasks: a dry run's ``{"matched", "sample"}``, or the job (``request`` as its
        body: ``action``, ``filter``, ``all``, ``dryRun``, ``idempotencyKey``)."""
        ...

    def bulk_job(self, job_id: str) -> View:
        """GetBulkJob: the job's progress (``status``, ``matched``, ``done``, ``failed``)."""
        ...

    def close(self) -> None: ...


def messages_of(backend: Backend, deployment: str, key: str, limit: int) -> list[View]:
    """The conversation's newest ``limit`` messages, oldest first ([] if it has none yet)."""
    try:
        found: list[View] = backend.messages(key, deployment, limit=limit)["messages"]
    except NotFound as exc:
        if exc.field == "conversationKey":
            return []  # no message yet
        raise
    return found


class _Pauses:
    """Pauses between store reads: short at first (embedded runs end in milliseconds), then
    longer, never past the deadline."""

    def __init__(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self._next = POLL_MIN_S

    def over(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def pause(self) -> float:
        pause, self._next = self._next, min(self._next * 2, POLL_MAX_S)
        if self.deadline is not None:
            pause = min(pause, max(0.0, self.deadline - time.monotonic()))
        return pause


class StoreTasks:
    """The :class:`Backend` calls answered from a runtime's store and dispatcher (the CLI's
    store mode is this too, with what only the CLI asks)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def check_deployment(self, name: str) -> None:
        """Refuse an unknown deployment now (a server says so at the first submission)."""
        try:
            self.rt.config.deployment(name)
        except NotFound as exc:
            raise InputError(exc.message, field="deployment") from None

    def submit(self, deployment: str, input: Input, **options: Unpack[BackendSubmission]) -> View:
        from fleet.views import admission_json

        admitted = self.rt.dispatcher.submit(
            deployment,
            input,
            key=options.get("conversation_key"),
            labels=options.get("labels"),
            idempotency_key=options.get("idempotency_key"),
            delivery=options.get("delivery"),
            resource_id=options.get("resource_id"),
        )
        return admission_json(admitted)

    def get_task(self, task_id: str) -> View:
        from fleet.views import approval_json, task_json

        task = self.rt.store.get_task(uuid.UUID(task_id))
        view = task_json(task)
        if task.status == TaskStatus.WAITING:  # as GetTask: what it waits to have decided
            waits = self.rt.store.waits_of(task.id, pending=True)
            view["pendingApprovals"] = [approval_json(w) for w in waits if w.kind == "approval"]
        return view

    def wait(self, task_id: str, timeout: float | None) -> View:
        pauses = _Pauses(timeout)
        while True:
            view = self.get_task(task_id)
            if terminal(view) or pauses.over():
                return view
            time.sleep(pauses.pause())

    async def wait_async(self, task_id: str, timeout: float | None) -> View:
        pauses = _Pauses(timeout)
        while True:
            view = await asyncio.to_thread(self.get_task, task_id)
            if terminal(view) or pauses.over():
                return view
            await asyncio.sleep(pauses.pause())

    def texts(self, task_id: str, timeout: float | None) -> Iterator[View]:
        pauses = _Pauses(timeout)
        yield from self.texts_until(
            task_id, lambda: pauses.over() or terminal(self.get_task(task_id))
        )

    def texts_until(self, task_id: str, ended: Callable[[], bool]) -> Iterator[View]:
        """``texts`` until ``ended()`` (asked whenever a quarter second passed without text)."""
        from fleet.streaming.sink import follow
        from fleet.views import delta_json

        tail = self.rt.dispatcher.streaming.tail(uuid.UUID(task_id))
        if tail is None:  # not streamed: nothing to show before the end
            while not ended():
                time.sleep(0.25)  # a poll interval, not a synchronization
            return
        for d in follow(tail, ended):
            yield delta_json(d)

    def cancel(self, task_id: str) -> View:
        from fleet.views import task_json

        result = self.rt.dispatcher.cancel(uuid.UUID(task_id))
        return {"effect": result.effect, "task": task_json(result.task)}

    def messages(self, conversation_key: str, deployment: str, *, limit: int = 100) -> View:
        from fleet.domain import keys
        from fleet.views import message_json

        self.check_deployment(deployment)
        dep = self.rt.config.deployment(deployment)
        ref = keys.resolve(dep.kind, "api", conversation_key)
        found = self.rt.store.find_conversation(dep.name, ref.scope, ref.key, tenant=DEFAULT_TENANT)
        if found is None:
            raise NotFound(
                f"no conversation {conversation_key!r} of {deployment!r} yet",
                field="conversationKey",
            )
        return {"messages": [message_json(m) for m in self.rt.store.messages(found, limit=limit)]}

    def list_approvals(self, *, limit: int = 100, task_id_prefix: str | None = None) -> list[View]:
        """Every tenant's pending approvals (the store's user is the operator)."""
        from fleet.domain.ids import hex_prefix
        from fleet.views import approval_json

        prefix = None if task_id_prefix is None else hex_prefix(task_id_prefix)
        found = self.rt.store.pending_approvals(task_prefix=prefix, limit=limit)
        return [approval_json(w) for w, _ in found]

    def decide_approval(
        self, task_id: str, approval_id: str, decision: str, *, reason: str | None = None
    ) -> View:
        from fleet.views import approval_json, task_json

        task = self.rt.store.get_task(uuid.UUID(task_id))
        wait = self.rt.dispatcher.waiting.decide(
            task, _approval_id(approval_id), decision, by=LOCAL_DECIDER, reason=reason
        )
        return {
            "approval": approval_json(wait),
            "task": task_json(self.rt.store.get_task(task.id)),
        }

    def bulk(self, request: dict[str, Any]) -> View:
        """As the operator (every tenant and scope); a job runs here to its end."""
        from fleet.domain import bulk as rules

        action, found = rules.parse_request(request)
        walls = rules.Walls(None, None)
        bulk = self.rt.dispatcher.bulk
        if request.get("dryRun"):
            count, sample = bulk.dry_run(found, walls)
            return {"matched": count, "sample": [str(i) for i in sample], "dryRun": True}
        job, _ = bulk.start(
            action,
            found,
            walls,
            tenant=DEFAULT_TENANT,
            owner=LOCAL_DECIDER,
            idempotency_key=request.get("idempotencyKey"),
        )
        return (bulk.run(job.id) or self.rt.store.bulk_job(job.id) or job).json()

    def bulk_job(self, job_id: str) -> View:
        job = self.rt.store.bulk_job(uuid.UUID(job_id))
        if job is None or job.owner != LOCAL_DECIDER:
            raise NotFound(f"no bulk job with id {job_id}", field="id")
        return job.json()

    def send_event(
        self,
        event: str,
        key: str,
        data: Any = None,
        *,
        event_id: str | None = None,
        tenant: str | None = None,
    ) -> View:
        """As the operator: it reaches every scope of ``tenant`` (default ``default``)."""
        from fleet.views import sent_json

        waiting = self.rt.dispatcher.waiting
        ev = waiting.new_event(
            name=event,
            key=key,
            data=data,
            event_id=event_id,
            tenant=tenant or DEFAULT_TENANT,
            scope=None,
            sender=LOCAL_DECIDER,
        )
        return sent_json(waiting.send_event(ev))

    def close(self) -> None:
        self.rt.close()


def _approval_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InputError(
            f"approval id {value!r} is not a UUID; see `fleet approvals ls` for ids",
            field="approvalId",
        ) from None


class StoreBackend(StoreTasks):
    """Straight to the store: embedded mode runs tasks on this process's pool of threads while
    the object lives; fleet mode admits into the fleet and waits for its workers."""

    def __init__(self, settings: Settings, concurrency: int | None) -> None:
        from fleet.runtime import build

        super().__init__(build(settings))
        self._loop = None
        if self.rt.local_waker is not None:
            from fleet.dispatch.embedded import EmbeddedLoop

            self._loop = EmbeddedLoop(self.rt.dispatcher, self.rt.local_waker, concurrency)
            self._loop.start()
        elif concurrency is not None:
            self.rt.close()
            raise InputError(
                "concurrency is for embedded mode; in a fleet, `fleet worker --concurrency` "
                "sets how many tasks run at once",
                field="concurrency",
            )
        #: ``embedded`` or ``fleet``.
        self.mode = "embedded" if self._loop is not None else "fleet"

    def close(self) -> None:
        try:
            if self._loop is not None:
                self._loop.stop()  # runs hand their tasks back after their current step
        finally:
            self.rt.close()
