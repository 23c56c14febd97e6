"""Waiting without a worker, bound to the store: the run's ``Waits`` port, parking a run whose
task must wait, and the decisions that make it due again (API, CLI, UI, A2A).

A parked task holds no lease and no worker: its conversation stays blocked by it (it is its
head) and its wake-up comes from whatever ends its wait: a decision here wakes its conversation
at once; a deadline is found by the sweeper's look for due work (so no far-future wake-up is
held by the broker).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from fleet.constants import LIMITS
from fleet.dispatch.host import Cancelling, Configured, Waking
from fleet.domain import event_waits as event_rules
from fleet.domain import waits as rules
from fleet.domain.delegation import is_delegation_key
from fleet.domain.values import Task, TaskStatus
from fleet.store import Head, Store

if TYPE_CHECKING:
    from fleet.domain.runs import Outcome
    from fleet.store import Started

log = logging.getLogger(__name__)

#: An event's id is remembered this long past the lookback window (a repeat changes nothing).
EVENT_IDS_KEPT_S = 24 * 3600.0


class StoreWaits:
    """The ``Waits`` port of one run: decisions read from the store."""

    def __init__(
        self,
        store: Store,
        task: Task,
        clock: Callable[[], datetime],
        *,
        approval_timeout_s: float,
    ) -> None:
        self._store = store
        self._task = task
        self._clock = clock
        self.approval_timeout_s = approval_timeout_s

    def decision(self, call_id: str) -> rules.Decision | None:
        wait = self._store.wait_of(self._task.id, call_id)
        if wait is None:
            return None
        decided = wait.decision(self._clock())
        if decided is not None and decided.status == "expired" and wait.status == "pending":
            self._store.expire_wait(uuid.UUID(wait.id), self._clock())
        return decided


class WaitingHost(Configured, Cancelling, Waking, Protocol):
    """What ``Waiting`` uses of its dispatcher."""


class Waiting:
    """Parks runs and records decisions for a dispatcher."""

    def __init__(self, dispatcher: WaitingHost) -> None:
        self.d = dispatcher
        self._next_prune = 0.0

    def park(self, started: Started, outcome: Outcome) -> Head | None:
        """Store the run's waits and let go of its task (fenced); the conversation's head."""
        task = started.task
        now = self.d.clock()
        since = now - timedelta(seconds=self.d.settings.event_lookback)
        head = self.d.store.park(
            task, started.run_id, outcome.waits, outcome, now, events_since=since
        )
        self.d.hints.changed(task.id)
        log.info(
            "task %s waits (%s), holding no worker",
            task.id,
            ", ".join(f"{r.kind} of {r.tool}" for r in outcome.waits) or "nothing pending",
        )
        if head is not None and head.task_id == task.id and head.not_before <= self.d.clock():
            self.d.wake_next(task)  # decided meanwhile: resume it at once
        return head

    def decide(
        self,
        task: Task,
        wait_id: uuid.UUID,
        answer: str,
        *,
        by: str | None,
        reason: str | None = None,
    ) -> rules.Wait:
        """A person's decision on a pending approval of ``task``; once nothing of the task is
        pending, it is woken to resume (on any worker). InputError for a bad answer or reason;
        NotFound / Conflict from the store."""
        status = rules.status_of(answer)
        text = rules.clean_reason(reason)
        wait, due = self.d.store.decide(
            task.id, wait_id, status, self.d.clock(), by=by, reason=text
        )
        self.d.hints.changed(task.id)
        log.info("approval %s of task %s: %s by %s", wait_id, task.id, wait.status, by or "-")
        if due:
            self.d.wake_next(task)
        return wait

    def new_event(
        self,
        *,
        name: object,
        key: object,
        data: Any,
        event_id: object,
        tenant: str,
        scope: str | None,
        sender: str | None,
    ) -> event_rules.Event:
        """An event as sent now, checked (InputError names the field); its ``data`` at most
        the agents' ``max_input_bytes`` (``[limits]`` of fleet.toml) as JSON."""
        cap = self.d.config.app.limits.max_input_bytes or LIMITS["max_input_bytes"].default
        return event_rules.new_event(
            name=name,
            key=key,
            data=data,
            event_id=event_id,
            tenant=tenant,
            scope=scope,
            sender=sender,
            now=self.d.clock(),
            max_bytes=cap,
        )

    def send_event(self, event: event_rules.Event) -> event_rules.Sent:
        """An event arrived (``POST /v1/events``, ``fleet events send``, a trigger): the waits
        pending for it in its tenant and scope are resolved and their tasks resume at once; it
        is kept for the lookback window for waits that start after it."""
        sent, woken = self.d.store.send_event(event)
        for task in woken:
            self.d.hints.changed(task.id)
            self.d.wake_next(task)
        log.info(
            "event %s (key %s, id %s) in tenant %s: %s",
            event.name,
            event.key,
            event.id,
            event.tenant,
            "seen before" if sent.duplicate else f"resolved {sent.resolved} wait(s)",
        )
        return sent

    def delegate_ended(self, task: Task) -> None:
        """``task`` ended: the tasks waiting for it (``call_agent``) resume. (Only a delegated
        task can be waited for: other settles cost nothing here.)"""
        if not is_delegation_key(task.idempotency_key):
            return
        for caller in self.d.store.release_delegate_waits(self.d.clock(), target=task.id):
            self.d.hints.changed(caller.id)
            self.d.wake_next(caller)

    def sweep(self) -> int:
        """The sweeper's part: waits for delegates that ended while no one was looking (a
        worker lost after its settle, a wait stored as its delegate ended)."""
        woken = self.d.store.release_delegate_waits(self.d.clock())
        for caller in woken:
            self.d.hints.changed(caller.id)
            self.d.wake_next(caller)
        self._prune_events()
        return len(woken)

    def _prune_events(self) -> None:
        """Forget events past the lookback window and a day more (their ids are remembered
        that long), at most every ``prune_interval``."""
        at = time.monotonic()
        if at < self._next_prune:
            return
        self._next_prune = at + self.d.settings.prune_interval
        kept = self.d.settings.event_lookback + EVENT_IDS_KEPT_S
        gone = self.d.store.prune_events(self.d.clock() - timedelta(seconds=kept))
        if gone:
            log.info("forgot %d event(s) past the lookback window", gone)

    def cancelled(self, *task_ids: uuid.UUID) -> None:
        """Waiting tasks were cancelled (``CancelTask``, a conversation reset): the delegates
        they waited for are cancelled too."""
        for task_id in task_ids:
            self._cancel_delegates(task_id, "cancelled")

    def awaited_in(self, conversation_id: uuid.UUID) -> list[uuid.UUID]:
        """The delegated tasks a waiting task of the conversation waits for (to cancel once
        the conversation is deleted: its waits go with it)."""
        return self.d.store.awaited_delegates(conversation_id)

    def abandon(self, delegates: Iterable[uuid.UUID]) -> None:
        """Cancel delegated tasks no one waits for any more (their caller was deleted)."""
        for target in delegates:
            self._cancel(target)

    def ended(self, task: Task, final: TaskStatus) -> None:
        """A task that had waited ended as an interrupted run (``superseded``): the delegates
        its interrupt cut it off from are cancelled, as a stopped ``call_agent`` cancels its
        own. (Only a resumed run can have waited: other settles cost nothing here.)"""
        if final == TaskStatus.SUPERSEDED and task.attempts > 1:
            self._cancel_delegates(task.id, "interrupted")

    def _cancel_delegates(self, task_id: uuid.UUID, ended_as: str) -> None:
        for wait in self.d.store.waits_of(task_id):
            if wait.kind == "delegate" and wait.status == ended_as and wait.target_task_id:
                self._cancel(uuid.UUID(wait.target_task_id))

    def _cancel(self, target: uuid.UUID) -> None:
        try:
            self.d.cancel(target)
        except Exception:  # gone, or already over: nothing to stop
            log.debug("could not cancel delegate %s", target, exc_info=True)


__all__ = ["StoreWaits", "Waiting"]
