"""Delegation bound to the store: the run's port (``RunDelegation``: delegated tasks, and
signals into running tasks) and the reporting of a started task's result back into its
caller's conversation (``Delegations``).

A delegated task is admitted with an idempotency key made of the caller's task and tool call
id, and its delegation record (chain, where a result goes) is written in the same transaction:
a run retried after its worker was lost gets the same task back, never a second one. A
started task's result is admitted into the caller's conversation when the task settles, keyed
by the task (so a repeat admits nothing), and marked reported; the sweeper reports what a
worker lost between its settle and the report. A caller's conversation that was reset or
deleted since gets nothing (the result is marked reported and logged). A signal is put into
the target's inbox keyed by the caller's task and tool call id likewise: a retried run puts
none a second time.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from fleet import metrics, policy
from fleet.config import AgentConfig, FleetConfig, Settings
from fleet.dispatch.hints import Hints, NoHints
from fleet.dispatch.waker import Waker
from fleet.domain import delegation as rules
from fleet.domain import inputs
from fleet.domain.admission import QueuePolicy, Submission
from fleet.domain.labels import merge_labels
from fleet.domain.values import Admission, Task, TextPart
from fleet.errors import InputError, NotFound
from fleet.store import Store

log = logging.getLogger(__name__)

#: ``queue_policy(conversations)``: the deployment's queue policy (``fleet.dispatch.manager``).
PolicyOf = Callable[[Any], QueuePolicy]


class Delegations:
    """Admits delegated tasks and reports started tasks' results; one per dispatcher."""

    def __init__(
        self,
        store: Store,
        config: FleetConfig,
        settings: Settings,
        waker: Waker,
        clock: Callable[[], datetime],
        *,
        policy_of: PolicyOf,
        cancel: Callable[[uuid.UUID], Any],
        drive: Callable[[uuid.UUID], Any] | None = None,
        authorize: policy.Policy = policy.allow_all,
        hints: Hints | None = None,
    ) -> None:
        self.store = store
        #: Change hints for task event streams (a dropped task's).
        self.hints: Hints = hints or NoHints()
        self.config = config
        self.settings = settings
        self.waker = waker
        self.clock = clock
        self._policy_of = policy_of
        self._cancel = cancel
        #: Embedded mode: run a delegated task's conversation in the waiting thread.
        self.drive = drive
        #: The authorize policy, asked about each delegated dispatch (as its caller's).
        self.authorize = authorize

    def port(self, task: Task, agent: AgentConfig) -> RunDelegation:
        """The delegation port of one run of ``task`` (its chain read from its record)."""
        chain: tuple[str, ...] = ()
        if rules.is_delegation_key(task.idempotency_key):
            record = self.store.delegation(task.id)
            chain = record.chain if record is not None else ()
        caller = rules.Caller(task.deployment, task.scope, task.key, chain)
        return RunDelegation(self, task, caller, agent.delegates, timeout_s=agent.delegate_timeout)

    def admit(self, sub: Submission) -> Admission:
        admission = self.store.admit(sub, self.clock())
        if admission.dropped is not None:
            self.hints.changed(admission.dropped)
        if not admission.duplicate and admission.delivered_to == "queued":
            task = admission.task
            self.waker.wake(
                task.conversation_id, task.not_before, tenant=task.tenant, priority=task.priority
            )
        metrics.admitted(admission)
        return admission

    # -- reporting a started task's result ------------------------------------------------------

    def settled(self, task: Task) -> None:
        """After ``task`` settled: if it was started by ``start_agent``, report its result."""
        if not rules.is_delegation_key(task.idempotency_key):
            return
        record = self.store.delegation(task.id)
        if record is not None and record.mode == "start" and not record.reported:
            try:
                self.report(self.store.get_task(task.id), record)
            except Exception:  # the sweeper reports it
                log.warning("could not report the result of task %s", task.id, exc_info=True)

    def report_due(self) -> int:
        """The sweeper's part: report results a lost worker did not (idempotent)."""
        done = 0
        for task, record in self.store.unreported():
            try:
                self.report(task, record)
                done += 1
            except Exception:
                log.warning("could not report the result of task %s", task.id, exc_info=True)
        return done

    def report(self, task: Task, record: rules.Record) -> None:
        """Admit the result of started ``task`` into its caller's conversation, once."""
        to = record.report_to
        now = self.clock()
        dep = self.config.deployments.get(to.deployment) if to is not None else None
        if to is None or dep is None:  # the caller's deployment is gone: nothing to report to
            self.store.mark_reported(task.id, task.id, now)
            return
        # (creates nothing; a started task is its caller's tenant's)
        found = self.store.lookup(to.deployment, to.scope, to.key, tenant=task.tenant)
        now_is = (str(found.id), found.generation) if found is not None else None
        if rules.report_fate(to, now_is) == "drop":
            log.info(
                "result of task %s not reported: conversation %s:%s of %s was reset or deleted "
                "since it was started",
                task.id,
                to.scope,
                to.key,
                to.deployment,
            )
            self.store.mark_reported(task.id, task.id, now)
            return
        agent = self.config.agents[dep.agent]
        done = rules.Finished(
            str(task.id), task.deployment, task.status.value, task.reply, task.error
        )
        text = rules.result_input(done, agent.max_input_bytes)
        # a task of its own (never merged, never interrupting the caller's run), behind the
        # conversation's cap (a full queue: the sweeper reports it later, nothing is dropped)
        queued = self._policy_of(dep.conversations)
        admission = self.admit(
            Submission(
                deployment=dep.name,
                scope=to.scope,
                key=to.key,
                input=(TextPart(text=text),),
                input_bytes=len(text.encode()),
                labels=dict(to.labels),
                idempotency_key=rules.result_key(str(task.id)),
                policy=QueuePolicy("followup", max_queued=queued.max_queued, on_full="reject"),
                max_attempts=dep.max_attempts or self.settings.max_attempts,
                max_input_bytes=agent.max_input_bytes,
                caller_scope=rules.scope_of(task.deployment),
                caller=to.caller,
                # the chain of the task it reports, which ends with this conversation: a
                # start_agent ping-pong grows it a round at a time (``rules.round_trips``)
                delegation=rules.Record("result", record.chain),
                tenant=task.tenant,
                priority=inputs.priority(dep.priority, task.priority),
            )
        )
        self.store.mark_reported(task.id, admission.task.id, now)


