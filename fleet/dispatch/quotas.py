"""Tenants' quotas and budgets at work: admission's checks and the runs' budget port.

The decisions are ``fleet.domain.quota``'s. What they need across processes lives where every
API process and worker sees it: ``submit_per_minute``'s cell in Redis (one script, Redis's own
clock), waiting tasks and the token ledger in the store, today's refusals per tenant in Redis
(embedded: in this process, which is the only one). ``max_queued_tasks`` is counted inside the
admission transaction (``fleet.store.admission``), which this only arms.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from fleet.config import FleetConfig
from fleet.domain import quota
from fleet.domain.admission import Submission
from fleet.domain.quota import QuotaExceeded
from fleet.store import Store

log = logging.getLogger(__name__)

#: How long admission reuses a tenant's day total before reading the ledger again (a flood of
#: submissions reads it once a window). Runs read it before every model call.
LEDGER_CACHE_S = 2.0

#: KEYS[1]: the tenant's cell. ARGV: interval (s), burst (s). Redis's clock for every process.
_GCRA = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('get', KEYS[1]) or '0')
if tat < now then tat = now end
if tat - now > burst then
  return {0, string.format('%.3f', tat - now - burst)}
end
local nxt = tat + interval
redis.call('set', KEYS[1], string.format('%.6f', nxt), 'PX', math.ceil((nxt - now) * 1000) + 1000)
return {1, '0'}
"""
RATE_KEY = "fleet:rate:{{{tenant}}}"
REFUSED_KEY = "fleet:refused:{day}"


class Quotas:
    """A process's view of every tenant's quotas; ``client``: Redis (None: embedded)."""

    def __init__(
        self,
        config: FleetConfig,
        store: Store,
        clock: Callable[[], datetime],
        client: Any = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self._client = client
        self._gcra = client.register_script(_GCRA) if client is not None else None
        self._lock = threading.Lock()
        self._cells: dict[str, float] = {}
        self._day_totals: dict[str, tuple[float, int]] = {}

    @property
    def client(self) -> Any:
        """The Redis client (None: embedded), which the model limits share."""
        return self._client

    # -- admission ------------------------------------------------------------------------------

    def admit(self, sub: Submission, caller_scope: str, *, gated: bool = False) -> Submission:
        """Check a submission against its tenant's quotas and budget before anything is
        stored; returns it armed for the queued count (``max_queued_tasks``) the admission
        makes. A webhook delivery or a task from inside the fleet is never refused. ``gated``:
        ``gate`` checked the rate and budget already (the A2A route, before the SDK)."""
        cfg = self.config.tenant(sub.tenant)
        if not quota.refusable(caller_scope) or not cfg.quotas:
            return sub
        if not gated:
            self.gate(sub.tenant)
        if cfg.max_queued_tasks is None:
            return sub
        return replace(sub, queued_cap=cfg.max_queued_tasks)

    def gate(self, tenant: str, *, queued: bool = False) -> None:
        """The checks that need no admission: ``submit_per_minute`` (takes a place) and the
        day's token budget; with ``queued`` also ``max_queued_tasks`` as it stands (admission
        counts it again, exactly). Raises QuotaExceeded, counted as a refusal."""
        cfg = self.config.tenant(tenant)
        try:
            if cfg.submit_per_minute is not None:
                self._rate(tenant, cfg.submit_per_minute)
            if cfg.tokens_per_day is not None:
                spent = quota.budget_spent(
                    tenant,
                    day_used=self.day_used(tenant),
                    per_day=cfg.tokens_per_day,
                    now=self.clock(),
                )
                if spent is not None:
                    message, name, value, reset = spent
                    raise QuotaExceeded(message, quota=name, value=value, retry_after_s=reset)
            if queued and cfg.max_queued_tasks is not None:
                refused = quota.queued_refusal(
                    tenant, self.store.waiting_tasks(tenant), cfg.max_queued_tasks
                )
                if refused is not None:
                    raise refused
        except QuotaExceeded as exc:
            self.refused(tenant, exc.quota)
            raise

    def _rate(self, tenant: str, per_minute: int) -> None:
        interval, burst = 60.0 / per_minute, 60.0 / per_minute * (per_minute - 1)
        if self._gcra is not None:
            allowed, wait = self._gcra(
                keys=[RATE_KEY.format(tenant=tenant)], args=[interval, burst]
            )
            if not int(allowed):
                raise quota.rate_refusal(tenant, per_minute, float(wait))
            return
        with self._lock:
            decision = quota.gcra(self._cells.get(tenant), time.monotonic(), per_minute)
            if decision.allowed:
                self._cells[tenant] = decision.tat
        if not decision.allowed:
            raise quota.rate_refusal(tenant, per_minute, decision.retry_after_s)

    def refused(self, tenant: str, name: str) -> None:
        """Count a refusal (today, per tenant) where ``fleet tenants`` reads it."""
        from fleet import metrics

        metrics.quota_refused(tenant, name)
        day = quota.utc_day(self.clock())
        try:
            if self._client is None:  # embedded: the store, so `fleet tenants` elsewhere sees it
                self.store.count_refusal(tenant, day)
                return
            key = REFUSED_KEY.format(day=day.isoformat())
            pipe = self._client.pipeline(transaction=False)
            pipe.hincrby(key, tenant, 1)
            pipe.expire(key, 8 * 86400)
            pipe.execute()
        except Exception:  # a figure, never a reason to fail the answer
            log.warning("could not count a refusal for tenant %s", tenant, exc_info=True)

    def refusals(self) -> dict[str, int]:
        """Today's refusals per tenant."""
        day = quota.utc_day(self.clock())
        if self._client is None:
            return self.store.refusals(day)
        found = self._client.hgetall(REFUSED_KEY.format(day=day.isoformat()))
        return {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in found.items()}

    # -- runs -----------------------------------------------------------------------------------

    def day_used(self, tenant: str, *, fresh: bool = False) -> int:
        """The tenant's tokens today (UTC) by the ledger, reused for ``LEDGER_CACHE_S`` unless
        ``fresh``."""
        now = time.monotonic()
        with self._lock:
            cached = self._day_totals.get(tenant)
        if not fresh and cached is not None and now - cached[0] < LEDGER_CACHE_S:
            return cached[1]
        used = self.store.tokens_used(tenant, quota.utc_day(self.clock()))
        with self._lock:
            self._day_totals[tenant] = (now, used)
        return used

    def budget(self, tenant: str, task_id: uuid.UUID) -> Callable[[], str | None]:
        """A run's budget port: asked before each model call (after the run's earlier steps
        were journaled, so the ledger holds them), the message it ends with when its tenant's
        budget is spent (None: go on). Runs of the tenant that are under way together may
        overshoot by what their calls in flight spend."""
        cfg = self.config.tenant(tenant)
        if cfg.tokens_per_day is None and cfg.tokens_per_task is None:
            return _unlimited

        def check() -> str | None:
            spent = quota.budget_spent(
                tenant,
                day_used=self.day_used(tenant, fresh=True) if cfg.tokens_per_day else 0,
                per_day=cfg.tokens_per_day,
                task_used=self.store.task_tokens(task_id) if cfg.tokens_per_task is not None else 0,
                per_task=cfg.tokens_per_task,
                now=self.clock(),
            )
            return None if spent is None else spent[0]

        return check


def _unlimited() -> str | None:
    return None
