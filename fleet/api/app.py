"""The FastAPI application factory (``fleet serve`` and the tests build it here)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from fleet import gcpause
from fleet.api import metrics_auth, problems
from fleet.api.audit import AuditTrail
from fleet.api.auth import KeyRing
from fleet.api.event_hub import EventHub, LoopMarks
from fleet.api.events import StreamHandoff
from fleet.api.intake import Intake
from fleet.api.limits import BodyLimit
from fleet.dispatch.redis_target import RedisTarget
from fleet.runtime import Runtime, build
from fleet.version import __version__

log = logging.getLogger(__name__)


def _warn_short_ui_secret(rt: Runtime) -> None:
    """A ``FLEET_UI_SECRET`` too short to sign sessions safely: warned at start (``fleet
    check`` refuses it), so a process upgraded with one still starts, for one release."""
    from fleet.config import short_ui_secret

    short = short_ui_secret(rt.settings)
    if short is not None:
        log.warning(
            "%s; starting anyway: `fleet check` refuses it, and the next release will refuse "
            "to start with it",
            short.message,
        )


def _run_embedded(rt: Runtime) -> Callable[[], None]:
    """Embedded (no Redis): this process also runs what it admits, and fires the schedules'
    ticks (a fleet's ``fleet beat`` does); what stops both."""
    from fleet.dispatch.embedded import EmbeddedLoop
    from fleet.dispatch.schedules import Scheduler

    assert rt.local_waker is not None
    loop = EmbeddedLoop(rt.dispatcher, rt.local_waker)
    loop.start()
    schedules = Scheduler(rt.dispatcher)
    schedules.start()

    def stop() -> None:
        schedules.stop()
        loop.stop()

    return stop


def _event_hub(rt: Runtime) -> EventHub:
    """The hub of the task event streams: change hints and deltas through Redis in a fleet,
    deltas from this process's own runs embedded."""
    from fleet.streaming.local import LocalChannel

    target = RedisTarget.of(rt.settings)
    channel = rt.dispatcher.streaming.channel
    local = channel if isinstance(channel, LocalChannel) else None
    buffer = None
    if target is not None and rt.settings.stream_deltas:
        from fleet.streaming.redis import RedisBuffer

        buffer = RedisBuffer(target)
    return EventHub(
        rt.store,
        hints_url=target,
        marks=LoopMarks.for_store(rt.store),
        deltas=buffer,
        local=local,
    )


def create_app(runtime: Runtime | None = None, *, run_embedded: bool = True) -> FastAPI:
    """An app over ``runtime`` (built from the environment at start-up when not given).

    In embedded mode (no Redis) the app also runs what it admits, a thread a run
    (``FLEET_EMBEDDED_CONCURRENCY`` runs in flight, ``fleet serve --runs``; each conversation
    in order);
    ``run_embedded=False`` leaves admitted tasks queued (API-shape tests).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = runtime is None
        rt = runtime or build()
        app.state.runtime = rt
        app.state.keyring = KeyRing.from_config(rt.config)
        _warn_short_ui_secret(rt)
        metrics_auth.warn_if_open(rt.settings, app.state.keyring)
        app.state.event_hub = _event_hub(rt)
        app.state.intake = Intake(rt)
        loop = None
        background: Any = None
        on_loop: Any = None
        if rt.local_waker is None:
            # Publish wake-ups off the request path: a request answers right after its commit.
            from fleet.dispatch.celery_app import CeleryWaker
            from fleet.dispatch.loop_waker import LoopWaker
            from fleet.dispatch.waker import BackgroundWaker

            original = rt.dispatcher.waker
            background = BackgroundWaker(original)
            direct = original.direct if isinstance(original, CeleryWaker) else None
            on_loop = LoopWaker(
                background, asyncio.get_running_loop(), direct, rt.dispatcher.tenant_share
            )
            rt.dispatcher.waker = on_loop
        if rt.local_waker is not None and run_embedded:
            loop = _run_embedded(rt)
        if owned:  # a process of its own (``fleet serve``): its start-up objects stay
            rt.register("api")
            gcpause.freeze_startup()
            gcpause.fewer_promotions()
        try:
            yield
        finally:
            await app.state.event_hub.close()
            await app.state.intake.close()
            if loop is not None:
                loop()
            if background is not None and on_loop is not None:
                await on_loop.close()
                background.close()
                rt.dispatcher.waker = original
            if owned:
                rt.close()

    app = FastAPI(
        title="fleet",
        version=__version__,
        description="Submit work to a fleet of LLM agents; follow it to its result.",
        lifespan=lifespan,
    )
    problems.install(app)
    app.add_middleware(AuditTrail)  # innermost: it sees the route and the caller
    app.add_middleware(BodyLimit)
    app.add_middleware(StreamHandoff)  # outside the rest: streams hold none of their frames
    from fleet.api import routes

    routes.include(app)
    return app
