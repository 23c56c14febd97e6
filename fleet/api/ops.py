"""Ops endpoints: ``/healthz`` (process up), ``/readyz`` (store and Redis usable), ``/metrics``.

Where the metrics come from (a fleet's work happens in other processes than the API's):

- **This API process** counts admissions: ``fleet_tasks_submitted_total{deployment,outcome}``
  (``outcome`` = new, merged, duplicate: merges are ``outcome="merged"``).
- **The store, read at scrape time**, gives fleet-wide gauges that are right whichever API replica
  is scraped: ``fleet_backlog_tasks{deployment,status}`` (queued, leased, running, interrupted)
  and ``fleet_backlog_oldest_due_seconds{deployment}`` (how long the oldest due task has waited,
  never one held behind a waiting task; the signal to scale workers on). Every replica reports
  the same values, so aggregate them with ``max``, not ``sum``. ``fleet_backlog_up`` is 0 when
  the store could not be read (the scrape itself still succeeds, with the process metrics). In
  the same read, per tenant (configured tenants; any other folds into ``other``, as the tenant
  counters do):
  ``fleet_tenant_backlog_tasks{tenant,status}`` (queued: queued and handed back; waiting: for an
  approval, a delegate or a time; running: leased and running) and
  ``fleet_tenant_tokens_today{tenant}`` (the token ledger's UTC day).
- **Worker processes** record runs: started, finished (by status), queue wait and run duration
  histograms, retries and recoveries. Celery's prefork children cannot each be scraped, so
  ``fleet worker --metrics-port N`` runs them in Prometheus multiprocess mode and serves their sum
  on ``:N/metrics`` (see :mod:`fleet.dispatch.worker_metrics`); scrape each worker pod there.
- With ``PROMETHEUS_MULTIPROC_DIR`` set (``fleet serve --workers N`` sets one up when N > 1),
  this endpoint sums every process that writes to that folder: all uvicorn workers, and Celery
  workers too when they share the host and the folder (a single-machine fleet).
- Who may read it: :mod:`fleet.api.metrics_auth` (``FLEET_METRICS_TOKEN``, or a port of its own
  with ``fleet serve --metrics-port``: :mod:`fleet.api.metrics_port`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from fleet import metrics as counters
from fleet.api.deps import RuntimeDep
from fleet.api.metrics_auth import metrics_guard
from fleet.api.problems import RETRY_AFTER_S, problem
from fleet.api.schemas import problem_responses
from fleet.dispatch.redis_target import RedisTarget
from fleet.domain.values import UNFINISHED
from fleet.errors import FleetError
from fleet.runtime import Runtime
from fleet.store import db, revision
from fleet.store.queries import Backlog
from fleet.store.quotas import TenantFigures

router = APIRouter(tags=["ops"])

#: Seconds a readiness probe waits for Redis to answer before calling it down.
REDIS_TIMEOUT_S = 2.0


@router.get("/healthz", operation_id="Health", summary="The process is up (no I/O)")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _database(rt: Runtime) -> str | None:
    """None when the store answers and this release runs on its schema (at this release's
    revision, or newer by expand steps only), else what is wrong."""
    try:
        with db.unavailable_on_outage():
            found = revision.check(rt.store.engine)
    except FleetError as exc:
        return exc.message
    except Exception as exc:  # any driver failure means "not ready", never a 500
        return f"database unavailable: {db.describe(exc)}"
    return found.message


async def _redis(target: RedisTarget) -> str | None:
    client = target.async_client(
        socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    try:
        await client.ping()
    except Exception as exc:
        return f"redis unavailable: {type(exc).__name__}: {exc}"
    finally:
        await client.aclose()
    return None


@router.get(
    "/readyz",
    operation_id="Ready",
    summary="The database is reachable and migrated, and Redis answers",
    responses={503: {"description": "Something this process needs is down; the body says what."}},
)
async def readyz(rt: RuntimeDep) -> JSONResponse:
    checks: dict[str, str | None] = {"database": await run_in_threadpool(_database, rt)}
    if (target := RedisTarget.of(rt.settings)) is not None:
        checks["redis"] = await _redis(target)
    down = {name: why for name, why in checks.items() if why is not None}
    shown = {name: why or "ok" for name, why in checks.items()}
    if down:
        return problem(
            503,
            "Not ready",
            "; ".join(f"{name}: {why}" for name, why in down.items()),
            headers={"Retry-After": str(RETRY_AFTER_S)},
            checks=shown,
        )
    return JSONResponse({"status": "ready", "checks": shown})


class _BacklogCollector(Collector):
    """Gauges from one backlog read (every configured deployment and status, zeros included)."""

    def __init__(self, deployments: list[str], found: list[Backlog] | None) -> None:
        self.deployments = deployments
        self.found = found

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("fleet_backlog_up", "1 when the store's backlog could be read.")
        up.add_metric([], 0.0 if self.found is None else 1.0)
        yield up
        if self.found is None:
            return
        tasks = GaugeMetricFamily(
            "fleet_backlog_tasks",
            "Unfinished tasks now, by deployment and status (fleet-wide, from the store).",
            labels=["deployment", "status"],
        )
        oldest = GaugeMetricFamily(
            "fleet_backlog_oldest_due_seconds",
            "How long the oldest due task has waited for a worker (fleet-wide; never one held "
            "behind a waiting task).",
            labels=["deployment"],
        )
        counts = {(b.deployment, b.status): b.count for b in self.found}
        now = datetime.now(UTC)
        waiting: dict[str, float] = {}
        for b in self.found:
            if b.oldest is not None:  # due work only (the store's read leaves out the rest)
                age = max(0.0, (now - b.oldest).total_seconds())
                waiting[b.deployment] = max(waiting.get(b.deployment, 0.0), age)
        names = sorted(set(self.deployments) | {b.deployment for b in self.found})
        for name in names:
            for status in UNFINISHED:
                tasks.add_metric([name, status.value], float(counts.get((name, status), 0)))
            oldest.add_metric([name], waiting.get(name, 0.0))
        yield tasks
        yield oldest


class _TenantCollector(Collector):
    """Per-tenant gauges from the same scrape's read: every configured tenant (zeros included),
    the rest summed as ``other`` so that the label's values stay bounded."""

    def __init__(self, tenants: tuple[str, ...], found: dict[str, TenantFigures]) -> None:
        self.tenants = tenants
        self.found = found

    def collect(self) -> Iterator[Metric]:
        tasks = GaugeMetricFamily(
            "fleet_tenant_backlog_tasks",
            "Unfinished tasks now, by tenant: queued (queued, handed back), waiting (for an "
            "approval, a delegate or a time) and running (leased, running); fleet-wide, from the "
            "store.",
            labels=["tenant", "status"],
        )
        tokens = GaugeMetricFamily(
            "fleet_tenant_tokens_today",
            "Model tokens the tenant's runs used today (UTC), from the token ledger.",
            labels=["tenant"],
        )
        sums: dict[str, list[int]] = {name: [0, 0, 0, 0] for name in self.tenants}
        for name, f in self.found.items():
            row = sums.setdefault(counters.tenant_label(name), [0, 0, 0, 0])
            row[0] += f.queued
            row[1] += f.waiting
            row[2] += f.running
            row[3] += f.tokens_today
        for name in sorted(sums):
            queued, waiting, running, used = sums[name]
            tasks.add_metric([name, "queued"], float(queued))
            tasks.add_metric([name, "waiting"], float(waiting))
            tasks.add_metric([name, "running"], float(running))
            tokens.add_metric([name], float(used))
        yield tasks
        yield tokens


