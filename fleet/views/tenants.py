"""How tenants look to operators: one JSON shape for ``GET /v1/tenants``, ``fleet tenants`` and
the operator UI's overview, and the short numbers a terminal table shows.

The shaping is pure (config, figures and refusals in, dicts out) so that the API, the CLI's
direct backend and the UI cannot drift apart; ``read_tenants`` is the one read they share.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleet.config.tenants import TenantConfig
from fleet.domain.cost import money
from fleet.domain.quota import next_reset
from fleet.errors import NotFound
from fleet.store.quotas import TenantFigures
from fleet.views import iso

if TYPE_CHECKING:
    from fleet.config import FleetConfig
    from fleet.runtime import Runtime

log = logging.getLogger(__name__)

View = dict[str, Any]
#: May the reader see this tenant (``Caller.reaches``; the operator's own CLI sees all)?
Reaches = Callable[[str], bool]


def everyone(tenant: str) -> bool:
    """The reach of the operator's own CLI and of an open API's UI: every tenant."""
    return True


def tenant_json(
    cfg: TenantConfig, found: TenantFigures | None, refused: int | None, now: datetime
) -> View:
    """One tenant now: its settings, what it runs and waits for, what it spent and was refused
    today. ``refused`` None: today's refusals could not be read (Redis down), which is not 0."""
    f = found if found is not None else TenantFigures(cfg.name)
    oldest = 0.0
    if f.oldest_due is not None:  # min(not_before) of its due work: maybe still ahead
        oldest = round(max(0.0, (now - f.oldest_due).total_seconds()), 3)
    return {
        "tenant": cfg.name,
        "weight": cfg.weight,
        "quotas": cfg.quotas,
        "running": f.running,
        "conversationsRunning": f.conversations_running,
        "queued": f.queued,
        "waiting": f.waiting,
        "oldestDueSeconds": oldest,
        "tokensToday": f.tokens_today,
        "costToday": money(f.cost_today_micros),
        "tokensPerDay": cfg.tokens_per_day,
        "budgetResetsAt": iso(next_reset(now)),
        "refusedToday": refused,
    }


def shown_names(
    configured: Iterable[str], figures: Mapping[str, TenantFigures], reaches: Reaches
) -> list[str]:
    """The tenants a reader sees: the configured ones and any other the store has figures for
    (unfinished tasks, tokens today: a tenant whose files were removed still shows), each only
    when in reach; sorted."""
    return sorted(name for name in {*configured, *figures} if reaches(name))


def tenants_json(
    config: FleetConfig,
    figures: Mapping[str, TenantFigures],
    refusals: Mapping[str, int] | None,
    now: datetime,
    reaches: Reaches,
) -> list[View]:
    """Every tenant the reader reaches (``shown_names``), as ``tenant_json`` shapes it."""
    return [
        tenant_json(
            config.tenant(name),
            figures.get(name),
            None if refusals is None else refusals.get(name, 0),
            now,
        )
        for name in shown_names(config.tenant_names, figures, reaches)
    ]


def one_tenant(views: Iterable[View], name: str) -> View:
    """The view of ``name``; an unknown tenant and one outside the reader's reach answer alike
    (404, the same words), so a reach cannot be probed for names."""
    for view in views:
        if view["tenant"] == name:
            return view
    raise NotFound(f"no tenant {name!r}")


def read_tenants(rt: Runtime, reaches: Reaches) -> list[View]:
    """The one read behind every tenants view: the store's figures (one grouped query) and
    today's refusals (Redis in a fleet), at the dispatcher's clock."""
    now = rt.dispatcher.clock()
    figures = rt.store.tenant_figures(now)
    return tenants_json(rt.config, figures, refusals_of(rt), now, reaches)


def refusals_of(rt: Runtime) -> dict[str, int] | None:
    """Today's refusals per tenant, or None when they cannot be read: the figures from the store
    are still worth showing while Redis is down."""
    try:
        return rt.dispatcher.quotas.refusals()
    except Exception:
        log.warning("could not read today's refusals", exc_info=True)
        return None


# -- short numbers for a terminal ---------------------------------------------------------------


def count_text(n: int) -> str:
    """A count in about 5 characters: exact to 9,999, then 3 digits with k, M or G."""
    if n < 10_000:
        return f"{n:,}"
    for unit, size in (("k", 10**3), ("M", 10**6)):
        text = f"{n / size:.3g}"
        if "e" not in text and float(text) < 1000:  # 999,999 rounds to the next unit
            return text + unit
    text = f"{n / 10**9:.3g}"
    return (text if "e" not in text else f"{n / 10**9:,.0f}") + "G"


def wait_text(seconds: float) -> str:
    """How long something has waited: ``-`` for nothing, then s, m, h."""
    if seconds <= 0:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def budget_text(view: View) -> str:
    """``tokens today/budget`` (``12.3k/2M``; no budget: the tokens alone)."""
    used = count_text(view["tokensToday"])
    per_day = view["tokensPerDay"]
    return used if per_day is None else f"{used}/{count_text(per_day)}"
