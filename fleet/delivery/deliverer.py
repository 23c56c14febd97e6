"""The deliverer: journal rows opened before a settle, attempts run off the hot path.

Each attempt starts with a compare-and-set on its journal row (``pending``, the claim and the
attempt count as read), sends, then writes its outcome under that claim. Once ``sent`` is stored
no attempt can start again. A worker that dies between sending and writing leaves the claim to
expire; the next attempt journals the lost one as ``unknown`` and sends again with the same
``Idempotency-Key`` (the window every at-least-once transport has: receivers dedupe on it).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fleet.config import FleetConfig
from fleet.constants import DELIVERY_CLAIM_MARGIN_S
from fleet.delivery import targets as where
from fleet.delivery.http import Sent, send
from fleet.domain import delivery as rules
from fleet.domain.runs import Outcome
from fleet.domain.values import Task, TaskStatus
from fleet.errors import NotFound
from fleet.store import Store

log = logging.getLogger(__name__)

#: ``enqueue(delivery_id, delay_s)``: run an attempt later (a Celery task, or a local thread).
Enqueue = Callable[[uuid.UUID, float], None]
#: Seconds an A2A push attempt may take.
PUSH_TIMEOUT_S = 10.0


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


class Deliverer:
    def __init__(
        self,
        store: Store,
        config: FleetConfig,
        clock: Callable[[], datetime],
        *,
        sender: Callable[[where.Request, float], Sent] = send,
        claim_margin_s: float = DELIVERY_CLAIM_MARGIN_S,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.sender = sender
        #: How long past an attempt's timeout its claim holds (``FLEET_DELIVERY_CLAIM_MARGIN``).
        self.claim_margin_s = claim_margin_s
        #: Set by the runtime; None runs each attempt inline (tests, tools).
        self.enqueue: Enqueue | None = None

    # -- around a settle ------------------------------------------------------------------------

    def before_settle(self, task: Task, outcome: Outcome) -> Outcome:
        """Journal the ``[reply]`` delivery of the reply about to be stored (``pending``), so a
        crash after the settle loses none; the reply is stored ``pending`` too. Reads nothing:
        where a reply goes is configuration (A2A push configs are journaled after the settle,
        which says whether the task has one)."""
        found = where.reply_targets(self.config, task, outcome.status)
        if not found:
            return outcome
        self.store.open_deliveries(task.id, found, self.clock())
        if outcome.reply is not None:
            return dataclasses.replace(outcome, reply_delivery="pending")
        return outcome

    def after_settle(self, task: Task, final: TaskStatus, *, push_pending: bool = True) -> None:
        """Start the deliveries of a task that ended: its ``[reply]``'s (journaled already) and,
        with ``push_pending`` (the settle's word), its A2A push configs' (journaled here; a
        worker lost before this leaves the task to the sweeper). ``task`` is the settled task
        as the worker holds it: nothing is read when neither applies."""
        if final.terminal:
            self._open(task, final, push=push_pending)

    def schedule(self, task_id: uuid.UUID) -> list[uuid.UUID]:
        """Journal and start the deliveries of a finished task (a push config set after it
        finished is delivered this way); returns the pending ones."""
        task = self.store.get_task(task_id)
        if not task.status.terminal:
            return []
        return self._open(task, task.status, push=True)

    def _open(self, task: Task, status: TaskStatus, *, push: bool) -> list[uuid.UUID]:
        found = where.reply_targets(self.config, task, status)
        if not found and not push:
            return []
        ids = self.store.open_deliveries(task.id, found, self.clock(), push=push)
        for delivery_id in ids:
            self.start(delivery_id)
        return ids

    def start(self, delivery_id: uuid.UUID, delay_s: float = 0.0) -> None:
        if self.enqueue is None:
            self.run(delivery_id)
            return
        try:
            self.enqueue(delivery_id, delay_s)
        except Exception:  # the sweeper sends it again
            log.warning("could not enqueue delivery %s", delivery_id, exc_info=True)

    # -- one attempt ----------------------------------------------------------------------------

    def run(self, delivery_id: uuid.UUID) -> None:
        """Attempt it now; a retry is enqueued after the backoff (inline: attempted at once)."""
        wait = self.attempt(delivery_id)
        if wait is not None:
            if self.enqueue is None:
                self.run(delivery_id)
            else:
                self.start(delivery_id, wait)

    def attempt(self, delivery_id: uuid.UUID) -> float | None:
        """One attempt, if one may start now; seconds until the next one (None: no more)."""
        now = self.clock()
        rec = self.store.delivery(delivery_id)
        if rec is None or not rules.may_attempt(
            rec.status, claimed_until=rec.claimed_until, now=now
        ):
            return None  # sent, ended, or another attempt under way
        if rec.next_at is not None and rec.next_at > now:
            return (rec.next_at - now).total_seconds()  # early (a duplicate message)
        try:
            task = self.store.get_task(rec.task_id)
        except NotFound:
            return None
        if not task.status.terminal:
            return None  # stored before a settle that has not happened (yet): the sweeper looks
        if rec.kind == "reply" and (task.status not in where.REPLIED or task.reply is None):
            self.store.settle_delivery(
                rec.id, "failed", f"the task ended {task.status.value} without a reply", now
            )
            return None
        token = uuid.uuid4().hex
        lost = None
        if rec.claim is not None:
            lost = {
                "attempt": rec.attempts,
                "at": _iso(now),
                "outcome": "unknown",
                "error": "the worker sending it stopped before it reported",
            }
            if rec.attempts >= rec.max_attempts:  # that was the last attempt
                if self.store.claim_delivery(rec, token, now, now, url=rec.url, lost=None):
                    self.store.record_attempt(rec.id, token, rules.Next("unknown"), lost, now)
                return None
        try:
            request, timeout = self._request(rec, task)
        except (rules.TemplateError, rules.UrlError, KeyError, LookupError) as exc:
            reason = f"environment variable {exc} is not set" if type(exc) is KeyError else str(exc)
            if self.store.claim_delivery(rec, token, now, now, url=None, lost=lost):
                refused = {"attempt": rec.attempts + 1, "at": _iso(now), "outcome": "failed"}
                refused["error"] = reason
                self.store.record_attempt(rec.id, token, rules.Next("failed"), refused, now)
            return None
        until = now + timedelta(seconds=timeout + self.claim_margin_s)
        if not self.store.claim_delivery(rec, token, until, now, url=request.url, lost=lost):
            return None  # another attempt won the row
        attempt = rec.attempts + 1
        sent = self.sender(request, timeout)
        done = self.clock()
        nxt = rules.after_attempt(sent.result, attempt, rec.max_attempts, done)
        entry: dict[str, Any] = {
            "attempt": attempt,
            "at": _iso(now),
            # (``retry``: this attempt failed; the row says whether another follows)
            "outcome": "failed" if sent.result == "retry" else sent.result,
            "httpStatus": sent.http_status,
            "durationMs": sent.duration_ms,
            "detail": sent.detail,
        }
        error = None
        if sent.result != "sent":  # what failed first, the receiver's answer after it
            error = entry["error"] = rules.attempt_error(sent.http_status, request.url, sent.detail)
        if not self.store.record_attempt(rec.id, token, nxt, entry, done, error=error):
            log.warning("delivery %s: the attempt's claim was lost; its outcome dropped", rec.id)
            return None
        if nxt.retry_at is None:
            return None
        return max(0.0, (nxt.retry_at - self.clock()).total_seconds())

    def _request(self, rec: rules.Record, task: Task) -> tuple[where.Request, float]:
        key = str(rec.id)
        if rec.kind == "reply":
            found = where.reply_config(self.config, task)
            if found is None:
                raise LookupError("the [reply] this delivery was for is no longer configured")
            return where.reply_request(found[1], task, key), found[1].timeout
        config_id = rec.target.removeprefix("push:")
        for push in self.store.push_configs(task.id):
            if push.id == config_id:
                from fleet.a2a.tasks import to_a2a_json

                return where.push_request(push, to_a2a_json(task), key), PUSH_TIMEOUT_S
        raise LookupError(f"push-notification config {config_id!r} was deleted")

    # -- the sweeper ----------------------------------------------------------------------------

    def sweep(self, grace_s: float) -> int:
        """Start pending deliveries whose message was lost or whose worker died mid-attempt,
        and journal the push configs of tasks whose worker was lost after their settle."""
        before = self.clock() - timedelta(seconds=grace_s)
        due = self.store.due_deliveries(before)
        for delivery_id in due:
            self.start(delivery_id)
        for task_id in self.store.push_pending_ended(before):  # its settle's worker was lost
            due.extend(self.schedule(task_id))
        return len(due)
