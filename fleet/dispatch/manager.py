"""The dispatcher: admission on the way in, the drain loop and the sweeper on the way out.

It holds the job logic and talks only to the store port, a lease and a waker (procrastinate's
manager/connector split); Celery tasks, HTTP routes and the CLI call it and map its errors.
What a run does between its claim and its settle is ``fleet.dispatch.execute``'s.

About 500 lines, on purpose: the drain loop, the claim, the run and the settle share one lease
and one deadline and are read together; every other part of the dispatcher's work has a room
beside it (intake, execute, lifecycle, waits, follow-ups, recovery, shutdown), each depending on
a narrow protocol of this one (``fleet.dispatch.host``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet import logs, metrics, policy
from fleet.agents import prompt, telemetry
from fleet.agents.models import Traffic
from fleet.config import AgentConfig, FleetConfig, Settings
from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT, NEAR_DEADLINE_S
from fleet.delivery import Deliverer
from fleet.dispatch import recovery
from fleet.dispatch.bulk import Bulk
from fleet.dispatch.delegation import Delegations
from fleet.dispatch.execute import Execution, agent_of
from fleet.dispatch.followups import Followups
from fleet.dispatch.hints import Hints, NoHints
from fleet.dispatch.intake import Admissions, queue_policy
from fleet.dispatch.lease import Lease, LeaseHandle
from fleet.dispatch.lifecycle import Lifecycle
from fleet.dispatch.quotas import Quotas
from fleet.dispatch.recovery import SweepReport
from fleet.dispatch.rights import Rights
from fleet.dispatch.shutdown import HandBack, InFlight, stop_runs
from fleet.dispatch.sources import RunSources
from fleet.dispatch.stops import StopWatch
from fleet.dispatch.turns import Turns, take_turns
from fleet.dispatch.waits import Waiting
from fleet.dispatch.waker import Waker
from fleet.domain import error_classes, inputs, shutdown
from fleet.domain.runs import Outcome
from fleet.domain.values import ACTIVE, CLAIMABLE, Admission, Task, TaskStatus
from fleet.errors import Conflict, LeaseLost
from fleet.store import CancelResult, Chain, Claim, Head, Prepared, Started, Store
from fleet.streaming.sink import Streaming

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def worker_name() -> str:
    """``host:pid`` of this process (also how embedded mode tells a dead holder from a live one)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Dispatcher:
    def __init__(
        self,
        *,
        settings: Settings,
        config: FleetConfig,
        store: Store,
        lease: Lease,
        waker: Waker,
        clock: Callable[[], datetime] = utcnow,
        worker: str | None = None,
        hints: Hints | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.store = store
        self.lease = lease
        self.waker = waker
        self.clock = clock
        self.worker = worker or worker_name()
        #: "This task may have a new event", after each commit that gives it one (streams).
        self.hints: Hints = hints or NoHints()
        #: Memory, recall and the jobs that keep them current.
        self.sources = RunSources(store, config, settings, clock)
        #: The authorize policy of config/fleet.toml (or the scope rules alone).
        self.policy = policy.of(config)
        #: The most history any agent may need (bounds the claim's history read).
        self._history_cap = max(
            (prompt.history_reads(a.history.max_items) for a in config.agents.values()), default=1
        )
        #: Reply delivery: journaled before the settle, attempted off the hot path.
        self.deliveries = Deliverer(
            store, config, clock, claim_margin_s=settings.delivery_claim_margin
        )
        #: Set on shutdown: take no new task; a run hands its task back after its current step.
        self.stopping = threading.Event()
        #: call_agent / start_agent: delegated tasks and the results reported back.
        self.delegations = Delegations(
            store,
            config,
            settings,
            waker,
            clock,
            policy_of=queue_policy,
            cancel=self.cancel,
            drive=self.drain if settings.embedded else None,
            authorize=self.policy,
            hints=self.hints,
        )
        #: Token streaming: where each run's model text goes as it is written (set up by the
        #: runtime: Redis in a fleet, this process embedded).
        self.streaming = Streaming()
        #: Whether its runs were asked to stop: one read for all of them (cancel, interrupt).
        self.stops = StopWatch(store.stop_requested)
        #: The runs this process works on now (what a shutdown waits for).
        self.inflight = InFlight()
        #: Reset, delete, prune; retention and the stored cap on the sweeper's clock.
        self.lifecycle = Lifecycle(self)
        #: What a claimed task's run does between its claim and its settle.
        self.execution = Execution(self)
        #: Runs that stop to wait (approvals), and the decisions that resume them.
        self.waiting = Waiting(self)
        self.bulk = Bulk(self)
        #: A person's data: export and erasure.
        self.rights = Rights(self)
        #: Follow-ups agents scheduled, admitted by the sweeper when due.
        self.followups = Followups(self)
        #: Submissions' checks, admission and what follows it (``submit``'s steps).
        self.admissions = Admissions(self)
        #: Tenants' quotas and budgets (the runtime gives it Redis in a fleet).
        self.quotas = Quotas(config, store, clock)
        #: Model limits, their capacity (the runtime gives Redis in a fleet) and prices.
        self.traffic = Traffic.of(config.app)
        self.sources.traffic = lambda: self.traffic

    # -- intake ---------------------------------------------------------------------------------

    def submit(
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
    ) -> Admission:
        """Admit a submission (one transaction), then send a wake-up hint for its conversation.

        ``caller`` (a configured caller's name) is what the authorize policy is asked about, now
        (dispatch) and when its run starts (recall) or uses memory. The steps are
        ``self.admissions``' (``fleet.dispatch.intake``), shared with the API's event-loop intake.
        """
        sub = self.admissions.submission(
            deployment,
            input,
            scope=scope,
            key=key,
            labels=labels,
            idempotency_key=idempotency_key,
            caller=caller,
            delivery=delivery,
            resource_id=resource_id,
            tenant=tenant,
            priority=priority,
            gated=gated,
        )
        return self.admissions.admit(sub)

    def signal(
        self,
        task_id: uuid.UUID,
        input: str | Sequence[Any],
        *,
        scope: str | None = None,
        caller: str | None = None,
    ) -> Task:
        """Deliver a message into a running task's run at its next step boundary (if the run
        ends first, the message becomes the conversation's next task); Conflict if the task
        is not running."""
        task = self.store.get_task(task_id, scope=scope)
        agent = self._agent(task.deployment)
        limit = agent.max_input_bytes if agent is not None else 16_384
        parts, size = inputs.parse(input, limit)
        running = self.store.signal(task.id, parts, size, self.clock(), caller=caller)
        if running is None:
            current = self.store.get_task(task.id)
            raise Conflict(
                f"task {task.id} is {current.status.value}: signals reach running tasks only "
                "(submit a new task to the conversation instead)",
                field="id",
            )
        return running

    def cancel(self, task_id: uuid.UUID, *, scope: str | None = None) -> CancelResult:
        """Cancel a queued task now, or ask a running one to stop at its next step boundary."""
        result = self.store.cancel(task_id, self.clock(), scope=scope)
        if result.effect == "cancelled":
            self.hints.changed(result.task.id)
            self.waiting.cancelled(result.task.id)
            # The conversation's next task may start now.
            self.wake_next(result.task)
        return result

    def tenant_share(self, tenant: str) -> tuple[int, int]:
        """A tenant's (weight, ``max_running`` or 0) as the config says: what its wake-ups carry
        into the fair queue of turns."""
        cfg = self.config.tenant(tenant)
        return cfg.weight, cfg.max_running or 0

    def wake_next(self, task: Task, at: datetime | None = None) -> None:
        """Wake ``task``'s conversation (forced) as a turn of its tenant."""
        self.waker.wake(
            task.conversation_id, at, force=True, tenant=task.tenant, priority=task.priority
        )

    # -- workers --------------------------------------------------------------------------------

    def take_turns(self, turns: Turns) -> int:
        """A worker's turn (``fleet.turn``, ``fleet.dispatch.turns``): drain what the fair queue
        picks while there is due work and the drain budget lasts; returns the tasks run."""
        return take_turns(
            turns,
            lambda t: self.drain(t.conversation_id, tenant=t.tenant, priority=t.priority),
            budget_s=self.settings.drain_budget,
            stopping=self.stopping.is_set,
        )

    def drain(
        self,
        conversation_id: uuid.UUID,
        *,
        tenant: str = DEFAULT_TENANT,
        priority: int = DEFAULT_PRIORITY,
    ) -> int:
        """Run the conversation's due tasks in seq order while holding its lease; returns how many.

        The lease is held (and kept alive) across consecutive due tasks. A wake-up that finds it
        taken knocks; the release reports the knock and the holder looks again, so a task
        admitted while the lease was held is never left behind. ``tenant`` and ``priority`` are
        the turn's: a wake-up the drain leaves for its conversation is a turn of the same.
        """

        def again(at: datetime | None = None, *, force: bool = False) -> None:
            self.waker.wake(conversation_id, at, force=force, tenant=tenant, priority=priority)

        deadline = time.monotonic() + self.settings.drain_budget
        ran = 0
        idle = 0
        # A drain in a process's main thread (a prefork pool process: one run at a time) keeps
        # one connection from claim to settle, the fastest path. Drains on other threads (a
        # process holding many runs in flight) take a connection per statement or transaction,
        # never across a model or tool call.
        pin = threading.current_thread() is threading.main_thread()
        with self.store.pinned() if pin else contextlib.nullcontext():
            while True:
                if self.stopping.is_set():  # leave the conversation to a worker that stays
                    again(force=True)
                    return ran
                handle = self.lease.acquire(conversation_id)
                if handle is None:
                    return ran  # the holder will see the knock when it releases
                try:
                    with self.lease.kept_alive(handle):
                        head: Head | None = None
                        nxt: Head | Started | None = None
                        while True:
                            did, nxt = self._step(conversation_id, handle, nxt, deadline)
                            ran += did
                            if isinstance(nxt, Started):
                                continue  # the settle claimed it (the drain could go on): run it
                            head = nxt
                            if not did and head is not None and self._orphaned(head):
                                nxt = None
                                continue  # its worker was lost: recovered, claim it again
                            if (
                                not did
                                or head is None
                                or not head.claimable
                                or head.not_before > self.clock()
                                or not self._may_go_on(handle, deadline)
                            ):
                                break
                finally:
                    knocked = self.lease.release(handle)
                if handle.lost.is_set():
                    return ran  # another worker holds the conversation now
                # a waiting head's decision wakes it, or the sweeper at its deadline: no wake-up
                # is left for it here, unless its deadline is near (a short pause)
                parked = (
                    head is not None
                    and head.status == TaskStatus.WAITING
                    and head.not_before > self.clock() + timedelta(seconds=NEAR_DEADLINE_S)
                )
                if head is not None and head.claimable and not parked:
                    if head.not_before > self.clock():
                        again(head.not_before)
                        return ran
                    if self.stopping.is_set():  # handed back, or not started: another worker
                        again(force=True)
                        return ran
                    if time.monotonic() > deadline:
                        again()  # yield to other conversations / workers
                        return ran
                    idle = 0 if did else idle + 1
                    if idle <= 3:
                        continue
                if knocked:
                    if self.stopping.is_set():
                        again()
                        return ran
                    continue
                return ran

    def _orphaned(self, head: Head) -> bool:
        """The head task is leased or running while this drain holds its conversation's lease:
        its worker lost the lease (died, or stalled past the TTL; fencing stops a stalled one's
        writes). Recover it now, as the sweeper would, rather than wait for the next sweep.
        Embedded mode leaves it to the sweeper, which asks whether the holder's process lives
        (each process has its own in-process lease there)."""
        if self.settings.embedded or head.status not in ACTIVE:
            return False
        status = self.store.recover(head.task_id, head.fence, recovery.LOST, self.clock())
        if status is None:
            return False
        self.hints.changed(head.task_id)
        metrics.recovered(status)
        log.warning("task %s recovered by a drain: its worker lost the lease", head.task_id)
        return True

    def _may_go_on(self, handle: LeaseHandle, deadline: float) -> bool:
        """May a drain take another task: lease held, budget left, no shutdown under way?"""
        return (
            not handle.lost.is_set() and time.monotonic() <= deadline and not self.stopping.is_set()
        )

    def _step(
        self,
        conversation_id: uuid.UUID,
        handle: LeaseHandle,
        preread: Head | Started | None = None,
        deadline: float | None = None,
    ) -> tuple[bool, Head | Started | None]:
        """Claim and run the head task; returns whether a task ran and what comes after it.

        ``preread`` is what the previous settle returned: the next head with what its context is
        built from (on PostgreSQL), so the claim needs no read of its own, or the next task
        already claimed by that settle. Until ``deadline`` a settle may claim the next task.
        """
        if isinstance(preread, Started):
            result: Started | Head | None = preread
        else:
            try:
                result = self.store.start_next(
                    conversation_id,
                    self.worker,
                    self.clock(),
                    history_items=self._history_items,
                    prepare=self._prepare,
                    history_cap=self._history_cap,
                    preread=preread,
                )
            except LeaseLost as exc:
                log.warning(
                    "abandoning a claim on conversation %s: %s", conversation_id, exc.message
                )
                return True, None
        if not isinstance(result, Started):
            return False, result
        self.hints.changed(result.task.id)
        try:
            return True, self._run(result, handle, deadline)
        except LeaseLost as exc:
            log.warning("abandoning task %s: %s", result.task.id, exc.message)
            return True, None

    def _prepare(self, claim: Claim) -> Prepared:
        """The frozen context of a claimed task (``fleet.dispatch.execute``)."""
        return self.execution.prepare(claim)

    def _run(
        self, started: Started, handle: LeaseHandle, deadline: float | None = None
    ) -> Head | Started | None:
        """Run a claimed task and settle it, inside its run span (when tracing is on)."""
        task, agent = started.task, self._agent(started.task.deployment)
        self.inflight.add(started, handle)
        try:
            with (
                logs.context(**logs.run_fields(task, started.run_id)),
                telemetry.tracer().run(task, started.run_id, agent, self.store.redactor) as span,
            ):
                try:
                    outcome = self.execution.outcome(started, agent, handle)
                except HandBack:
                    self.inflight.settling(started.run_id)
                    return self.hand_back(started, shutdown.HANDED_BACK)
                span.outcome(outcome)
                self.inflight.settling(started.run_id)
                if outcome.status == TaskStatus.WAITING:  # stops here, holding nothing
                    return self.waiting.park(started, outcome)
                if agent is None:  # a deployment that is gone: settle without chaining the next
                    return self._settle(started, outcome)
                return self._settle(started, outcome, handle, deadline)
        finally:
            self.inflight.remove(started.run_id)

    def hand_back(self, started: Started, reason: str) -> Head | None:
        """Give a task back at shutdown (fenced); the conversation's head, for the drain."""
        task = started.task
        status = self.store.hand_back(task.id, task.fence, reason, self.clock())
        if status is None:
            raise LeaseLost(f"task {task.id} was taken over before it could be handed back")
        self.hints.changed(task.id)
        log.info("task %s handed back (%s): %s", task.id, status.value, reason)
        if status.terminal:  # a cancel won: the task ended here, as a settle would end it
            self._ended(task, status, error_class="cancelled")
        return self.store.head(task.conversation_id)

    def shut_down(self, grace_s: float) -> int:
        """Stop taking work and hand back the runs in flight (see ``fleet.dispatch.shutdown``);
        returns how many were abandoned mid-step when ``grace_s`` ran out."""
        return stop_runs(self, grace_s)

    def _settle(
        self,
        started: Started,
        outcome: Outcome,
        handle: LeaseHandle | None = None,
        deadline: float | None = None,
    ) -> Head | Started | None:
        chain = None
        if handle is not None and deadline is not None and self._may_go_on(handle, deadline):
            chain = Chain.of(started, self.worker, self._history_items, self._prepare)
        outcome = self.deliveries.before_settle(started.task, outcome)
        done = self.store.settle(
            started.task,
            started.run_id,
            outcome,
            self.clock(),
            history_cap=self._history_cap,
            reserved=started.reserved,
            chain=chain,
        )
        self.hints.changed(started.task.id)
        metrics.tokens(started.task.tenant, int(outcome.usage.get("total_tokens", 0) or 0))
        if isinstance(done.next, Started):
            self.hints.changed(done.next.task.id)
        self.sources.settled(self._agent(started.task.deployment), started.task)
        cls = error_classes.of_outcome(outcome) if done.status == outcome.status else None
        self._ended(started.task, done.status, push_pending=done.push_pending, error_class=cls)
        return done.next

    def _ended(
        self,
        task: Task,
        final: TaskStatus,
        *,
        push_pending: bool = True,
        error_class: str | None = None,
    ) -> None:
        """What follows a task's end (a settle, or a hand-back a cancel won): its metric, its
        delegation reported, its deliveries started (``push_pending``: the settle's word on
        A2A push configs; unknown, the store looks)."""
        metrics.finished(task, final, self.clock())
        if final.terminal:
            logs.task_ended(log, task, final.value, error_class, self.clock())
        self.delegations.settled(task)
        try:
            self.waiting.delegate_ended(task)
            self.waiting.ended(task, final)
        except Exception:  # the sweeper's look releases it
            log.warning("could not resume the callers of %s", task.id, exc_info=True)
        try:
            self.deliveries.after_settle(task, final, push_pending=push_pending)
        except Exception:  # journaled already (or the sweeper's next look journals them)
            log.warning("could not start the deliveries of %s", task.id, exc_info=True)

    def _agent(self, deployment: str) -> AgentConfig | None:
        return agent_of(self.config, deployment)

    def _history_items(self, deployment: str) -> int:
        dep = self.config.deployments.get(deployment)
        if dep is None:
            return 0
        return prompt.history_reads(self.config.agents[dep.agent].history.max_items)

    # -- sweeper --------------------------------------------------------------------------------

    def sweep(self, *, alive: Callable[[str | None], bool] | None = None) -> SweepReport:
        """Recover tasks whose lease expired, wake conversations whose wake-up was lost, and
        let each room do its part (``fleet.dispatch.recovery``).

        ``alive(worker)`` can vouch for holders the lease cannot see (embedded mode: another
        process on this host that is still running).
        """
        return recovery.sweep(self, alive)

    def wait(self, task_id: uuid.UUID, timeout_s: float, *, poll_s: float = 0.05) -> Task:
        """Poll the store until the task is terminal or ``timeout_s`` passed; return it."""
        deadline = time.monotonic() + timeout_s
        while True:
            task = self.store.get_task(task_id)
            if task.status.terminal or time.monotonic() >= deadline:
                return task
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


__all__ = ["CLAIMABLE", "Dispatcher", "SweepReport", "utcnow", "worker_name"]