def _backlog(rt: Runtime) -> tuple[list[Backlog], dict[str, TenantFigures]] | None:
    """The store's backlog and tenants' figures, or None when the store cannot be read."""
    try:
        now = datetime.now(UTC)
        return rt.store.backlog(now), rt.store.tenant_figures(now)
    except Exception:  # an outage must not take the process metrics down with it
        return None


def _process_metrics() -> bytes:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return generate_latest(REGISTRY)
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def render_metrics(rt: Runtime) -> bytes:
    """The ``/metrics`` body: this process's metrics (or its multiprocess folder's sum) and the
    store's gauges. The API port's route and ``fleet serve --metrics-port`` both serve it."""
    found = _backlog(rt)
    backlog = CollectorRegistry()
    backlog.register(
        _BacklogCollector(sorted(rt.config.deployments), None if found is None else found[0])
    )
    if found is not None:
        backlog.register(_TenantCollector(rt.config.tenant_names, found[1]))
    return _process_metrics() + generate_latest(backlog)


@router.get(
    "/metrics",
    operation_id="Metrics",
    summary="Prometheus metrics (a metrics token or an operator key once one is configured)",
    response_class=Response,
    dependencies=[Depends(metrics_guard)],
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(401, 403),
    },
)
async def metrics(rt: RuntimeDep) -> Response:
    """Open unless `FLEET_METRICS_TOKEN` or `fleet serve --metrics-port` is set; then send the
    token (or an operator's key) as a bearer token."""
    body = await run_in_threadpool(render_metrics, rt)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
