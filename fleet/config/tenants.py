"""``config/tenants``: a customer's share of the fleet, its quotas and its token budget.

Every caller, trigger and A2A caller belongs to a tenant: the one its file names
(``tenant = "acme"``), else one named after the file itself. With no callers configured there is
one tenant, ``default`` (the open API's), which triggers without ``tenant =`` join. A tenant's
file is optional: without one a tenant has weight 1 and no quotas.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, StrictInt

from fleet.config.base import Retention, TenantRef, _Strict
from fleet.constants import DEFAULT_TENANT, MAX_TENANT_WEIGHT
from fleet.domain.tenancy import tenant_name
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.config.intake import CallerConfig, TriggerConfig

#: What a tenant with no file of its own gets.
DEFAULT_WEIGHT = 1


class TenantConfig(_Strict):
    """``config/tenants/<name>.toml``: how much of the fleet a tenant gets and may use."""

    name: str
    #: Its share of free worker capacity while tenants compete for it (round-robin, weighted:
    #: weight 3 gets three turns to another's one).
    weight: StrictInt = Field(default=DEFAULT_WEIGHT, ge=1, le=MAX_TENANT_WEIGHT)
    #: Conversations of this tenant running at once across the whole fleet (unset: no cap).
    max_running: StrictInt | None = Field(default=None, ge=1, le=100_000)
    #: Tasks neither finished nor running (queued, waiting) it may hold; over it SubmitTask and
    #: A2A answer 429 and store nothing (unset: no cap).
    max_queued_tasks: StrictInt | None = Field(default=None, ge=1, le=10_000_000)
    #: Submissions it may make a minute, fleet-wide (unset: no cap).
    submit_per_minute: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    #: Model tokens (prompt + completion, as the models report them) its runs may use a UTC
    #: day; a run that finds it spent ends at its next model call (unset: no budget).
    tokens_per_day: StrictInt | None = Field(default=None, ge=1, le=10**12)
    #: Model tokens one task's runs may use in all (unset: no budget).
    tokens_per_task: StrictInt | None = Field(default=None, ge=1, le=10**12)
    #: Finished conversations idle this long are removed whole, with everything derived from
    #: them (``fleet beat``, in batches; unset: kept, but for the agents' message retention).
    retention: Retention | None = None
    #: Shorter retention of one kind of a finished task's data: ``steps`` (the step journal:
    #: model calls, tool arguments and results), ``context`` (a run's frozen prompt).
    retention_of: dict[Literal["steps", "context"], Retention] = Field(default_factory=dict)

    @property
    def quotas(self) -> dict[str, int]:
        """The quotas and budgets it sets (name → value), for answers that name them."""
        named = {
            "max_running": self.max_running,
            "max_queued_tasks": self.max_queued_tasks,
            "submit_per_minute": self.submit_per_minute,
            "tokens_per_day": self.tokens_per_day,
            "tokens_per_task": self.tokens_per_task,
        }
        return {k: v for k, v in named.items() if v is not None}


def default_tenant(config_tenants: dict[str, TenantConfig], name: str) -> TenantConfig:
    """The tenant's file, or what a tenant without one gets."""
    found = config_tenants.get(name)
    return found if found is not None else TenantConfig(name=name)


def check_tenants(
    root: Path, callers: Mapping[str, CallerConfig], triggers: Mapping[str, TriggerConfig]
) -> list[ConfigError]:
    """Cross-check who belongs to which tenant (``load_config``'s last step): every error.

    - ``default`` is the open API's tenant and the shared ``api`` scope's: a caller joins it
      only by saying ``scope = "api"``;
    - a webhook caller's tenant is its trigger's;
    - a caller and a trigger that would share a tenant only because their files share a name
      (neither says ``tenant =``) are an error: one of them must say so.
    """
    errors: list[ConfigError] = []
    implicit_triggers = {
        name for name, trigger in triggers.items() if trigger.tenant is None and callers
    }
    for name, caller in callers.items():
        where = str(root / "callers" / f"{name}.toml")
        if caller.source.startswith("webhook:"):
            trigger = caller.source.removeprefix("webhook:")
            found = triggers.get(trigger)
            theirs = None if found is None else (found.tenant or trigger)
            if caller.tenant is not None and theirs is not None and caller.tenant != theirs:
                errors.append(
                    ConfigError(
                        where,
                        "tenant",
                        f"a webhook caller belongs to its trigger's tenant ({theirs!r}); remove "
                        "tenant, or set it on the trigger",
                    )
                )
            continue
        if caller.own_tenant == DEFAULT_TENANT and not caller.shared:
            errors.append(
                ConfigError(
                    where,
                    "tenant" if caller.tenant is not None else "(file name)",
                    "tenant 'default' is the open API's and the shared 'api' scope's: give the "
                    'caller a tenant of its own (tenant = "..."), or say scope = "api" to share',
                )
            )
        if caller.tenant is None and not caller.shared and name in implicit_triggers:
            errors.append(
                ConfigError(
                    where,
                    "tenant",
                    f"caller {name!r} and trigger {name!r} would share tenant {name!r} only "
                    f"because their files share a name: say tenant = {name!r} in one of them if "
                    "they belong to one customer, or rename one",
                )
            )
    return errors


__all__ = [
    "DEFAULT_TENANT",
    "DEFAULT_WEIGHT",
    "TenantConfig",
    "TenantRef",
    "check_tenants",
    "default_tenant",
    "tenant_name",
]
