"""The Celery app: wake-up messages on Redis, chosen for at-least-once redelivery.

Messages carry no work, only "conversation X may have work": the store decides what runs, in
what order, and who holds it. So each setting below is about promptness, never correctness.
The sweeper does not use this queue: it runs in a process of its own (``fleet.dispatch.sweeper``),
so a backlog of wake-ups cannot delay it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from fleet import logs
from fleet.config import load_settings
from fleet.constants import WAKE_QUEUE
from fleet.dispatch.leases.redis import WAKE_PUSH, RedisLease, same_server, wake_push_args
from fleet.dispatch.publish import WakeMessages, redis_broker

log = logging.getLogger(__name__)


def make_app(redis_url: str | None, *, events: bool = False) -> Celery:
    """The app; ``events``: workers send task events (Flower, ``celery events``)."""
    app = Celery(
        "fleet", broker=redis_url or "redis://127.0.0.1:6379/0", include=["fleet.dispatch.tasks"]
    )
    app.conf.update(
        # Ack after the drain returns: a worker killed mid-drain leaves its message to be
        # redelivered, so the conversation gets another look without waiting for the sweeper.
        task_acks_late=True,
        # Safe because a drain is idempotent: a redelivered wake-up finds the lease or the
        # finished task and does nothing; without it a SIGKILLed child's message is acked (lost).
        task_reject_on_worker_lost=True,
        # One unacked wake-up per process: a busy process does not sit on hints others could run.
        worker_prefetch_multiplier=1,
        broker_transport_options={
            # Redis redelivers unacked messages after this; it must exceed the longest drain
            # (drain_budget plus one run) and the longest collect debounce an ETA waits for.
            "visibility_timeout": 3600,
        },
        task_default_queue=WAKE_QUEUE,
        task_ignore_result=True,
        task_store_errors_even_if_ignored=False,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        worker_send_task_events=events,
        # A sent event would cost every admission a Redis round trip; Flower does without.
        task_send_sent_event=False,
        broker_connection_retry_on_startup=True,
        # Warm shutdown lets the current run settle; the drain loop stops after it.
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app


_settings = load_settings()
#: The app ``celery -A fleet.dispatch.celery_app`` and ``fleet worker`` run (settings from env).
app = make_app(_settings.redis_url, events=_settings.celery_events)
if _settings.log_format == "json":
    logs.take_over_celery()
_apps: dict[str, Celery] = {}


def app_for(redis_url: str) -> Celery:
    """A publishing app for ``redis_url`` (the worker app when the URL is the same)."""
    if redis_url == _settings.redis_url:
        return app
    if redis_url not in _apps:
        _apps[redis_url] = make_app(redis_url)
    return _apps[redis_url]


class CeleryWaker:
    """Publishes ``fleet.drain(conversation)`` wake-ups, delayed with an ETA when not yet due.

    An immediate wake-up is skipped when the lease says it is not needed: the conversation's
    holder was knocked instead, or an earlier wake-up has not been picked up yet. On a Redis
    broker immediate wake-ups are pushed directly (``fleet.dispatch.publish``), a batch at a time.
    """

    def __init__(
        self, celery: Celery, lease: RedisLease | None = None, *, queue: str = WAKE_QUEUE
    ) -> None:
        self._app = celery
        self._lease = lease
        self._queue = queue
        self._messages: WakeMessages | None = None
        self._redis: Any = None
        self._wake_push: Any = None
        if redis_broker(celery):
            import redis

            self._messages = WakeMessages(celery, queue)
            self._redis = redis.Redis.from_url(
                str(celery.conf.broker_url), socket_connect_timeout=5, socket_timeout=10
            )
            if lease is not None and same_server(lease.client, self._redis):
                # Lease check and push in one round trip (one script).
                self._wake_push = self._redis.register_script(WAKE_PUSH)

    @property
    def direct(self) -> tuple[WakeMessages, str] | None:
        """The message encoder and broker URL when due wake-ups go out as one ``WAKE_PUSH``
        script (lease and broker on one Redis), for a publisher on an event loop."""
        if self._wake_push is None or self._messages is None:
            return None
        return self._messages, str(self._app.conf.broker_url)

    def wake(
        self, conversation_id: uuid.UUID, at: datetime | None = None, *, force: bool = False
    ) -> None:
        """Publish a hint; a broker outage is logged, not raised (the sweeper re-sends it)."""
        self.wake_many([(conversation_id, at, force)])

    def wake_many(self, wakes: Sequence[tuple[uuid.UUID, datetime | None, bool]]) -> None:
        """Publish several hints: due ones in two round trips (de-duplicate, push)."""
        now = datetime.now(UTC)
        due: list[tuple[uuid.UUID, bool]] = []  # (conversation, ask the lease first), in order
        for conversation_id, at, force in wakes:
            if at is not None and at > now:
                self._send(conversation_id, eta=at)
            else:
                due.append((conversation_id, not force and self._lease is not None))
        if not due:
            return
        checked = [c for c, check in due if check]
        marked = checked  # until the lease answers, any of them may carry our mark
        try:
            if self._wake_push is not None:
                assert self._messages is not None
                items = [(c, check, self._messages.encode(c)) for c, check in due]
                keys, args = wake_push_args(self._messages.queue, items)
                self._wake_push(keys=keys, args=args, client=self._redis)
                return
            if checked:
                assert self._lease is not None
                needed = iter(self._lease.wakes_needed(checked))
                due = [(c, check) for c, check in due if not check or next(needed)]
                marked = [c for c, check in due if check]
            if self._messages is None:
                for conversation_id, _ in due:
                    args = [str(conversation_id)]
                    self._app.send_task("fleet.drain", args=args, queue=self._queue)
            elif due:
                pipe = self._redis.pipeline(transaction=False)
                self._messages.push(pipe, [c for c, _ in due])
                pipe.execute()
        except (OperationalError, RedisError, OSError) as exc:
            # What was admitted is committed: failing now would only invite a duplicate retry.
            log.warning("wake-ups for %d conversation(s) not sent: %s", len(wakes), exc)
            if self._lease is not None:
                with contextlib.suppress(RedisError, OSError):
                    self._lease.forget_wake(*marked)

    def _send(self, conversation_id: uuid.UUID, *, eta: datetime) -> None:
        try:
            self._app.send_task(
                "fleet.drain", args=[str(conversation_id)], queue=self._queue, eta=eta
            )
        except (OperationalError, RedisError, OSError) as exc:
            log.warning("wake-up for conversation %s not sent: %s", conversation_id, exc)
