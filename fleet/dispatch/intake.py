"""Admission of submissions, in the steps both intakes share.

``Dispatcher.submit`` runs them in a row on its thread: ``submission`` (the checks: input, key,
authorize policy), ``admit`` (the store's admission, which also reads the tombstone of a new
conversation's key for its ``freshAfterDelete`` notice) and ``admitted`` (wake-up hint, log
line, metrics).
The API's event-loop intake (``fleet.api.intake``) runs the same steps around the store's one
admission statement, so both give the same answers and leave the same rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from fleet import metrics, policy
from fleet.config import ConversationsConfig
from fleet.constants import DEFAULT_TENANT
from fleet.dispatch.host import Configured
from fleet.dispatch.quotas import Quotas
from fleet.dispatch.waker import Waker
from fleet.domain import inputs, keys, rights
from fleet.domain.admission import QUEUE_MODES, QueuePolicy, Submission
from fleet.domain.labels import merge_labels
from fleet.domain.quota import QuotaExceeded
from fleet.domain.values import Admission
from fleet.errors import InputError, NotFound, QueueFull

log = logging.getLogger("fleet.dispatch.manager")  # the name operators know these records by


def queue_policy(conv: ConversationsConfig, delivery: str | None = None) -> QueuePolicy:
    """The deployment's queue policy, with one submission's ``delivery`` mode if it gives one."""
    mode = conv.queue_mode if delivery is None else delivery
    if mode not in QUEUE_MODES:
        raise InputError(
            f"delivery must be one of {', '.join(QUEUE_MODES)}, got {delivery!r}", field="delivery"
        )
    return QueuePolicy(
        mode,
        conv.debounce,
        max_wait_s=conv.effective_max_wait,
        max_merged=conv.max_merged,
        max_queued=conv.max_queued,
        on_full=conv.on_full,
    )


class AdmissionsHost(Configured, Protocol):
    """What ``Admissions`` uses of its dispatcher."""

    policy: policy.Policy
    quotas: Quotas
    waker: Waker


class Admissions:
    """A dispatcher's admission steps (its store, config, policy and waker of the moment)."""

    def __init__(self, dispatcher: AdmissionsHost) -> None:
        self.d = dispatcher

    @property
    def checks_without_store(self) -> bool:
        """Can ``submission`` run without reading the store (no authorize policy to ask)?"""
        return self.d.policy is policy.allow_all

    def submission(
        self,
        deployment: str,
        input: str | Sequence[Any],
        *,
        scope: str = "api",
        key: str | None = None,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        caller: str | None = None,
        delivery: str | None = None,
        resource_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        priority: int | None = None,
        gated: bool = False,
    ) -> Submission:
        """``submit``'s checks (input, key, authorize policy, the tenant's quotas), as the
        submission to admit."""
        d = self.d
        try:
            dep = d.config.deployment(deployment)
        except NotFound as exc:
            raise InputError(exc.message, field="deployment") from None
        agent = d.config.agents[dep.agent]
        parts, size = inputs.parse(input, agent.max_input_bytes)
        ref = keys.resolve(dep.kind, scope, key)
        if d.policy is not policy.allow_all:
            found = d.store.find_conversation(dep.name, ref.scope, ref.key, tenant=tenant)
            policy.check(
                d.policy,
                policy.Access(
                    "dispatch",
                    caller,
                    ref.scope,
                    dep.name,
                    f"{ref.scope}:{ref.key}",
                    found,
                    dep.namespace,
                    tenant,
                ),
            )
        resource = inputs.resource_id(resource_id)
        if resource is not None:
            erased = d.store.erased(tenant, rights.digest(tenant, resource), d.clock())
            if erased is not None:
                raise rights.refused(tenant, *erased)
        sub = Submission(
            deployment=dep.name,
            scope=ref.scope,
            key=ref.key,
            input=parts,
            input_bytes=size,
            labels=merge_labels(dep.labels, labels or {}),
            idempotency_key=inputs.idempotency_key(idempotency_key),
            policy=queue_policy(dep.conversations, delivery),
            max_attempts=dep.max_attempts or d.settings.max_attempts,
            max_input_bytes=agent.max_input_bytes,
            caller_scope=scope,
            caller=caller,
            resource_id=resource,
            tenant=tenant,
            priority=inputs.priority(priority, dep.priority),
        )
        return d.quotas.admit(sub, scope, gated=gated)

    def admit(self, sub: Submission) -> Admission:
        """Admit a checked submission (``submission``), then what follows (``admitted``)."""
        try:
            admission = self.d.store.admit(sub, self.d.clock())
        except QueueFull:
            metrics.rejected(sub.deployment)
            raise
        except QuotaExceeded as exc:  # max_queued_tasks, counted in the admission
            self.d.quotas.refused(sub.tenant, exc.quota)
            raise
        return self.admitted(admission)

    def admitted(self, admission: Admission) -> Admission:
        """What follows a committed admission: its wake-up hint, log line and metrics."""
        if admission.dropped is not None:
            self.d.hints.changed(admission.dropped)  # cancelled: its streams end
            log.info(
                "conversation %s: queue full, dropped task %s",
                admission.task.conversation_id,
                admission.dropped,
            )
        if not admission.duplicate and admission.delivered_to == "queued":
            # De-duplicated also for an idle conversation: the mark this wake-up leaves keeps a
            # burst of submissions (before the first is picked up) from sending one drain each.
            task = admission.task
            self.d.waker.wake(
                task.conversation_id, task.not_before, tenant=task.tenant, priority=task.priority
            )
        metrics.admitted(admission)
        return admission
