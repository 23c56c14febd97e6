"""Conversation lifecycle for operators: show, reset, delete, prune; and the sweeper's share
(retention and the stored cap, in short batches on a clock of their own).

The decisions are ``fleet.domain.lifecycle``'s; the writes are the store's. HTTP routes and the
CLI call this and map its errors.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from fleet import metrics
from fleet.constants import DEFAULT_TENANT
from fleet.dispatch.host import Cancelling, Configured
from fleet.dispatch.waits import Waiting
from fleet.domain import lifecycle as rules
from fleet.domain.keys import ConversationRef, split_scoped
from fleet.domain.values import Task, TaskStatus
from fleet.errors import Conflict, InputError, NotFound
from fleet.store import ConversationInfo, Tombstone
from fleet.store.lifecycle import Reset

log = logging.getLogger(__name__)

#: How long ``--cancel-running`` waits for the run to stop (it stops at its next step boundary).
STOP_WAIT_S = 30.0
#: A sweep deletes at most this many batches (then goes on next time): it never runs long.
SWEEP_BATCHES = 20
#: Attempts at reset/delete when a newly admitted task got leased between the stop and the act.
ATTEMPTS = 3


@dataclass
class PruneReport:
    """What a prune deleted (or, dry, would delete): messages per deployment and reason."""

    dry_run: bool = False
    retention: dict[str, int] = field(default_factory=dict)
    stored_cap: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.retention.values()) + sum(self.stored_cap.values())


class LifecycleHost(Configured, Cancelling, Protocol):
    """What ``Lifecycle`` uses of its dispatcher."""

    waiting: Waiting

    def wait(self, task_id: uuid.UUID, timeout_s: float, *, poll_s: float = 0.05) -> Task: ...


class Lifecycle:
    def __init__(self, dispatcher: LifecycleHost) -> None:
        self.d = dispatcher
        self.store = dispatcher.store
        #: Messages up to this id were looked at for the stored cap (a sweeper's watermark).
        self._cap_seen = 0
        self._next_enforce = 0.0

    # -- naming ---------------------------------------------------------------------------------

    def ref(
        self, deployment: str, key: str, tenant: str = DEFAULT_TENANT
    ) -> tuple[str, ConversationRef]:
        """The deployment (which must exist) and the conversation an operator names."""
        deps = self.d.config.deployments
        if deployment not in deps:
            known = ", ".join(sorted(deps)) or "none"
            raise InputError(
                f"no deployment named {deployment!r}; configured: {known}", field="deployment"
            )
        return deployment, rules.operator_ref(deps[deployment].kind, key, tenant)

    def tenant_of(self, key: str, tenant: str | None = None, *, own: str = DEFAULT_TENANT) -> str:
        """The tenant of the conversation an operator names: the one given, else the one its
        key's scope tells (``api:acme:…``, a trigger's, a caller's), else the operator's ``own``
        (its caller's tenant; ``default`` for an open API and the operator's own CLI). Every
        operator path (HTTP, UI, CLI) names conversations through this one reading."""
        if tenant is not None:
            return tenant
        config = self.d.config
        named = rules.operator_tenant(key, config.tenant_names, own)
        if named is not None:
            return named
        scope, _ = split_scoped(key)
        return (config.tenant_of_scope(scope) if scope else None) or own

    def show(
        self,
        deployment: str,
        key: str,
        *,
        tenant: str | None = None,
        reach: frozenset[str] | None = None,
        own: str = DEFAULT_TENANT,
    ) -> ConversationInfo:
        """The conversation with its counts; NotFound (and nothing created) for an unknown key,
        and alike for one of a tenant outside ``reach`` (None: every tenant). ``tenant``: whose
        it is (default: what the key tells, else ``own``: ``tenant_of``)."""
        tenant = self.tenant_of(key, tenant, own=own)
        name, ref = self.ref(deployment, key, tenant)
        found = None
        if reach is None or tenant in reach:
            found = self.store.lookup(name, ref.scope, ref.key, tenant=tenant)
        if found is None:
            raise NotFound(
                f"no conversation '{ref.scope}:{ref.key}' in deployment {name!r}",
                field="conversationKey",
            )
        return found

    # -- reset and delete -----------------------------------------------------------------------

    def reset(
        self,
        deployment: str,
        key: str,
        *,
        keep_notes: bool = False,
        cancel_running: bool = False,
        wait_s: float = STOP_WAIT_S,
        tenant: str | None = None,
        reach: frozenset[str] | None = None,
        own: str = DEFAULT_TENANT,
    ) -> tuple[ConversationInfo, Reset]:
        """Start a new generation: earlier history (and notes, unless kept) is no longer
        recalled; queued tasks of the old generation are cancelled with a reason."""
        for attempt in range(ATTEMPTS):
            info = self._stopped(
                deployment,
                key,
                "reset",
                cancel_running,
                wait_s,
                tenant=tenant,
                reach=reach,
                own=own,
            )
            try:
                done = self.store.reset_conversation(info.id, self.d.clock(), keep_notes=keep_notes)
            except Conflict:
                if not cancel_running or attempt == ATTEMPTS - 1:
                    raise
                continue
            for task_id in done.cancelled:
                self.d.hints.changed(task_id)
            self.d.waiting.cancelled(*done.cancelled)  # and what they waited for
            metrics.lifecycle(info.deployment, "reset")
            log.info(
                "conversation %s of %s reset to generation %d (%d queued cancelled)",
                info.conversation,
                info.deployment,
                done.generation,
                len(done.cancelled),
            )
            return info, done
        raise AssertionError("unreachable")

    def delete(
        self,
        deployment: str,
        key: str,
        *,
        by: str,
        cancel_running: bool = False,
        wait_s: float = STOP_WAIT_S,
        tenant: str | None = None,
        reach: frozenset[str] | None = None,
        own: str = DEFAULT_TENANT,
    ) -> Tombstone:
        """Delete the conversation and all it holds; its key is remembered (a tombstone) so that
        a later submission with it starts fresh and is told so."""
        for attempt in range(ATTEMPTS):
            info = self._stopped(
                deployment,
                key,
                "delete",
                cancel_running,
                wait_s,
                tenant=tenant,
                reach=reach,
                own=own,
            )
            awaited = self.d.waiting.awaited_in(info.id)
            try:
                stone = self.store.delete_conversation(
                    info.id, self.d.clock(), by=by, drop_pending=cancel_running
                )
            except Conflict:
                if not cancel_running or attempt == ATTEMPTS - 1:
                    raise
                continue
            self.d.waiting.abandon(awaited)  # its waiting tasks' delegates: no one waits now
            metrics.lifecycle(info.deployment, "delete")
            log.info("conversation %s of %s deleted by %s", info.conversation, info.deployment, by)
            return stone
        raise AssertionError("unreachable")

    def _stopped(
        self,
        deployment: str,
        key: str,
        action: rules.Action,
        cancel_running: bool,
        wait_s: float,
        *,
        tenant: str | None,
        reach: frozenset[str] | None,
        own: str,
    ) -> ConversationInfo:
        """The conversation once no run of it is active (refused, or stopped first)."""
        info = self.show(deployment, key, tenant=tenant, reach=reach, own=own)
        busy = rules.Busy(
            str(info.active) if info.active else None,
            info.queued,
            resuming=info.active_status == TaskStatus.INTERRUPTED,
        )
        if rules.guard(action, info.conversation, busy, cancel_running=cancel_running) == "go":
            return info
        assert info.active is not None
        reason = rules.RESET_REASON if action == "reset" else rules.DELETE_REASON
        # Queued tasks first (none may start once the run ends), then the run: the cancel path.
        self.store.stop_conversation(info.id, self.d.clock(), reason)
        self.d.cancel(info.active)
        if not self._wait_stopped(info.active, wait_s):
            raise rules.stop_timed_out(action, info.conversation, str(info.active), wait_s)
        return self.show(deployment, key, tenant=info.tenant)

    def _wait_stopped(self, task_id: uuid.UUID, wait_s: float) -> bool:
        return self.d.wait(task_id, wait_s, poll_s=0.1).status.terminal

    # -- retention and the stored cap -----------------------------------------------------------

    def _limits(self, deployment: str | None) -> dict[str, tuple[float, int]]:
        """Each deployment's (retention seconds, stored cap)."""
        out: dict[str, tuple[float, int]] = {}
        for name, dep in self.d.config.deployments.items():
            if deployment is not None and name != deployment:
                continue
            agent = self.d.config.agents.get(dep.agent)
            if agent is not None:
                out[name] = (agent.retention, agent.stored_messages)
        if deployment is not None and not out:
            self.ref(deployment, "x")  # names the configured ones
        return out

    def prune(
        self,
        *,
        deployment: str | None = None,
        older_than_s: float | None = None,
        dry_run: bool = False,
        max_batches: int | None = None,
        cap_after_id: int = 0,
        tenants: frozenset[str] | None = None,
    ) -> PruneReport:
        """Delete messages past retention (or ``older_than_s``) and past each conversation's
        stored cap (oldest first), in short batches; ``dry_run`` only counts. ``tenants``:
        only their conversations (an operator's reach; None: every tenant's)."""
        now = self.d.clock()
        report = PruneReport(dry_run=dry_run)
        budget = [max_batches if max_batches is not None else 1 << 30]
        for name, (retention_s, cap) in self._limits(deployment).items():
            cutoff = rules.retention_cutoff(now, older_than_s or retention_s)
            if dry_run:
                report.retention[name] = self.store.count_older([name], cutoff, tenants=tenants)
            else:
                report.retention[name] = self._drain(
                    lambda n=name, cut=cutoff: self.store.delete_older([n], cut, tenants=tenants),
                    budget,
                )
                metrics.pruned(name, "retention", report.retention[name])
            gone = 0
            for conv in self.store.overfull([name], cap, after_id=cap_after_id, tenants=tenants):
                excess = rules.over_cap(conv.stored, cap)
                if dry_run:
                    gone += excess
                    continue
                for size in rules.batches(excess):
                    if budget[0] <= 0:
                        break
                    budget[0] -= 1
                    gone += self.store.delete_oldest(conv.id, conv.generation, size)
            report.stored_cap[name] = gone
            if not dry_run:
                metrics.pruned(name, "stored_cap", gone)
        return report

    @staticmethod
    def _drain(step: object, budget: list[int]) -> int:
        """Run a batch delete until it deletes less than a batch or the budget is spent."""
        total = 0
        while budget[0] > 0:
            budget[0] -= 1
            deleted: int = step()  # type: ignore[operator]
            total += deleted
            if deleted < rules.PRUNE_BATCH:
                break
        return total

    def enforce(self, now_monotonic: float | None = None) -> int:
        """The sweeper's share: at most every ``prune_interval``, at most ``SWEEP_BATCHES``
        batches; returns how many messages it deleted."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        if now < self._next_enforce:
            return 0
        self._next_enforce = now + self.d.settings.prune_interval
        newest = self.store.newest_message_id()
        report = self.prune(max_batches=SWEEP_BATCHES, cap_after_id=self._cap_seen)
        if report.total < SWEEP_BATCHES * rules.PRUNE_BATCH:
            self._cap_seen = newest  # everything up to it was looked at
        else:
            self._next_enforce = now  # more to do: again at the next sweep
        if report.total:
            log.info("pruned %d messages (retention and stored cap)", report.total)
        return report.total


def info_json(info: ConversationInfo) -> dict[str, object]:
    """GetConversation's shape (also ``fleet conversations show --json``)."""
    return {
        "id": str(info.id),
        "deployment": info.deployment,
        "tenant": info.tenant,
        "conversation": info.conversation,
        "generation": info.generation,
        "messages": info.messages,
        "storedMessages": info.stored,
        "notes": info.notes,
        "tasks": info.tasks,
        "queued": info.queued,
        "activeTask": str(info.active) if info.active else None,
        "createdAt": _iso(info.created_at),
        "updatedAt": _iso(info.updated_at),
    }


def reset_json(info: ConversationInfo, done: Reset, *, keep_notes: bool) -> dict[str, object]:
    return {
        "conversation": info.conversation,
        "deployment": info.deployment,
        "generation": done.generation,
        "previousGeneration": info.generation,
        "cancelled": [str(i) for i in done.cancelled],
        "notesKept": keep_notes,
        "notesRemoved": done.notes_removed,
    }


def delete_json(stone: Tombstone) -> dict[str, object]:
    return {
        "conversation": f"{stone.scope}:{stone.key}",
        "deployment": stone.deployment,
        "tenant": stone.tenant,
        "deleted": True,
        "deletedAt": _iso(stone.deleted_at),
        "deletedBy": stone.deleted_by,
        "tasks": stone.tasks,
        "messages": stone.messages,
    }


def prune_json(report: PruneReport) -> dict[str, object]:
    return {
        "dryRun": report.dry_run,
        "retention": report.retention,
        "storedCap": report.stored_cap,
        "total": report.total,
    }


def _iso(ts: datetime) -> str:
    from fleet.views import iso

    return iso(ts) or ""
