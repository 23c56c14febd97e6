"""A person's data: export it, erase it everywhere (``fleet export``, ``fleet erase``, the
resources routes).

An erasure goes in this order, so that it finishes once run again after a crash and nothing
comes back behind it: the resource's tombstone first (from then on a new task naming it is
refused), then its tasks that run or wait are cancelled and awaited (or, told not to cancel,
nothing is erased at all), then each of its conversations is erased in one transaction with
what derives from it, with the buffered stream text of its tasks; then its working memory; a
last look catches a conversation admitted while it ran. The rules are
``fleet.domain.rights``'; the writes are ``fleet.store.rights``'.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from fleet import metrics
from fleet.dispatch.host import Cancelling, Configured
from fleet.dispatch.lifecycle import STOP_WAIT_S, Lifecycle
from fleet.domain import rights as rules
from fleet.domain.values import Task
from fleet.errors import Conflict, InputError
from fleet.store.audit import PRUNE_BATCH
from fleet.streaming.sink import Streaming
from fleet.views import iso

log = logging.getLogger(__name__)

#: Looks for conversations admitted while an erasure ran (each finds fewer; one is the rule).
PASSES = 3
#: Idle conversations one sweep removes at most per tenant (10,000 take 20 sweeps: 20 minutes
#: at the default ``FLEET_PRUNE_INTERVAL``).
RETENTION_BATCH = 500
#: Journal steps (or frozen prompts) one sweep removes at most per tenant.
STEPS_BATCH = 5000
#: Batches of old audit entries one sweep removes at most.
AUDIT_BATCHES = 10


class RightsHost(Configured, Cancelling, Protocol):
    """What ``Rights`` uses of its dispatcher."""

    lifecycle: Lifecycle
    streaming: Streaming

    def wait(self, task_id: uuid.UUID, timeout_s: float, *, poll_s: float = 0.05) -> Task: ...


@dataclass
class Erasure:
    """What an erasure removed: counts per kind (``rules.KINDS``), the tasks it cancelled
    first, and until when new tasks naming the resource are refused (a resource's)."""

    what: Literal["resource", "conversation"]
    tenant: str
    counts: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    refused_until: datetime | None = None


def erasure_json(erasure: Erasure) -> dict[str, Any]:
    return {
        "erased": erasure.what,
        "tenant": erasure.tenant,
        "counts": rules.counted(erasure.counts),
        "cancelled": erasure.cancelled,
        "refusedUntil": iso(erasure.refused_until) if erasure.refused_until else None,
    }


class Rights:
    def __init__(self, dispatcher: RightsHost) -> None:
        self.d = dispatcher
        self.store = dispatcher.store
        self._next_prune = 0.0

    def sweep(self, now_monotonic: float | None = None) -> dict[str, int]:
        """The sweeper's share, at most every ``prune_interval``: each tenant's retention
        (``retention``: whole idle conversations, ``RETENTION_BATCH`` a tenant at a time;
        ``retention_of``: journal steps and frozen prompts), and audit entries older than
        ``FLEET_AUDIT_RETENTION``. What it removed, by kind."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        if now < self._next_prune:
            return {}
        self._next_prune = now + self.d.settings.prune_interval
        removed: dict[str, int] = {}
        for tenant in self.d.config.tenants.values():
            rules.add(removed, self._expire(tenant.name, tenant.retention, tenant.retention_of))
        before = self.d.clock() - timedelta(seconds=self.d.settings.audit_retention)
        gone = 0
        for _ in range(AUDIT_BATCHES):
            n = self.store.prune_audit(before)
            gone += n
            if n < PRUNE_BATCH:
                break
        metrics.retention_removed("other", "audit", gone)
        removed = {kind: n for kind, n in rules.add(removed, {"audit": gone}).items() if n}
        if removed:
            log.info("retention removed %s", removed)
        return removed

    def _expire(
        self, tenant: str, retention: float | None, kinds: Mapping[Any, float]
    ) -> dict[str, int]:
        now = self.d.clock()
        removed: dict[str, int] = {}
        if retention is not None:
            cutoff = now - timedelta(seconds=retention)
            for conversation_id in self.store.expired_conversations(
                tenant, cutoff, RETENTION_BATCH
            ):
                erasure = Erasure("conversation", tenant)
                self._erase_one(conversation_id, erasure, idle_before=cutoff)
                rules.add(removed, {"conversations": erasure.counts.get("conversations", 0)})
        for kind, expire in (
            ("steps", self.store.expire_steps),
            ("context", self.store.expire_context),
        ):
            if kind in kinds:
                cutoff = now - timedelta(seconds=kinds[kind])
                rules.add(removed, {kind: expire(tenant, cutoff, STEPS_BATCH)})
        for kind, n in removed.items():
            metrics.retention_removed(tenant, kind, n)
        return removed

    # -- naming -------------------------------------------------------------------------------

    def tenant_of(self, resource: str, tenant: str | None, *, own: str) -> str:
        """Whose resource: ``tenant`` if given; else the one tenant it exists in (InputError
        naming them when there are several), else ``own``."""
        rules.named(resource)  # printable, 1-200 characters
        found = self.store.resource_tenants(resource)
        if tenant is not None:
            known = self.d.config.tenant_names
            if tenant not in known and tenant not in found:
                raise InputError(
                    f"no tenant named {tenant!r}; configured: {', '.join(known)}", field="tenant"
                )
            return tenant
        if len(found) > 1:
            raise rules.several_tenants(found)
        return found[0] if found else own

    def _namespaces(self) -> dict[str, str]:
        return {name: dep.namespace for name, dep in self.d.config.deployments.items()}

    # -- export -------------------------------------------------------------------------------

    def export_resource(self, tenant: str, resource: str) -> Iterator[dict[str, Any]]:
        """Every line of the resource's data (``rules.LINE_KINDS``), its header first."""
        yield self._header("resource", tenant, resource=resource)
        for conversation_id in self.store.resource_conversations(tenant, resource):
            yield from self.store.export_conversation(conversation_id)
        keys = self.store.resource_working_keys(tenant, resource, self._namespaces())
        yield from self.store.export_working(keys)

    def export_conversation(
        self, conversation_id: uuid.UUID, tenant: str
    ) -> Iterator[dict[str, Any]]:
        yield self._header("conversation", tenant, conversation=str(conversation_id))
        yield from self.store.export_conversation(conversation_id)

    def _header(self, what: str, tenant: str, **named: str) -> dict[str, Any]:
        return {
            "kind": "export",
            "version": rules.EXPORT_VERSION,
            "of": what,
            "tenant": tenant,
            **named,
            "exportedAt": iso(self.d.clock()),
        }

    # -- erasure ------------------------------------------------------------------------------

    def erase_resource(
        self,
        tenant: str,
        resource: str,
        *,
        by: str,
        cancel_running: bool = True,
        wait_s: float = STOP_WAIT_S,
    ) -> Erasure:
        """Erase everything of ``resource`` in ``tenant`` (see the module's docstring)."""
        conversations = self.store.resource_conversations(tenant, resource)
        busy = self.store.busy_tasks(conversations)
        if busy and not cancel_running:
            raise rules.busy("the resource", len(busy))
        now = self.d.clock()
        until = now + timedelta(seconds=self.d.settings.erased_hold)
        digest = rules.digest(tenant, resource)
        self.store.tombstone_resource(tenant, digest, now=now, until=until, by=by)
        keys = set(self.store.resource_working_keys(tenant, resource, self._namespaces()))
        erasure = Erasure("resource", tenant, refused_until=until)
        for _ in range(PASSES):
            if not conversations:
                break
            keys |= set(self.store.resource_working_keys(tenant, resource, self._namespaces()))
            erasure.cancelled += self._stop(conversations, wait_s)
            for conversation_id in conversations:
                self._erase_one(conversation_id, erasure)
            conversations = self.store.resource_conversations(tenant, resource)
        rules.add(erasure.counts, {"working_memory": self.store.erase_working(keys)})
        self.store.scrub()
        self.store.tombstone_resource(
            tenant, digest, now=now, until=until, by=by, counts=rules.counted(erasure.counts)
        )
        metrics.erased(tenant, "resource")
        log.info(
            "resource %s… of tenant %s erased by %s: %s",
            digest[:12],
            tenant,
            by,
            {k: v for k, v in erasure.counts.items() if v},
        )
        return erasure

    def erase_conversation(
        self,
        conversation_id: uuid.UUID,
        tenant: str,
        *,
        by: str,
        cancel_running: bool = True,
        wait_s: float = STOP_WAIT_S,
    ) -> Erasure:
        """Erase one conversation with what derives from it; its key's tombstone lets a later
        submission start afresh (as a deleted conversation's does)."""
        busy = self.store.busy_tasks([conversation_id])
        if busy and not cancel_running:
            raise rules.busy("the conversation", len(busy))
        erasure = Erasure("conversation", tenant)
        erasure.cancelled = self._stop([conversation_id], wait_s)
        self._erase_one(conversation_id, erasure, by=by)
        self.store.scrub()
        metrics.erased(tenant, "conversation")
        log.info("conversation %s erased by %s", conversation_id, by)
        return erasure

    def _erase_one(
        self,
        conversation_id: uuid.UUID,
        erasure: Erasure,
        *,
        by: str | None = None,
        idle_before: datetime | None = None,
    ) -> None:
        counts, task_ids = self.store.erase_conversation(
            conversation_id, self.d.clock(), by=by, idle_before=idle_before
        )
        counts["stream_buffers"] = self.d.streaming.forget(task_ids)
        rules.add(erasure.counts, counts)
        for task_id in task_ids:
            self.d.hints.changed(task_id)  # its event streams end

    def _stop(self, conversations: list[uuid.UUID], wait_s: float) -> int:
        """Cancel the tasks of these conversations that run, wait or are queued, and wait until
        each has ended; how many there were."""
        busy = self.store.busy_tasks(conversations)
        for task_id in busy:
            self.d.cancel(task_id)
        for task_id in busy:
            if not self.d.wait(task_id, wait_s, poll_s=0.1).status.terminal:
                raise Conflict(
                    f"task {task_id} did not stop within {wait_s:g}s; nothing more was erased "
                    "(run the erasure again: it goes on where it stopped)",
                    field="cancelRunning",
                )
        return len(busy)
