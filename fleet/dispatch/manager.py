"""The dispatcher: admission on the way in, the drain loop and the sweeper on the way out.

It holds the job logic and talks only to the store port, a lease and a waker (procrastinate's
manager/connector split); Celery tasks, HTTP routes and the CLI call it and map its errors.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet import logs, metrics, policy
from fleet.agents import models as model_adapters
from fleet.agents import prompt, telemetry
from fleet.agents.runner import RunPorts, run_agent
from fleet.agents.tools import ToolContext, ToolLoadError, toolbox
from fleet.agents.tools.toolbox import Toolbox, ToolServerError
from fleet.config import AgentConfig, ConversationsConfig, FleetConfig, Settings
from fleet.dispatch.journal import StoreJournal
from fleet.dispatch.lease import Lease, LeaseHandle
from fleet.dispatch.sources import RunSources
from fleet.dispatch.waker import Waker
from fleet.domain import inputs, keys
from fleet.domain.admission import QUEUE_MODES, QueuePolicy, Submission
from fleet.domain.labels import merge_labels
from fleet.domain.runs import Outcome
from fleet.domain.values import CLAIMABLE, Admission, Task, TaskStatus
from fleet.errors import Conflict, Forbidden, InputError, LeaseLost, NotFound, QueueFull
from fleet.store import CancelResult, Chain, Claim, Head, Prepared, Started, Store

log = logging.getLogger(__name__)


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


def utcnow() -> datetime:
    return datetime.now(UTC)


def worker_name() -> str:
    """``host:pid`` of this process (also how embedded mode tells a dead holder from a live one)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class SweepReport:
    recovered: int
    woken: int


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
    ) -> None:
        self.settings = settings
        self.config = config
        self.store = store
        self.lease = lease
        self.waker = waker
        self.clock = clock
        self.worker = worker or worker_name()
        self._models: dict[str, model_adapters.Model] = {}
        self._toolboxes: dict[str, Toolbox] = {}
        #: Memory, recall and the jobs that keep them current.
        self.sources = RunSources(store, config, settings, clock)
        toolbox.importable(config.root)
        #: The authorize policy of config/fleet.toml (or the scope rules alone).
        self.policy = policy.load(config.app.authorize, str(config.root / "fleet.toml"))
        #: The most history any agent may need (bounds the claim's history read).
        self._history_cap = max(
            (prompt.history_reads(a.history.max_items) for a in config.agents.values()), default=1
        )
        #: Set on warm shutdown: finish the current run, then stop looking for more.
        self.stopping = threading.Event()

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
    ) -> Admission:
        """Admit a submission (one transaction), then send a wake-up hint for its conversation.

        ``caller`` (a configured caller's name) is what the authorize policy is asked about, now
        (dispatch) and when its run starts (recall) or uses memory.
        """
        sub = self.submission(
            deployment,
            input,
            scope=scope,
            key=key,
            labels=labels,
            idempotency_key=idempotency_key,
            caller=caller,
            delivery=delivery,
            resource_id=resource_id,
        )
        return self.admit(sub)

    def admit(self, sub: Submission) -> Admission:
        """Admit a checked submission (``submission``), then what follows (``admitted``)."""
        try:
            admission = self.store.admit(sub, self.clock())
        except QueueFull:
            metrics.rejected(sub.deployment)
            raise
        return self.admitted(admission)

    @property
    def checks_without_store(self) -> bool:
        """Can ``submission`` run without reading the store (no authorize policy to ask)?"""
        return self.policy is policy.allow_all

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
    ) -> Submission:
        """``submit``'s checks (input, key, authorize policy), as the submission to admit."""
        try:
            dep = self.config.deployment(deployment)
        except NotFound as exc:
            raise InputError(exc.message, field="deployment") from None
        agent = self.config.agents[dep.agent]
        parts, size = inputs.parse(input, agent.max_input_bytes)
        ref = keys.resolve(dep.kind, scope, key)
        if self.policy is not policy.allow_all:
            found = self.store.find_conversation(dep.name, ref.scope, ref.key)
            policy.check(
                self.policy,
                policy.Access(
                    "dispatch",
                    caller,
                    ref.scope,
                    dep.name,
                    f"{ref.scope}:{ref.key}",
                    found,
                    dep.namespace,
                ),
            )
        return Submission(
            deployment=dep.name,
            scope=ref.scope,
            key=ref.key,
            input=parts,
            input_bytes=size,
            labels=merge_labels(dep.labels, labels or {}),
            idempotency_key=inputs.idempotency_key(idempotency_key),
            policy=queue_policy(dep.conversations, delivery),
            max_attempts=dep.max_attempts or self.settings.max_attempts,
            max_input_bytes=agent.max_input_bytes,
            caller_scope=scope,
            caller=caller,
            resource_id=inputs.resource_id(resource_id),
        )

    def admitted(self, admission: Admission) -> Admission:
        """What follows a committed admission: its wake-up hint, log line and metrics."""
        if admission.dropped is not None:
            log.info(
                "conversation %s: queue full, dropped task %s",
                admission.task.conversation_id,
                admission.dropped,
            )
        if not admission.duplicate and admission.delivered_to == "queued":
            # De-duplicated also for an idle conversation: the mark this wake-up leaves keeps a
            # burst of submissions (before the first is picked up) from sending one drain each.
            self.waker.wake(admission.task.conversation_id, admission.task.not_before)
        metrics.admitted(admission)
        return admission

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
            # The conversation's next task may start now.
            self.waker.wake(result.task.conversation_id, force=True)
        return result

    # -- workers --------------------------------------------------------------------------------

    def drain(self, conversation_id: uuid.UUID) -> int:
        """Run the conversation's due tasks in seq order while holding its lease; returns how many.

        The lease is held (and kept alive) across consecutive due tasks. A wake-up that finds it
        taken knocks; the release reports the knock and the holder looks again, so a task
        admitted while the lease was held is never left behind.
        """
        deadline = time.monotonic() + self.settings.drain_budget
        ran = 0
        idle = 0
        with self.store.pinned():
            while True:
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
                if head is not None and head.claimable:
                    if head.not_before > self.clock():
                        self.waker.wake(conversation_id, head.not_before)
                        return ran
                    if time.monotonic() > deadline or self.stopping.is_set():
                        self.waker.wake(conversation_id)  # yield to other conversations / workers
                        return ran
                    idle = 0 if did else idle + 1
                    if idle <= 3:
                        continue
                if knocked:
                    if self.stopping.is_set():
                        self.waker.wake(conversation_id)
                        return ran
                    continue
                return ran

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
        try:
            return True, self._run(result, handle, deadline)
        except LeaseLost as exc:
            log.warning("abandoning task %s: %s", result.task.id, exc.message)
            return True, None

    def _prepare(self, claim: Claim) -> Prepared:
        """The frozen context of a claimed task (built once; a retry reuses its first one)."""
        agent = self._agent(claim.task.deployment)
        if agent is None:
            return Prepared({"messages": []}, "-")
        context = claim.frozen_context or prompt.assemble(
            agent,
            claim.task,
            claim.history,
            more_history=claim.more_history,
            memory=self.sources.memory(agent, claim.task),
        )
        return Prepared(context, self._model(agent).name)

    def _run(
        self, started: Started, handle: LeaseHandle, deadline: float | None = None
    ) -> Head | Started | None:
        """Run a claimed task and settle it, inside its run span (when tracing is on)."""
        task, agent = started.task, self._agent(started.task.deployment)
        with (
            logs.context(**logs.run_fields(task, started.run_id)),
            telemetry.tracer().run(task, started.run_id, agent, self.store.redactor) as span,
        ):
            outcome = self._outcome(started, agent, handle)
            span.outcome(outcome)
            if agent is None:  # a deployment that is gone: settle without chaining the next
                return self._settle(started, outcome)
            return self._settle(started, outcome, handle, deadline)

    def _outcome(self, started: Started, agent: AgentConfig | None, handle: LeaseHandle) -> Outcome:
        task, run_id = started.task, started.run_id
        metrics.started(task, self.clock())
        if agent is None:
            missing = f"deployment {task.deployment!r} is no longer configured"
            return Outcome(TaskStatus.FAILED, None, missing, {})
        ctx = ToolContext(
            task_id=str(task.id),
            run_id=str(run_id),
            labels=task.labels,
            conversation_id=str(task.conversation_id),
        )
        try:
            outcome = self._execute(started, agent, handle, ctx)
        except LeaseLost:
            raise
        except Exception as exc:  # a bug must not wedge the conversation
            log.exception("run of task %s crashed", task.id)
            outcome = Outcome(
                TaskStatus.FAILED, None, f"internal error: {type(exc).__name__}: {exc}", {}
            )
        finally:
            ctx.cancelled.set()  # a tool left running (ignored its stop) learns the run is over
        if handle.lost.is_set():
            raise LeaseLost(f"lease on conversation {task.conversation_id} was lost mid-run")
        return outcome

    def _execute(
        self, started: Started, agent: AgentConfig, handle: LeaseHandle, ctx: ToolContext
    ) -> Outcome:
        """Open the agent's tools for this run and run it with its journal and stop watch."""
        task, run_id = started.task, started.run_id
        try:
            box = self._toolbox(agent)
        except ToolLoadError as exc:
            return Outcome(TaskStatus.FAILED, None, f"agent {agent.name!r}: {exc}", {})
        journal = StoreJournal(
            self.store,
            task,
            run_id,
            handle,
            self.clock,
            previous=self.store.journal(task.id) if task.attempts > 1 else (),
        )
        conversations = self.config.deployment(task.deployment).conversations
        ports = RunPorts(
            journal=journal,
            watch=journal.must_stop,
            timeout_of=box.timeout_of,
            context_tokens=agent.context_tokens,
            report_on_interrupt=conversations.report_on_interrupt,
            inbox_waiting=task.inbox > 0,
            tracer=telemetry.tracer(),
        )
        namespace = self.config.deployment(task.deployment).namespace

        def authorize(action: policy.Action) -> None:
            access = policy.Access(
                action,
                task.caller,
                task.scope,
                task.deployment,
                task.conversation,
                task.conversation_id,
                namespace,
            )
            policy.check(self.policy, access)

        try:
            authorize("recall")  # the run starts (or resumes) with the conversation's context
        except Forbidden as exc:
            return Outcome(TaskStatus.FAILED, None, exc.message, {})
        extra = self.sources.tools(agent, task, run_id, authorize)  # type: ignore[arg-type]
        try:
            with box.opened(ctx, extra=extra) as tools:
                return run_agent(
                    self._model(agent),
                    tools,
                    prompt.messages(started.context),
                    max_steps=agent.max_steps,
                    ctx=ctx,
                    ports=ports,
                )
        except ToolServerError as exc:
            return Outcome(TaskStatus.FAILED, None, str(exc), {})

    def _toolbox(self, agent: AgentConfig) -> Toolbox:
        box = self._toolboxes.get(agent.name)
        if box is None:
            box = self._toolboxes[agent.name] = toolbox.build(agent, self.config.root)
        return box

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
        final, nxt = self.store.settle(
            started.task,
            started.run_id,
            outcome,
            self.clock(),
            history_cap=self._history_cap,
            reserved=started.reserved,
            chain=chain,
        )
        metrics.finished(started.task, final, self.clock())
        self.sources.settled(self._agent(started.task.deployment), started.task)
        return nxt

    def _agent(self, deployment: str) -> AgentConfig | None:
        dep = self.config.deployments.get(deployment)
        return None if dep is None else self.config.agents.get(dep.agent)

    def _history_items(self, deployment: str) -> int:
        dep = self.config.deployments.get(deployment)
        if dep is None:
            return 0
        return prompt.history_reads(self.config.agents[dep.agent].history.max_items)

    def _model(self, agent: AgentConfig) -> model_adapters.Model:
        model = self._models.get(agent.name)
        if model is None:
            model = self._models[agent.name] = model_adapters.build(agent.model, self.settings)
        return model

    # -- sweeper --------------------------------------------------------------------------------

    def sweep(self, *, alive: Callable[[str | None], bool] | None = None) -> SweepReport:
        """Recover tasks whose lease expired, and wake conversations whose wake-up was lost.

        ``alive(worker)`` can vouch for holders the lease cannot see (embedded mode: another
        process on this host that is still running).
        """
        now = self.clock()
        recovered = 0
        active = self.store.active()
        live = self.lease.held([conv for _, conv, _, _ in active])
        for task_id, conv, fence, worker in active:
            if conv in live or (alive is not None and alive(worker)):
                continue
            status = self.store.recover(task_id, fence, "worker lost mid-run (lease expired)", now)
            if status is not None:
                recovered += 1
                metrics.recovered(status)
                self.waker.wake(conv, force=True)
        for task_id, conv in self.store.inbox_orphans():
            # a worker died between its settle and the requeue of its run's inbox
            if self.store.requeue_inbox(task_id, now):
                self.waker.wake(conv, force=True)
        grace = timedelta(seconds=self.settings.sweep_interval)
        due = self.store.due_conversations(now - grace, limit=1000)
        for conv in due:
            self.waker.wake(conv, force=True)
        return SweepReport(recovered=recovered, woken=len(due))

    def wait(self, task_id: uuid.UUID, timeout_s: float, *, poll_s: float = 0.05) -> Task:
        """Poll the store until the task is terminal or ``timeout_s`` passed; return it."""
        deadline = time.monotonic() + timeout_s
        while True:
            task = self.store.get_task(task_id)
            if task.status.terminal or time.monotonic() >= deadline:
                return task
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


__all__ = ["CLAIMABLE", "Dispatcher", "SweepReport", "utcnow", "worker_name"]
