"""Where ``fleet run`` and ``fleet tasks`` go: the store, or a server with ``--server``.

Both are the SDK's (:mod:`fleet.sdk.backends`): the store's calls here (:class:`LocalTasks`),
and the one HTTP client (:class:`~fleet.sdk.client.FleetClient`, in :mod:`fleet.cli.remote`),
with what only the CLI asks added (the live view, a task's deliveries, listing, id prefixes).
Both answer with the API's JSON shapes (:mod:`fleet.views`), so a command prints the same
whether it talked to the store (embedded or fleet) or to ``fleet serve``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypedDict, Unpack

import typer
from rich.console import Console

from fleet.cli.common import talk_to
from fleet.cli.live import POLL_MAX_S, POLL_MIN_S, OnEvent, StoreFollower
from fleet.domain.ids import IdPrefix
from fleet.domain.values import Task, TaskStatus
from fleet.sdk.backends import Backend, StoreTasks, View

#: Whole task ids as text.
Ids = list[str]


class TaskQuery(TypedDict, total=False):
    """Which tasks ListTasks lists: of one conversation, deployment or status; the newest
    ``limit`` (100)."""

    conversation_key: str | None
    deployment: str | None
    status: str | None
    limit: int


class Tasks(Backend, Protocol):
    """The task calls the CLI makes: the SDK's, and these."""

    def follow(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        """The task once finished (or as it is after ``timeout``); ``on_event`` gets its events
        as they are stored, else a spinner shows on ``status``."""
        ...

    def give_up(self, task_id: str) -> View | None:
        """The command stops waiting for an unfinished task: embedded, nothing would finish it
        once the command exits, so it is cancelled (its view then); else None (a worker or the
        server goes on)."""
        ...

    def show(self, task_id: uuid.UUID) -> View:
        """GetTask: the task and where its reply was delivered."""
        ...

    def list_tasks(self, **query: Unpack[TaskQuery]) -> list[View]:
        """ListTasks, oldest first (the newest ``limit``)."""
        ...

    def find(self, prefix: IdPrefix, limit: int) -> Ids:
        """Ids (at most ``limit``) that start with ``prefix``, of the tasks this one may see."""
        ...


class LocalTasks(StoreTasks):
    """Straight to the store (and, embedded, running the task in this process)."""

    def follow(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        from fleet.views import task_json

        tid = uuid.UUID(task_id)
        waker = self.rt.local_waker
        if on_event is None:
            if waker is not None:
                from fleet.dispatch.embedded import run_within

                return task_json(run_within(self.rt.dispatcher, waker, tid, timeout))
            with status.status(f"waiting for task {task_id}"):
                return task_json(self.rt.dispatcher.wait(tid, timeout))
        with self._texts(task_id, on_event):
            return task_json(self._follow(tid, timeout, on_event))

    def _follow(self, tid: uuid.UUID, timeout: float, on_event: OnEvent) -> Task:
        """The task once finished, its events handed to ``on_event`` as they are stored."""
        follower = StoreFollower(self.rt.store, tid, on_event)
        waker = self.rt.local_waker
        if waker is not None:
            from fleet.dispatch.embedded import run_within

            return follower.alongside(lambda: run_within(self.rt.dispatcher, waker, tid, timeout))
        deadline = time.monotonic() + timeout
        pause = POLL_MIN_S
        while True:
            task = follower.poll()
            left = deadline - time.monotonic()
            if task.status.terminal or left <= 0:
                return task
            time.sleep(min(pause, left))  # a poll interval, not a synchronization
            pause = min(pause * 2, POLL_MAX_S)

    @contextmanager
    def _texts(self, task_id: str, on_event: OnEvent) -> Iterator[None]:
        """The task's text deltas to ``on_event`` (kind ``delta``) from a thread, meanwhile."""
        done = threading.Event()

        def pump() -> None:
            try:
                for data in self.texts_until(task_id, done.is_set):
                    on_event("delta", data)
            except Exception:  # the text is a preview: the reply is printed once it ends
                return

        thread = threading.Thread(target=pump, name="fleet-run-text", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=2.0)

    def give_up(self, task_id: str) -> View | None:
        if self.rt.local_waker is None:
            return None  # fleet mode: the workers go on
        from fleet.dispatch.embedded import give_up
        from fleet.views import task_json

        return task_json(give_up(self.rt.dispatcher, uuid.UUID(task_id)))

    def show(self, task_id: uuid.UUID) -> View:
        from fleet.views import task_with_deliveries

        task = self.rt.store.get_task(task_id)
        waits = []
        if task.status == TaskStatus.WAITING:  # as GetTask: what it waits for
            waits = self.rt.store.waits_of(task.id, pending=True)
        return task_with_deliveries(task, self.rt.store.task_deliveries(task.id), waits)

    def list_tasks(self, **query: Unpack[TaskQuery]) -> list[View]:
        from fleet.domain.keys import api_scope, split_scoped
        from fleet.store import TaskFilter
        from fleet.views import task_json

        deployment, conversation_key = query.get("deployment"), query.get("conversation_key")
        status, limit = query.get("status"), query.get("limit", 100)
        if deployment is not None:
            self.rt.config.deployment(deployment)  # an unknown one is refused, as by the server
        scope, key, tenants = None, None, None
        if conversation_key is not None:
            # an operator's key: ``api:acme:k`` is tenant acme's when acme is configured
            tenant = self.rt.dispatcher.lifecycle.tenant_of(conversation_key)
            scope, key = split_scoped(conversation_key, api_scope(tenant))
            if scope == "api":
                scope = api_scope(tenant)
            tenants = frozenset({tenant})
        found = self.rt.store.list_tasks(
            TaskFilter(
                deployment=deployment,
                scope=scope,
                conversation_key=key,
                status=None if status is None else TaskStatus(status),
                limit=limit,
                tenants=tenants,
            )
        )
        return [task_json(t) for t in found]

    def find(self, prefix: IdPrefix, limit: int) -> Ids:
        from fleet.store import TaskFilter

        found = self.rt.store.list_tasks(TaskFilter(id_prefix=prefix, limit=limit))
        return [str(t.id) for t in found]


def _remote(server: str, api_key: str | None) -> AbstractContextManager[Tasks]:
    from fleet.cli.remote import RemoteTasks  # (httpx only when a server is named)

    return RemoteTasks(server, api_key)


def tasks_for(ctx: typer.Context) -> AbstractContextManager[Tasks]:
    """The API of ``--server`` / ``FLEET_SERVER`` when given, else the store."""
    return talk_to(ctx, LocalTasks, _remote)
