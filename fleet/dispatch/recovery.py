"""The sweeper's look (``Dispatcher.sweep``): what a lost worker, a lost wake-up or a passed
deadline left behind, found and put right, each room doing its own part.

Runs every sweep interval in ``fleet beat`` (``fleet.dispatch.sweeper``) and in an embedded
process's loop. Everything here is safe to run in several processes at once: each step is a
fenced or conditional write, so a second sweeper finds nothing left to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from fleet import metrics
from fleet.delivery import Deliverer
from fleet.dispatch.bulk import Bulk
from fleet.dispatch.delegation import Delegations
from fleet.dispatch.followups import Followups
from fleet.dispatch.host import Configured, Waking
from fleet.dispatch.lease import Lease
from fleet.dispatch.lifecycle import Lifecycle
from fleet.dispatch.rights import Rights
from fleet.dispatch.waits import Waiting
from fleet.dispatch.waker import Waker

#: Why a recovered task's run ended.
LOST = "worker lost mid-run (lease expired)"


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepReport:
    recovered: int
    woken: int
    #: Messages retention and the stored cap deleted (``fleet.dispatch.lifecycle``).
    pruned: int = 0


class SweepingHost(Configured, Waking, Protocol):
    """What the sweeper's look uses of the dispatcher."""

    delegations: Delegations
    deliveries: Deliverer
    followups: Followups
    lease: Lease
    lifecycle: Lifecycle
    waiting: Waiting
    bulk: Bulk
    rights: Rights
    waker: Waker


def sweep(d: SweepingHost, alive: Callable[[str | None], bool] | None = None) -> SweepReport:
    """One look: recover tasks whose lease expired (``alive(worker)`` may vouch for a holder
    the lease cannot see), requeue the inboxes of runs whose worker died after its settle,
    wake conversations whose wake-up was lost or whose waiting head is due, then delegation
    reports, waits, follow-ups, deliveries and, last, retention."""
    now = d.clock()
    recovered = 0
    active = d.store.active()
    live = d.lease.held([conv for _, conv, _, _ in active])
    for task_id, conv, fence, worker in active:
        if conv in live or (alive is not None and alive(worker)):
            continue
        status = d.store.recover(task_id, fence, LOST, now)
        if status is not None:
            d.hints.changed(task_id)
            recovered += 1
            metrics.recovered(status)
            log.warning(
                "task %s recovered from lost worker %s: %s",
                task_id,
                worker,
                status.value,
                extra={
                    "event": "task.recovered",
                    "task_id": str(task_id),
                    "worker": worker,
                    "status": status.value,
                },
            )
            d.wake_next(d.store.get_task(task_id))
    for task_id, _conv in d.store.inbox_orphans():
        # a worker died between its settle and the requeue of its run's inbox
        if d.store.requeue_inbox(task_id, now):
            d.hints.changed(task_id)
            d.wake_next(d.store.get_task(task_id))
    grace = timedelta(seconds=d.settings.sweep_interval)
    due = d.store.due_conversations(now - grace, limit=1000)
    for conv, tenant, priority in due:
        d.waker.wake(conv, force=True, tenant=tenant, priority=priority)
    d.delegations.report_due()
    d.waiting.sweep()
    d.bulk.sweep()
    d.followups.admit_due()
    d.deliveries.sweep(d.settings.sweep_interval)
    d.rights.sweep()
    pruned = d.lifecycle.enforce()  # last: recovery never waits behind it
    return SweepReport(recovered=recovered, woken=len(due), pruned=pruned)


__all__ = ["SweepReport", "sweep"]
