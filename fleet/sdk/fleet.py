"""The SDK's entry point: a ``Fleet``, and one ``Conversation`` object per conversation.

``Fleet()`` runs embedded (a SQLite file, tasks run on a pool of threads in this process while
the object lives), admits into a fleet when ``FLEET_REDIS_URL`` is set (workers run the tasks),
or talks to a ``fleet serve`` with ``Fleet(server=URL, api_key=...)`` (or ``FLEET_SERVER``).
Every way keeps the same guarantees: a conversation's tasks run one at a time, in order.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Unpack

from fleet.constants import MAX_EMBEDDED_RUNS
from fleet.domain.keys import blank
from fleet.errors import FleetError, InputError
from fleet.sdk.backends import Backend, Input, StoreTasks, Submission, View, messages_of
from fleet.sdk.closing import Closing
from fleet.sdk.tasks import Message, TaskHandle


class Conversation:
    """One conversation of a deployment: each run continues it, in order.

    Without a key the first submission starts a new conversation, and this object keeps its
    key (``conv.key``, e.g. ``api:3f2c...``); ``fleet.conversation(name, key=that)`` resumes it
    later, from this process or another.
    """

    def __init__(
        self, backend: Backend, deployment: str, key: str | None, resource: str | None = None
    ) -> None:
        self._backend = backend
        self.deployment = deployment
        #: Who the conversation is about (``resourceId``): recall and working memory with
        #: ``scope = "resource"`` reach that resource's other conversations.
        self.resource = resource
        self._key = key or None
        self._first = threading.Lock()

    @property
    def key(self) -> str | None:
        """The conversation's scoped key (``api:ticket-4711``) once a submission answered (the
        key as given before that; None for a keyless conversation not yet started)."""
        return self._key

    def __repr__(self) -> str:
        return f"Conversation({self.deployment!r}, key={self._key!r}, resource={self.resource!r})"

    def submit(self, input: Input, **options: Unpack[Submission]) -> TaskHandle:
        """Add a task to the conversation and return at once (it runs after those before it).

        ``delivery`` (``followup``, ``collect``, ``steer``, ``interrupt``) overrides the
        deployment's queue mode for this submission; ``idempotency_key`` makes repeats
        return the first task.
        """

        def send() -> View:
            view = self._backend.submit(
                self.deployment,
                input,
                conversation_key=self._key,
                resource_id=self.resource,
                **options,
            )
            self._key = view["conversation"]
            return view

        if self._key is not None:
            view = send()
        else:
            with self._first:  # a keyless conversation's first run: the others wait for its key
                view = send()
        return TaskHandle._admitted(self._backend, view)

    def run(
        self, input: Input, *, timeout: float | None = None, **options: Unpack[Submission]
    ) -> str:
        """Submit and wait: the agent's reply. TaskFailed if the task failed or was
        cancelled; TimeoutError after ``timeout`` seconds (the task goes on)."""
        return self.submit(input, **options).wait(timeout)

    async def asubmit(self, input: Input, **options: Unpack[Submission]) -> TaskHandle:
        """``submit`` for async code (the admission runs on a worker thread)."""
        return await asyncio.to_thread(self.submit, input, **options)

    async def arun(
        self, input: Input, *, timeout: float | None = None, **options: Unpack[Submission]
    ) -> str:
        """``run`` for async code: the event loop goes on while the task runs."""
        handle = await self.asubmit(input, **options)
        return await handle.await_(timeout)

    def messages(self, limit: int = 100) -> list[Message]:
        """The conversation's newest ``limit`` messages (at most 1000), oldest first."""
        if self._key is None:
            return []
        found = messages_of(self._backend, self.deployment, self._key, limit)
        return [Message.from_view(m) for m in found]


class Fleet(Closing):
    """Entry point of the SDK; close it (or use ``with``) to stop its threads and connections.

    - ``Fleet()``: embedded without ``FLEET_REDIS_URL`` (SQLite in ``FLEET_HOME``, tasks run on
      up to ``concurrency`` runs in flight here, a thread each: ``FLEET_EMBEDDED_CONCURRENCY``,
      100); with it, fleet mode
      (the store of ``FLEET_DATABASE_URL``; ``fleet worker`` processes run the tasks).
    - ``Fleet(server=URL, api_key=KEY)`` (or ``FLEET_SERVER`` / ``FLEET_API_KEY``): a
      ``fleet serve`` over HTTP.

    ``config_dir``, ``home`` and ``database_url`` override ``FLEET_CONFIG_DIR``, ``FLEET_HOME``
    and ``FLEET_DATABASE_URL``.
    """

    def __init__(
        self,
        server: str | None = None,
        api_key: str | None = None,
        *,
        config_dir: str | Path | None = None,
        home: str | Path | None = None,
        database_url: str | None = None,
        concurrency: int | None = None,
    ) -> None:
        from fleet.config import load_settings

        overrides: dict[str, Any] = {
            k: v
            for k, v in (("config_dir", config_dir), ("home", home), ("database_url", database_url))
            if v is not None
        }
        if concurrency is not None:
            if not 1 <= concurrency <= MAX_EMBEDDED_RUNS:
                raise InputError(
                    f"concurrency (runs in flight) must be 1 to {MAX_EMBEDDED_RUNS}, "
                    f"got {concurrency}",
                    field="concurrency",
                )
            overrides["embedded_concurrency"] = concurrency
        settings = load_settings(**overrides)
        server = server or settings.server
        self._backend: Backend
        if server:
            if concurrency is not None:
                raise InputError(
                    "concurrency is for embedded mode; the server's own settings decide",
                    field="concurrency",
                )
            from fleet.sdk.client import FleetClient

            secret = settings.api_key.get_secret_value() if settings.api_key else None
            self._backend = FleetClient(server, api_key or secret)
            self._mode = "server"
        else:
            from fleet.sdk.backends import StoreBackend

            store = StoreBackend(settings, concurrency)
            self._backend, self._mode = store, store.mode
        self._closed = False

    @property
    def mode(self) -> str:
        """``embedded``, ``fleet`` or ``server``."""
        return self._mode

    def conversation(
        self, deployment: str, key: str | None = None, *, resource: str | None = None
    ) -> Conversation:
        """The conversation ``key`` of ``deployment`` (created by its first run); no key: a new
        one on the first run. ``resource`` names who its submissions are about."""
        if key is not None and blank(key):  # not "no key": a new conversation every time
            raise InputError(
                f"conversation key {key!r} is {'empty' if key == '' else 'blank'}: give the key, "
                "or none for a new conversation",
                field="key",
            )
        self._open()
        if isinstance(self._backend, StoreTasks):  # a server says at the first submission
            self._backend.check_deployment(deployment)
        return Conversation(self._backend, deployment, key, resource)

    def task(self, task_id: str) -> TaskHandle:
        """A handle on a task submitted earlier (by id)."""
        self._open()
        try:
            uuid.UUID(task_id)
        except ValueError:
            raise InputError(f"task id {task_id!r} is not a UUID", field="id") from None
        return TaskHandle._admitted(self._backend, self._backend.get_task(task_id))

    def _open(self) -> None:
        if self._closed:
            raise FleetError("this Fleet is closed; make a new one")

    def close(self) -> None:
        """Stop running tasks here (embedded: each running one finishes first) and disconnect."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
