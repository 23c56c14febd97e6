"""The composition root: settings + config + store + lease + waker → a Dispatcher.

Embedded (no ``FLEET_REDIS_URL``): SQLite by default, an in-process lease and waker. Fleet:
Redis lease, Celery wake-ups. The dispatcher code is the same in both.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet import logs, metrics, policy
from fleet.agents.tools import toolbox
from fleet.config import FleetConfig, Settings, load_config, load_settings
from fleet.config import secrets as config_secrets
from fleet.dispatch.fair import SharedTurns
from fleet.dispatch.lease import Lease
from fleet.dispatch.leases.local import LocalLease
from fleet.dispatch.manager import Dispatcher
from fleet.dispatch.redis_target import RedisTarget
from fleet.dispatch.turns import Turns
from fleet.dispatch.waker import LocalWaker, Waker
from fleet.domain.redaction import Redactor
from fleet.errors import ConfigError, Unavailable, raise_all
from fleet.store import Store, db

if TYPE_CHECKING:
    from fleet.streaming.sink import Channel, Streaming

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    config: FleetConfig
    store: Store
    dispatcher: Dispatcher
    #: Set in embedded mode: the in-process wake-up queue the embedded loop serves.
    local_waker: LocalWaker | None = None
    #: Set in a fleet on a plain Redis broker: the fair queue of turns workers pick from.
    turns: Turns | None = None
    #: Embedded mode's background jobs (embedding), one thread.
    _jobs: ThreadPoolExecutor | None = field(default=None, repr=False)
    #: Embedded mode's reply deliveries (apart from jobs: a slow receiver delays no embedding).
    _deliveries: ThreadPoolExecutor | None = field(default=None, repr=False)
    _timers: set[threading.Timer] = field(default_factory=set, repr=False)
    _closed: bool = field(default=False, repr=False)
    #: This process's entry in the fleet's registry (``register``), removed on close.
    membership: Any = field(default=None, repr=False)
    _load_shown: bool = field(default=False, repr=False)

    def register(self, role: str, *, slots: int = 0) -> None:
        """Enter this process in the fleet's registry (``fleet workers ls``) as ``role``, with
        ``slots`` runs it can hold at once; nothing embedded (no Redis, one process)."""
        if self.settings.embedded or self.membership is not None:
            return
        from fleet.dispatch.registry import join

        inflight = self.dispatcher.inflight
        if role == "worker" and not self._load_shown:  # its /metrics gauges
            self._load_shown = True
            inflight.watch(lambda held: metrics.worker_load(held, slots))

        def load() -> tuple[int, int]:
            held = inflight.count()
            return held, max(0, slots - held)

        try:
            self.membership = join(
                redis_client(self.settings), role, ttl_s=self.settings.registry_ttl, load=load
            )
        except Exception as exc:  # Redis down at start: the process runs, unlisted for now
            log.warning("could not register this process in the fleet's registry: %s", exc)

    def deliver(self, delivery_id: uuid.UUID, delay_s: float = 0.0) -> None:
        """Attempt a delivery (after ``delay_s``): ``fleet.deliver`` in a fleet, a thread
        embedded (a retry still waiting when the process ends is started by the next sweep)."""
        if not self.settings.embedded:
            app_for(_target(self.settings)).send_task(
                "fleet.deliver", args=[str(delivery_id)], countdown=delay_s or None
            )
            return
        if self._closed:
            return
        if delay_s > 0:
            timer = threading.Timer(delay_s, self.deliver, args=(delivery_id,))
            timer.daemon = True
            self._timers.add(timer)
            timer.start()
            return
        if self._deliveries is None:
            self._deliveries = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fleet-deliver")
        self._deliveries.submit(_logged, self.dispatcher.deliveries.run, delivery_id)

    def job(self, name: str, conversation_id: uuid.UUID) -> None:
        """Run a background job: a Celery task in a fleet, a thread of this process embedded."""
        if not self.settings.embedded:
            app_for(_target(self.settings)).send_task(name, args=[str(conversation_id)])
            return
        if self._jobs is None:
            self._jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-jobs")
        run = {"fleet.memorize": self.dispatcher.sources.memorize}[name]
        self._jobs.submit(_logged, run, conversation_id)

    def close(self) -> None:
        self._closed = True
        if self.membership is not None:
            self.membership.stop()
            self.membership = None
        self.dispatcher.hints.close()  # a cancel's hint, say, before the process exits
        for timer in list(self._timers):
            timer.cancel()
        if self._deliveries is not None:
            self._deliveries.shutdown(wait=True)
        if self._jobs is not None:
            self._jobs.shutdown(wait=True)
        toolbox.close_kept()  # MCP servers kept across runs end with the worker process
        self.store.dispose()


def _logged(run: Any, conversation_id: uuid.UUID) -> None:
    try:
        run(conversation_id)
    except Exception:  # a background job; the next settle of the conversation tries again
        log.warning("background job for %s failed", conversation_id, exc_info=True)


def open_store(
    settings: Settings, *, readonly: bool = False, config: FleetConfig | None = None
) -> Store:
    """The store, redacting the settings' secrets and those ``config`` names."""
    secrets = settings.secrets() + (config_secrets.values(config) if config is not None else ())
    redactor = Redactor(secrets)
    logs.redact_with(redactor)  # JSON log records get the same redaction as the store
    return Store.open(
        settings.resolved_database_url,
        redactor,
        readonly=readonly,
        pooler=settings.database_pooler,
        pool_size=settings.database_pool_size,
    )


