"""The Celery app: wake-up messages on Redis, chosen for at-least-once redelivery.

Messages carry no work, only "conversation X may have work": the store decides what runs, in
what order, and who holds it. So each setting below is about promptness, never correctness.
The sweeper does not use this queue: it runs in a process of its own (``fleet.dispatch.sweeper``),
so a backlog of wake-ups cannot delay it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from fleet import logs
from fleet.config import load_settings
from fleet.constants import FAIR_HOLD_S, WAKE_QUEUE
from fleet.dispatch.fair import WAKE_FAIR, Due, FairTurns
from fleet.dispatch.leases.redis import RedisLease, lease_keys, same_server
from fleet.dispatch.publish import WakeMessages, redis_broker
from fleet.dispatch.redis_target import RedisTarget
from fleet.dispatch.waker import Wake, WakeBatches

log = logging.getLogger(__name__)


def make_app(redis: RedisTarget | str | None, *, events: bool = False) -> Celery:
    """The app on ``redis`` (a URL or a target: TLS, sentinels); ``events``: workers send task
    events (Flower, ``celery events``)."""
    target = RedisTarget.coerce(redis or "redis://127.0.0.1:6379/0")
    broker = target.celery()
    app = Celery("fleet", broker=broker["broker_url"], include=["fleet.dispatch.tasks"])
    _targets[id(app)] = target
    app.conf.update(
        # Ack after the drain returns: a worker killed mid-drain leaves its message to be
        # redelivered, so the conversation gets another look without waiting for the sweeper.
        task_acks_late=True,
        # Safe because a drain is idempotent: a redelivered wake-up finds the lease or the
        # finished task and does nothing; without it a SIGKILLed child's message is acked (lost).
        task_reject_on_worker_lost=True,
        # One unacked wake-up per process: a busy process does not sit on hints others could run.
        worker_prefetch_multiplier=1,
        broker_transport=broker["broker_transport"],
        broker_use_ssl=broker["broker_use_ssl"],
        broker_transport_options={
            # Redis redelivers unacked messages after this; it must exceed the longest drain
            # (drain_budget plus one run) and the longest collect debounce an ETA waits for.
            "visibility_timeout": 3600,
            **broker["broker_transport_options"],
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


def target_of(celery: Celery) -> RedisTarget:
    """The Redis an app made by ``make_app`` uses (else: its broker URL as a plain server)."""
    return _targets.get(id(celery)) or RedisTarget(str(celery.conf.broker_url))


#: Each app ``make_app`` made, by ``id``: the Redis it reaches.
_targets: dict[int, RedisTarget] = {}
_settings = load_settings()
_target = RedisTarget.of(_settings)
#: The app ``celery -A fleet.dispatch.celery_app`` and ``fleet worker`` run (settings from env).
app = make_app(_target, events=_settings.celery_events)
if _settings.log_format == "json":
    logs.take_over_celery()
_apps: dict[RedisTarget, Celery] = {}


def app_for(redis: RedisTarget | str) -> Celery:
    """A publishing app for ``redis`` (the worker app when it is the settings' own)."""
    target = RedisTarget.coerce(redis)
    if target == _target:
        return app
    if target not in _apps:
        _apps[target] = make_app(target)
    return _apps[target]


class CeleryWaker(WakeBatches):
    """Publishes wake-ups into the fair queue of turns (``fleet.dispatch.fair``): a due
    conversation joins its tenant's set with a ``fleet.turn`` token on the Celery queue; a
    delayed one waits in Celery with an ETA (``fleet.drain``) and joins when it is due.

    An immediate wake-up is skipped when the lease says it is not needed: the conversation's
    holder was knocked instead, or an earlier wake-up has not been picked up yet. With the lease
    on the broker's Redis, the check and the push are one script (``WAKE_FAIR``) per batch.
    """

    def __init__(
        self,
        celery: Celery,
        lease: RedisLease | None = None,
        *,
        queue: str = WAKE_QUEUE,
        tenants: Callable[[str], tuple[int, int]] | None = None,
        hold_s: float = FAIR_HOLD_S,
        turns_of: str | None = None,
    ) -> None:
        self._app = celery
        self._lease = lease
        self._queue = queue
        #: A tenant's (weight, max_running or 0) as the config says.
        self.tenants = tenants or (lambda _: (1, 0))
        self._messages: WakeMessages | None = None
        self._redis: Any = None
        self._wake: Any = None
        self.turns: FairTurns | None = None
        self._target = target_of(celery)
        if redis_broker(celery):
            self._messages = WakeMessages(celery, queue)
            self._redis = self._target.client(socket_connect_timeout=5, socket_timeout=10)
            self.turns = FairTurns(
                self._redis,
                queue,
                self._messages.turn_template(),
                hold_s=hold_s,
                keys_of=turns_of,
            )
            if lease is not None and same_server(lease.client, self._redis):
                # Lease check and push in one round trip (one script).
                self._wake = self._redis.register_script(WAKE_FAIR)

    @property
    def direct(self) -> tuple[FairTurns, RedisTarget] | None:
        """The fair queue and the broker's Redis when due wake-ups go out as one ``WAKE_FAIR``
        script (lease and broker on one Redis), for a publisher on an event loop."""
        if self._wake is None or self.turns is None:
            return None
        return self.turns, self._target

    def due(self, wake: Wake) -> Due:
        weight, cap = self.tenants(wake.tenant)
        return Due(wake.conversation_id, wake.tenant, wake.priority, weight, cap)

    def wake_many(self, wakes: Sequence[Wake]) -> None:
        """Publish hints (``wake``: one): due ones in one round trip (de-duplicate, add,
        tokens); a broker outage is logged, not raised (the sweeper re-sends them)."""
        now = datetime.now(UTC)
        due: list[Wake] = []
        for w in wakes:
            if w.at is not None and w.at > now:
                self._send(w)
            else:
                due.append(w)
        if not due:
            return
        checked = [w.conversation_id for w in due if not w.force and self._lease is not None]
        marked = checked  # until the lease answers, any of them may carry our mark
        try:
            if self._wake is not None:
                assert self.turns is not None
                items = [(self.due(w), not w.force) for w in due]
                keys, args = self.turns.wake_args(
                    items, [lease_keys(w.conversation_id) for w in due]
                )
                self._wake(keys=keys, args=args, client=self._redis)
                return
            if checked:
                assert self._lease is not None
                needed = iter(self._lease.wakes_needed(checked))
                due = [w for w in due if w.force or self._lease is None or next(needed)]
                marked = [w.conversation_id for w in due if not w.force]
            if self.turns is None:  # not a plain Redis broker: a turn per wake-up, unordered
                for w in due:
                    self._app.send_task("fleet.drain", args=_args(w), queue=self._queue)
            elif due:
                self.turns.add([(self.due(w), w.force) for w in due])
        except (OperationalError, RedisError, OSError) as exc:
            # What was admitted is committed: failing now would only invite a duplicate retry.
            log.warning("wake-ups for %d conversation(s) not sent: %s", len(wakes), exc)
            if self._lease is not None:
                with contextlib.suppress(RedisError, OSError):
                    self._lease.forget_wake(*marked)

    def _send(self, wake: Wake) -> None:
        try:
            self._app.send_task("fleet.drain", args=_args(wake), queue=self._queue, eta=wake.at)
        except (OperationalError, RedisError, OSError) as exc:
            log.warning("wake-up for conversation %s not sent: %s", wake.conversation_id, exc)


def _args(wake: Wake) -> list[Any]:
    """``fleet.drain``'s arguments: the conversation, and whose turn it is when it is due."""
    return [str(wake.conversation_id), wake.tenant, wake.priority]
