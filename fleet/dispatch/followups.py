"""Follow-ups bound to the store: the run's ``Followups`` port (``schedule_followup``) and the
sweeper's admission of the due ones into their conversations.

A due follow-up is admitted like any submission of its conversation (queue mode, caps, the
tenant's quotas and budget apply; its run is charged to the tenant), under an idempotency key
of its own, so sweepers finding it twice make one task. A deployment that is gone drops it; a
refusal that may pass (a full queue, the tenant's quota) leaves it pending for the next sweep.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

from fleet.dispatch.host import Clocked, Submitting
from fleet.domain import followups as rules
from fleet.domain.values import Task
from fleet.errors import FleetError, InputError, NotFound
from fleet.store import Store

log = logging.getLogger(__name__)


class StoreFollowups:
    """The ``Followups`` port of one run."""

    def __init__(self, store: Store, task: Task, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._task = task
        self._clock = clock

    def schedule(self, after_s: float, input: str, *, call_id: str) -> rules.Followup:
        now = self._clock()
        return self._store.schedule_followup(
            self._task, call_id, input, now + timedelta(seconds=after_s), now
        )


class FollowupsHost(Clocked, Submitting, Protocol):
    """What ``Followups`` uses of its dispatcher: it admits what is due as any caller would."""


class Followups:
    """Admits due follow-ups for a dispatcher (its sweeper's part)."""

    def __init__(self, dispatcher: FollowupsHost) -> None:
        self.d = dispatcher

    def admit_due(self) -> int:
        """Admit every due follow-up into its conversation; returns how many became tasks."""
        admitted = 0
        for due in self.d.store.due_followups(self.d.clock()):
            try:
                adm = self.d.submit(
                    due.deployment,
                    due.input,
                    scope=due.scope,
                    key=due.key,
                    labels={**due.labels, rules.LABEL: due.id},
                    idempotency_key=rules.admission_key(due.id),
                    caller=due.caller,
                    tenant=due.tenant,
                )
            except (InputError, NotFound) as exc:  # its deployment or agent is gone: dropped
                log.warning("follow-up %s dropped: %s", due.id, exc.message)
                self.d.store.followup_admitted(uuid.UUID(due.id), None)
                continue
            except FleetError as exc:  # a full queue, a quota: the next sweep tries again
                log.info("follow-up %s not admitted yet: %s", due.id, exc.message)
                continue
            self.d.store.followup_admitted(uuid.UUID(due.id), adm.task.id)
            admitted += 1
        return admitted


__all__ = ["Followups", "StoreFollowups"]