def ensure_schema(store: Store) -> None:
    """Embedded SQLite is migrated on first use; PostgreSQL must be at this release's revision
    or at a newer one whose later steps only expand (``fleet migrate``)."""
    from fleet.store import revision

    with db.unavailable_on_outage():
        found = revision.check(store.engine)
        if found.ok:
            return
        if store.dialect == "sqlite" and found.action == "migrate":
            from fleet.store import migrate  # (Alembic: loaded when a schema must change)

            migrate.upgrade(store.engine)
            return
    raise Unavailable(found.message or "database schema unusable")


def preflight(config: FleetConfig) -> None:
    """Refuse a start that could not work, before anything is created: an authorize policy
    that does not import, a configured secret too short to redact (ConfigError names each)."""
    from fleet.config import secrets

    found: list[ConfigError] = []
    try:
        policy.of(config)
    except ConfigError as exc:
        found.append(exc)
    raise_all(found + secrets.too_short(config))  # every one, a line each


def build(
    settings: Settings | None = None,
    config: FleetConfig | None = None,
    *,
    lease: Lease | None = None,
    waker: Waker | None = None,
    check_schema: bool = True,
) -> Runtime:
    settings = settings or load_settings()
    config = config or load_config(settings.config_dir)
    preflight(config)  # before the store: a refused start creates nothing
    metrics.know_tenants(config.tenant_names)
    store = open_store(settings, config=config)
    if check_schema:
        ensure_schema(store)
    if config.app.embeddings.search == "auto" and any(
        a.recall is not None for a in config.agents.values()
    ):
        with db.unavailable_on_outage():
            store.enable_vector_search(create=True)
    local_waker: LocalWaker | None = None
    turns: Turns | None = None
    weights = {name: config.tenant(name).weight for name in config.tenant_names}
    caps = {name: config.tenant(name).max_running for name in config.tenant_names}

    def share(tenant: str) -> tuple[int, int]:
        cfg = config.tenant(tenant)
        return cfg.weight, cfg.max_running or 0

    if settings.embedded:
        lease = lease or LocalLease(settings.lease_ttl)
        if waker is None:
            waker = local_waker = LocalWaker()
            local_waker.configure(weights, caps)
    else:
        from fleet.dispatch.leases.redis import RedisLease

        if lease is None:
            lease = RedisLease(redis_client(settings), settings.lease_ttl)
        if waker is None:
            from fleet.dispatch.celery_app import CeleryWaker

            celery_waker = CeleryWaker(
                app_for(_target(settings)),
                lease if isinstance(lease, RedisLease) else None,
                tenants=share,
                hold_s=settings.turn_hold,
            )
            if celery_waker.turns is not None:
                turns = SharedTurns(celery_waker.turns, weights, caps)
            waker = celery_waker
    hints = None
    if not settings.embedded:
        from fleet.dispatch.hints import RedisHints

        hints = RedisHints(hints_client(settings))
    dispatcher = Dispatcher(
        settings=settings, config=config, store=store, lease=lease, waker=waker, hints=hints
    )
    if not settings.embedded:
        from fleet.dispatch.quotas import Quotas

        dispatcher.quotas = Quotas(config, store, dispatcher.clock, redis_client(settings))
        if config.app.model_limits:  # shared by every process that calls the same models
            from dataclasses import replace

            from fleet.dispatch.model_capacity import RedisCapacity

            capacity = RedisCapacity(dispatcher.quotas.client)
            dispatcher.traffic = replace(dispatcher.traffic, capacity=capacity)
    if settings.stream_deltas:
        dispatcher.streaming = _streaming(settings, store)
    runtime = Runtime(settings, config, store, dispatcher, local_waker, turns)
    dispatcher.deliveries.enqueue = runtime.deliver
    if any(a.recall is not None or a.observations for a in config.agents.values()):
        dispatcher.sources.jobs = runtime.job
    return runtime


def _streaming(settings: Settings, store: Store) -> Streaming:
    """Token streaming: onto Redis in a fleet, within this process embedded; the text
    redacted as the store redacts the journal."""
    from fleet.domain.stream_redaction import StreamRedactor
    from fleet.streaming.sink import Streaming

    channel: Channel
    if settings.embedded:
        from fleet.streaming.local import LocalChannel

        channel = LocalChannel(buffer=settings.delta_buffer, ttl_s=settings.delta_ttl)
    else:
        from fleet.streaming.redis import RedisChannel

        channel = RedisChannel(
            hints_client(settings), buffer=settings.delta_buffer, ttl_s=settings.delta_ttl
        )
    return Streaming(channel, lambda: StreamRedactor(store.redactor))


def _target(settings: Settings) -> RedisTarget:
    target = RedisTarget.of(settings)
    assert target is not None, "no Redis in embedded mode"
    return target


def app_for(target: RedisTarget) -> Any:
    """The Celery app publishing to ``target`` (Celery is loaded on first use)."""
    from fleet.dispatch.celery_app import app_for as celery_app_for

    return celery_app_for(target)


def hints_client(settings: Settings) -> Any:
    """Change hints' client: one retry, short timeouts (a hint late is worth little)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return _target(settings).client(
        socket_connect_timeout=2, socket_timeout=2, retry=Retry(NoBackoff(), 1)
    )


def redis_client(settings: Settings) -> Any:
    """The lease's (and sweeper's, quotas') client."""
    return _target(settings).client(
        socket_connect_timeout=5, socket_timeout=10, health_check_interval=30
    )
