"""Where the SDK's calls go: the store (embedded or fleet mode) or a ``fleet serve`` over HTTP.

Both answer with the API's JSON shapes (:mod:`fleet.views`), so :mod:`fleet.sdk` reads one shape
whichever way it talks, as the CLI does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from fleet.constants import DEFAULT_TENANT
from fleet.domain.values import TaskStatus
from fleet.errors import (
    Conflict,
    FleetError,
    Forbidden,
    InputError,
    NotFound,
    QueueFull,
)

if TYPE_CHECKING:
    from fleet.client import ApiError
    from fleet.config import Settings

View = dict[str, Any]
Input = str | list[dict[str, Any]]

#: Store reads while waiting start this often and back off to the second figure (seconds).
POLL_MIN_S, POLL_MAX_S = 0.005, 0.1
#: Messages a task handle looks through for its own (the API's largest page).
MESSAGES_PAGE = 1000
#: One long wait on a server when the caller gives no timeout (repeated until the task ends).
FOREVER_S = 3600.0


def terminal(view: View) -> bool:
    return TaskStatus(view["status"]).terminal


class Backend(Protocol):
    """The operations a Fleet needs, against the store or a server."""

    #: ``embedded``, ``fleet`` or ``server``.
    mode: str

    def check_deployment(self, name: str) -> None:
        """Refuse an unknown deployment now, where that can be known without a request."""

    def submit(
        self,
        deployment: str,
        input: Input,
        *,
        key: str | None,
        labels: dict[str, str] | None,
        idempotency_key: str | None,
        delivery: str | None,
        resource: str | None,
    ) -> View: ...

    def get(self, task_id: str) -> View: ...

    def wait(self, task_id: str, timeout: float | None) -> View:
        """The task once terminal, or as it is when ``timeout`` seconds passed."""
        ...

    async def wait_async(self, task_id: str, timeout: float | None) -> View:
        """``wait`` without blocking the event loop."""
        ...

    def cancel(self, task_id: str) -> View:
        """``{"effect": cancelled|requested|finished, "task": {...}}``."""
        ...

    def messages(self, deployment: str, key: str, limit: int) -> list[View]:
        """The conversation's newest ``limit`` messages, oldest first ([] if it has none yet)."""
        ...

    def close(self) -> None: ...


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


class StoreBackend:
    """Straight to the store: embedded mode runs tasks on this process's pool of threads while
    the object lives; fleet mode admits into the fleet and waits for its workers."""

    def __init__(self, settings: Settings, concurrency: int | None) -> None:
        from fleet.runtime import build

        self.rt = build(settings)
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
        self.mode = "embedded" if self._loop is not None else "fleet"

    def check_deployment(self, name: str) -> None:
        try:
            self.rt.config.deployment(name)
        except NotFound as exc:
            raise InputError(exc.message, field="deployment") from None

    def submit(
        self,
        deployment: str,
        input: Input,
        *,
        key: str | None,
        labels: dict[str, str] | None,
        idempotency_key: str | None,
        delivery: str | None,
        resource: str | None,
    ) -> View:
        from fleet.views import admission_json

        admitted = self.rt.dispatcher.submit(
            deployment,
            input,
            key=key,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
            resource_id=resource,
        )
        return admission_json(admitted)

    def get(self, task_id: str) -> View:
        from fleet.views import task_json

        return task_json(self.rt.store.get_task(uuid.UUID(task_id)))

    def wait(self, task_id: str, timeout: float | None) -> View:
        pauses = _Pauses(timeout)
        while True:
            view = self.get(task_id)
            if terminal(view) or pauses.over():
                return view
            time.sleep(pauses.pause())

    async def wait_async(self, task_id: str, timeout: float | None) -> View:
        pauses = _Pauses(timeout)
        while True:
            view = await asyncio.to_thread(self.get, task_id)
            if terminal(view) or pauses.over():
                return view
            await asyncio.sleep(pauses.pause())

    def cancel(self, task_id: str) -> View:
        from fleet.views import task_json

        result = self.rt.dispatcher.cancel(uuid.UUID(task_id))
        return {"effect": result.effect, "task": task_json(result.task)}

    def messages(self, deployment: str, key: str, limit: int) -> list[View]:
        from fleet.domain import keys
        from fleet.views import message_json

        self.check_deployment(deployment)
        dep = self.rt.config.deployment(deployment)
        ref = keys.resolve(dep.kind, "api", key)
        found = self.rt.store.find_conversation(dep.name, ref.scope, ref.key, tenant=DEFAULT_TENANT)
        if found is None:
            return []
        return [message_json(m) for m in self.rt.store.messages(found, limit=limit)]

    def close(self) -> None:
        try:
            if self._loop is not None:
                self._loop.stop()  # runs hand their tasks back after their current step
        finally:
            self.rt.close()


#: A server's 4xx answers as the errors the store raises for the same request.
_BY_STATUS: dict[int, type[FleetError]] = {
    400: InputError,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InputError,
    422: InputError,
    429: QueueFull,
}


def _typed(exc: ApiError) -> FleetError:
    kind = _BY_STATUS.get(exc.status)
    return exc if kind is None else kind(exc.message, field=exc.field)


class ServerBackend:
    """Through a ``fleet serve``'s HTTP API (SubmitTask, GetTask long-polls, CancelTask,
    ListConversationMessages); its errors are the store's (InputError, NotFound, ...)."""

    mode = "server"

    def __init__(self, server: str, api_key: str | None) -> None:
        from fleet.client import FleetClient

        self.client = FleetClient(server, api_key)

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        from fleet.client import ApiError

        try:
            yield
        except ApiError as exc:
            raise _typed(exc) from None

    def check_deployment(self, name: str) -> None:
        """The server says at the first submission (it knows which deployments are yours)."""

    def submit(
        self,
        deployment: str,
        input: Input,
        *,
        key: str | None,
        labels: dict[str, str] | None,
        idempotency_key: str | None,
        delivery: str | None,
        resource: str | None,
    ) -> View:
        with self._mapped():
            return self.client.submit(
                deployment,
                input,
                conversation_key=key,
                labels=labels,
                idempotency_key=idempotency_key,
                delivery=delivery,
                resource_id=resource,
            )

    def get(self, task_id: str) -> View:
        with self._mapped():
            return self.client.get_task(task_id)

    def wait(self, task_id: str, timeout: float | None) -> View:
        with self._mapped():
            while True:
                view = self.client.wait(task_id, FOREVER_S if timeout is None else timeout)
                if timeout is not None or terminal(view):
                    return view

    async def wait_async(self, task_id: str, timeout: float | None) -> View:
        with self._mapped():
            while True:
                view = await self.client.wait_async(
                    task_id, FOREVER_S if timeout is None else timeout
                )
                if timeout is not None or terminal(view):
                    return view

    def cancel(self, task_id: str) -> View:
        with self._mapped():
            return self.client.cancel(task_id)

    def messages(self, deployment: str, key: str, limit: int) -> list[View]:
        from fleet.client import ApiError

        try:
            found: list[View] = self.client.messages(key, deployment, limit=limit)["messages"]
        except ApiError as exc:
            if exc.status == 404 and exc.field == "conversationKey":
                return []  # no message yet
            raise _typed(exc) from None
        return found

    def close(self) -> None:
        self.client.close()
