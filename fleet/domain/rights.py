"""A person's data: what export and erasure name, count and refuse (pure).

A *resource* (a submission's ``resourceId``: who the work is about, often a user id or an
e-mail address) is per tenant: export and erasure address (tenant, resource). Its data is every
conversation one of its tasks joined (with all that conversation holds), the working memory
kept for it, and the memory-block versions its runs wrote. An erasure leaves a tombstone that
names the resource only by ``digest`` and refuses new tasks naming it until ``refused_until``
(``FLEET_ERASED_HOLD``): unlike a deleted conversation's tombstone, which lets its key start
afresh, an erased resource stays erased while a queued webhook or retry may still name it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, get_args

from fleet.constants import DEFAULT_TENANT
from fleet.domain.inputs import resource_id
from fleet.errors import Conflict, InputError

#: Export's format version (the first line says it).
EXPORT_VERSION = 1

#: What an erasure counts (and removes), in the order its answer lists them.
Kind = Literal[
    "conversations",
    "tasks",
    "runs",
    "steps",
    "messages",
    "notes",
    "observations",
    "recall_vectors",
    "working_memory",
    "memory_versions",
    "deliveries",
    "waits",
    "events",
    "usage",
    "stream_buffers",
]
KINDS: tuple[Kind, ...] = get_args(Kind)

#: What an export line may be (its ``kind``), each self-describing.
LINE_KINDS = (
    "export",
    "conversation",
    "task",
    "run",
    "step",
    "message",
    "note",
    "observation",
    "delivery",
    "wait",
    "followup",
    "working_memory",
    "memory_version",
)

#: Fields never exported: push tokens and a delivery's authentication (they are the
#: receiver's credentials, not the person's data).
NEVER_EXPORTED = frozenset({"token", "authentication", "auth", "headers", "claim"})


def digest(tenant: str, resource: str) -> str:
    """The resource as a tombstone and the audit log name it: a SHA-256 of tenant and id."""
    return hashlib.sha256(f"{tenant}\x00{resource}".encode()).hexdigest()


def memory_key(tenant: str, namespace: str, scope: str, resource: str) -> str:
    """Where a resource's working memory lives (per tenant, namespace and scope; the
    ``default`` tenant's keys name no tenant, as before tenants)."""
    wall = "" if tenant == DEFAULT_TENANT else f"{tenant}/"
    return f"resource:{wall}{namespace}:{scope}:{resource}"


def named(resource: str | None) -> str:
    """A resource id a caller gave, checked (printable, 1-200 characters), or InputError."""
    if resource is None or resource == "":
        raise InputError(
            "name the resource to act on (--resource R, or the path's resource id)",
            field="resource",
        )
    checked = resource_id(resource)
    assert checked is not None
    return checked


def counted(found: Mapping[str, int]) -> dict[str, int]:
    """Counts per kind, every kind named (zero where nothing was found), in ``KINDS`` order."""
    unknown = set(found) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}")
    return {kind: int(found.get(kind, 0)) for kind in KINDS}


def add(into: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    """``into`` plus ``more``, per kind."""
    for kind, n in more.items():
        into[kind] = into.get(kind, 0) + int(n)
    return into


def refused(tenant: str, erased_at: datetime, until: datetime) -> Conflict:
    """A new task names a resource erased at ``erased_at``: refused until ``until``."""
    return Conflict(
        f"the resource named by resourceId was erased in tenant {tenant!r} at "
        f"{erased_at.isoformat()}; tasks naming it are refused until {until.isoformat()} "
        "(FLEET_ERASED_HOLD): submit without it, or under another id",
        field="resourceId",
    )


def busy(what: str, running: int) -> Conflict:
    """Erasure refused: tasks run or wait and the caller said not to cancel them."""
    return Conflict(
        f"{what} has {running} task(s) running or waiting; nothing was erased "
        "(cancel them first: --cancel-running, or cancelRunning=true)",
        field="cancelRunning",
    )


def several_tenants(tenants: list[str]) -> InputError:
    """The CLI names a resource that exists in more than one tenant without ``--tenant``."""
    return InputError(
        f"the resource exists in tenants {', '.join(tenants)}: name one with --tenant",
        field="tenant",
    )


def clean(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as an export line's fields: never a credential (``NEVER_EXPORTED``)."""
    return {k: v for k, v in row.items() if k not in NEVER_EXPORTED}
