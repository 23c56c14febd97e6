"""Tenants of conversations stored before tenants existed (pure): where ``fleet migrate`` moves
them.

Before tenants, every API caller shared the scope ``api``; now each tenant has its own
(``api:<tenant>``). A stored ``api`` conversation moves into a tenant when every task in it came
from that tenant's callers; one that mixes tenants (or holds tasks of callers no longer
configured) stays in the shared ``api`` scope of the ``default`` tenant, where operators and
``scope = "api"`` callers still reach it. Webhook and A2A conversations move to their trigger's
or caller's tenant; delegated ones follow the task that delegated them; singletons stay shared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fleet.constants import DEFAULT_TENANT
from fleet.domain.keys import SINGLETON_SCOPE, api_scope

#: A tenant's name is spelled like a file name (it may name ``config/tenants/<name>.toml``).
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def tenant_name(value: str) -> str:
    """The name, if it is one a tenant may have; ValueError saying what it must be."""
    if not _NAME.match(value):
        raise ValueError("must be 1-63 lowercase letters, digits, '-' or '_'")
    return value


@dataclass(frozen=True, slots=True)
class Legacy:
    """A conversation of the ``default`` tenant, as the move sees it."""

    scope: str
    #: The callers its tasks came from (None: the CLI or an open API).
    callers: frozenset[str | None] = frozenset()
    #: The tenant of the task that delegated it (an ``agent:`` conversation), if known.
    parent_tenant: str | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """Where a conversation goes: its tenant and its scope there."""

    tenant: str
    scope: str


def api_owner(caller_tenants: Iterable[str | None]) -> str | None:
    """The tenant an ``api`` conversation belongs to: the one tenant all its callers share;
    None when they mix tenants, include one not configured (None) or the shared scope's."""
    found = set(caller_tenants)
    if len(found) != 1:
        return None
    (only,) = found
    return None if only is None or only == DEFAULT_TENANT else only


def move(
    legacy: Legacy, tenant_of_caller: Callable[[str], str | None], *, scoped: str | None
) -> Move | None:
    """Where ``legacy`` moves, or None (it stays in the ``default`` tenant).

    ``tenant_of_caller``: a configured caller's tenant (None: not configured); ``scoped``: the
    tenant the scope alone tells (a trigger's, an A2A caller's), if any.
    """
    scope = legacy.scope
    if scope == "api":
        owner = api_owner(
            None if c is None else tenant_of_caller(c) for c in legacy.callers or {None}
        )
        return None if owner is None else Move(owner, api_scope(owner))
    if scope == SINGLETON_SCOPE:
        return None
    if scope.startswith("agent:"):
        parent = legacy.parent_tenant
        return None if parent in (None, DEFAULT_TENANT) else Move(parent, scope)
    if scoped is None or scoped == DEFAULT_TENANT:
        return None
    return Move(scoped, scope)