class RunDelegation:
    """The ``Delegation`` port of one run: admits its delegated tasks and watches them."""

    def __init__(
        self,
        owner: Delegations,
        task: Task,
        caller: rules.Caller,
        delegates: Sequence[str],
        *,
        timeout_s: float = 3600.0,
    ) -> None:
        self._owner = owner
        self._task = task
        self._caller = caller
        self.delegates: Sequence[str] = tuple(delegates)
        #: A fleet parks the caller; embedded mode runs the delegate in the waiting thread.
        self.parks = owner.drive is None
        self.timeout_s = timeout_s

    def waited(self, call_id: str) -> str | None:
        wait = self._owner.store.wait_of(self._task.id, call_id)
        if wait is None:
            return None
        decided = wait.decision(self._owner.clock())
        if decided is None:
            return None
        if decided.status == "expired" and wait.status == "pending":
            self._owner.store.expire_wait(uuid.UUID(wait.id), self._owner.clock())
        return decided.status

    def delegate(self, deployment: str, input: str, *, call_id: str, wait: bool) -> rules.Delegated:
        owner, task = self._owner, self._task
        config = owner.config
        kinds = {name: d.kind for name, d in config.deployments.items()}
        chain = rules.check(
            self._caller,
            deployment,
            delegates=self.delegates,
            kinds=kinds,
            max_depth=owner.settings.max_delegation_depth,
            wait=wait,
        )
        dep = config.deployment(deployment)
        agent = config.agents[dep.agent]
        parts, size = inputs.parse(input, agent.max_input_bytes)
        report_to = None
        if not wait:
            report_to = rules.ReportTo(
                task.deployment,
                task.scope,
                task.key,
                dict(task.labels),
                task.caller,
                conversation_id=str(task.conversation_id),
            )
        conv = self.conversation_for(dep.kind, deployment, call_id)
        if owner.authorize is not policy.allow_all:  # (Forbidden: the model is told)
            access = policy.Access(
                "dispatch",
                task.caller,
                conv[0],
                deployment,
                f"{conv[0]}:{conv[1]}",
                None,
                dep.namespace,
                task.tenant,
            )
            policy.check(owner.authorize, access)
        queued = owner._policy_of(dep.conversations)
        admission = owner.admit(
            Submission(
                deployment=deployment,
                scope=conv[0],
                key=conv[1],
                input=parts,
                input_bytes=size,
                labels=merge_labels(dep.labels, task.labels),
                idempotency_key=rules.call_key(str(task.id), call_id),
                # a task of its own (never merged or steered), behind the conversation's cap
                policy=QueuePolicy("followup", max_queued=queued.max_queued, on_full="reject"),
                max_attempts=dep.max_attempts or owner.settings.max_attempts,
                max_input_bytes=agent.max_input_bytes,
                caller_scope=rules.scope_of(task.deployment),
                caller=task.caller,
                resource_id=task.resource_id,
                # inside the fleet: the delegating task's tenant, never another's
                tenant=task.tenant,
                priority=inputs.priority(dep.priority, task.priority),
                delegation=rules.Record(
                    "call" if wait else "start",
                    chain,
                    parent_task_id=str(task.id),
                    report_to=report_to,
                ),
            )
        )
        found = admission.task
        return rules.Delegated(str(found.id), deployment, found.conversation)

    def conversation_for(self, kind: str, deployment: str, call_id: str) -> tuple[str, str]:
        """(scope, key) of the delegated task's new conversation (a singleton has its one)."""
        from fleet.domain import keys

        ref = keys.resolve(
            kind,  # type: ignore[arg-type]
            rules.scope_of(self._task.deployment),
            None,
            new_key=uuid.uuid5(uuid.NAMESPACE_URL, f"{self._task.id}:{call_id}").hex,
        )
        return ref.scope, ref.key

    def poll(self, task_id: str) -> rules.Finished | None:
        owner = self._owner
        try:
            task = owner.store.get_task(uuid.UUID(task_id))
        except NotFound:
            return rules.Finished(task_id, "?", "failed", error="the task was deleted")
        if not task.status.terminal and owner.drive is not None:
            owner.drive(task.conversation_id)  # embedded: run it here if no one else does
            task = owner.store.get_task(task.id)
        if not task.status.terminal:
            return None
        return rules.Finished(
            str(task.id), task.deployment, task.status.value, task.reply, task.error
        )

    def cancel(self, task_id: str) -> None:
        with contextlib.suppress(NotFound, InputError, ValueError):
            target = self._owner.store.get_task(uuid.UUID(task_id))
            if target.tenant == self._task.tenant:
                self._owner._cancel(target.id)

    def signal(self, task_id: str, message: str, *, call_id: str) -> rules.Signalled:
        owner, task = self._owner, self._task
        try:
            target = owner.store.get_task(uuid.UUID(task_id))
        except (ValueError, NotFound):
            raise rules.Refused(f"no task with id {task_id!r}") from None
        if target.tenant != task.tenant:  # another tenant's task: as if it did not exist
            raise rules.Refused(f"no task with id {task_id!r}")
        rules.check_signal(
            str(target.id), target.deployment, caller_task=str(task.id), delegates=self.delegates
        )
        dep = owner.config.deployments.get(target.deployment)
        if dep is None:  # (a delegate that is no longer configured)
            raise rules.Refused(f"deployment {target.deployment!r} is not configured")
        if owner.authorize is not policy.allow_all:  # (Forbidden: the model is told)
            access = policy.Access(
                "dispatch",
                task.caller,
                target.scope,
                target.deployment,
                f"{target.scope}:{target.key}",
                target.conversation_id,
                dep.namespace,
                target.tenant,
            )
            policy.check(owner.authorize, access)
        parts, size = inputs.parse(message, owner.config.agents[dep.agent].max_input_bytes)
        running = owner.store.signal(
            target.id,
            parts,
            size,
            owner.clock(),
            caller=task.caller,
            idempotency_key=rules.signal_key(str(task.id), call_id),
        )
        if running is None:
            now = owner.store.get_task(target.id)
            return rules.Signalled(str(now.id), now.deployment, now.status.value, delivered=False)
        return rules.Signalled(
            str(running.id), running.deployment, running.status.value, delivered=True
        )


__all__ = ["Delegations", "RunDelegation"]
