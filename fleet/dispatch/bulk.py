"""Bulk actions bound to the store and the dispatcher: a dry run, a job started (and run at
once by the process that started it), and the sweeper's share: jobs whose process was lost go
on from their cursor (``fleet.domain.bulk`` has the rules).

A job holds a claim while it runs a batch; it acts on each task as a key would one by one (a
retry is a submission, a cancel a CancelTask), so quotas, order and walls hold as for those.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Protocol

from fleet.dispatch.host import Cancelling, Configured, Submitting
from fleet.domain import bulk as rules
from fleet.domain.values import Task
from fleet.errors import FleetError, NotFound

log = logging.getLogger(__name__)

#: A process holds a job while it runs a batch for this many lease TTLs (``FLEET_LEASE_TTL``:
#: the time after which a worker counts as lost); the sweeper takes a job up after that.
HOLD_TTLS = 3.0
#: Batches one sweep runs of jobs their process left (the rest at the next sweep).
SWEEP_BATCHES = 5


class BulkHost(Configured, Submitting, Cancelling, Protocol):
    """What ``Bulk`` uses of its dispatcher: the actions a key takes one by one."""


class Bulk:
    """Dry runs and jobs for a dispatcher."""

    def __init__(self, dispatcher: BulkHost) -> None:
        self.d = dispatcher

    @property
    def hold(self) -> timedelta:
        return timedelta(seconds=HOLD_TTLS * self.d.settings.lease_ttl)

    def dry_run(self, f: rules.Filter, walls: rules.Walls) -> tuple[int, list[uuid.UUID]]:
        """How many tasks a job would act on now, and the first of them; changes nothing."""
        return self.d.store.count_matching(f, walls)

    def start(
        self,
        action: rules.Action,
        f: rules.Filter,
        walls: rules.Walls,
        *,
        tenant: str,
        owner: str,
        idempotency_key: str | None,
    ) -> tuple[rules.Job, bool]:
        """A new job (or, for a repeated idempotency key, the first one); (the job, new?)."""
        job, new = self.d.store.create_bulk_job(
            tenant=tenant,
            owner=owner,
            walls=walls,
            action=action,
            f=f,
            idempotency_key=idempotency_key,
            now=self.d.clock(),
        )
        if new:
            log.info("bulk %s %s by %s: %d task(s) match", action, job.id, owner, job.matched)
        return job, new

    def run(self, job_id: uuid.UUID, *, max_batches: int | None = None) -> rules.Job | None:
        """Run a job nobody holds, batch by batch, until it is done (or ``max_batches``);
        None when another process holds it or it is done."""
        now = self.d.clock()
        job = self.d.store.claim_bulk_job(now, now + self.hold, job_id)
        if job is None:
            return None
        return self._batches(job, max_batches)

    def go_on(self, job: rules.Job) -> rules.Job:
        """Run the rest of a job this process holds (``run`` with ``max_batches`` returned it
        still running)."""
        return self._batches(job, None)

    def sweep(self) -> int:
        """The sweeper's share: jobs whose process was lost (their claim ran out) go on; how
        many batches ran."""
        ran = 0
        while ran < SWEEP_BATCHES:
            now = self.d.clock()
            job = self.d.store.claim_bulk_job(now, now + self.hold)
            if job is None:
                break
            job = self._batches(job, SWEEP_BATCHES - ran)
            ran += SWEEP_BATCHES if job.status == "running" else 1
        return ran

    def _batches(self, job: rules.Job, max_batches: int | None) -> rules.Job:
        n = 0
        while job.status == "running" and (max_batches is None or n < max_batches):
            n += 1
            batch = self.d.store.bulk_batch(job)
            done, failed = 0, []
            for task in batch:
                why = self._act(job, task)
                if why is None:
                    done += 1
                else:
                    failed.append((task.id, why))
            now = self.d.clock()
            job = self.d.store.advance_bulk_job(
                job,
                batch[-1] if batch else None,
                done=done,
                failed=failed,
                finished=len(batch) < rules.BATCH,
                now=now,
                hold_until=now + self.hold,
            )
        if job.status == "done":
            log.info(
                "bulk %s %s done: %d done, %d failed of %d matched",
                job.action,
                job.id,
                job.done,
                job.failed,
                job.matched,
            )
        return job

    def _act(self, job: rules.Job, task: Task) -> str | None:
        """Retry or cancel one task as its key would; why it could not, or None."""
        try:
            if job.action == "cancel":
                self.d.cancel(task.id)
                return None
            # (a conversation deleted since the batch was read took its tasks with it: its
            # retry would start the conversation afresh, so it is refused)
            self.d.store.get_task(task.id)
            self.d.submit(
                task.deployment,
                [p.model_dump(mode="json") for p in task.input],
                scope=task.scope,
                key=task.key,
                labels=rules.retry_labels(task.labels, str(task.id)),
                idempotency_key=rules.retry_key(str(job.id), str(task.id)),
                caller=task.caller,
                delivery="followup",
                resource_id=task.resource_id,
                tenant=task.tenant,
                priority=task.priority,
            )
        except NotFound:
            return "its conversation was deleted: nothing to retry it in"
        except FleetError as exc:
            return exc.message
        return None


__all__ = ["Bulk"]
