"""A claimed task's run, between its claim and its settle: context, tools, model and journal.

The dispatcher's drain claims a task and settles it; what happens in between lives here: the
frozen context a claim is prepared with, the agent's tools opened for the run, its journal and
stop watch, the authorize check, and the agent loop itself. It reads the dispatcher's store,
clock, config and shutdown flag as they are now (tests swap the clock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Protocol, TypeVar

from fleet import metrics, policy
from fleet.agents import models as model_adapters
from fleet.agents import prompt, telemetry
from fleet.agents.models import Traffic
from fleet.agents.runner import RunPorts, run_agent
from fleet.agents.tools import ToolContext, ToolLoadError, toolbox
from fleet.agents.tools.base import ToolGone, ToolServerError
from fleet.agents.tools.toolbox import Toolbox
from fleet.config import AgentConfig, FleetConfig
from fleet.dispatch.delegation import Delegations
from fleet.dispatch.host import Configured, Stopping
from fleet.dispatch.journal import StoreJournal
from fleet.dispatch.lease import LeaseHandle
from fleet.dispatch.quotas import Quotas
from fleet.dispatch.shutdown import HandBack
from fleet.dispatch.snapshots import Resolved, Snapshots
from fleet.dispatch.sources import RunSources
from fleet.dispatch.stops import StopWatch
from fleet.dispatch.waits import StoreWaits
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus
from fleet.errors import Forbidden, LeaseLost
from fleet.store import Claim, Prepared, Started, db
from fleet.streaming.sink import Streaming

log = logging.getLogger("fleet.dispatch.manager")  # the name operators know these records by
T = TypeVar("T")


def agent_of(config: FleetConfig, deployment: str) -> AgentConfig | None:
    """The agent of a deployment, or None when the deployment (or its agent) is gone."""
    dep = config.deployments.get(deployment)
    return None if dep is None else config.agents.get(dep.agent)


class ExecutionHost(Configured, Stopping, Protocol):
    """What ``Execution`` uses of its dispatcher."""

    delegations: Delegations
    policy: policy.Policy
    quotas: Quotas
    sources: RunSources
    stops: StopWatch
    streaming: Streaming
    traffic: Traffic


class Execution:
    """Runs claimed tasks for a dispatcher; keeps each agent's model and toolbox once built."""

    def __init__(self, dispatcher: ExecutionHost) -> None:
        self.d = dispatcher
        self._models: dict[str, model_adapters.Model] = {}
        self._toolboxes: dict[str, Toolbox] = {}
        # Held while one is built: hundreds of runs starting at once build each agent's model
        # (its client, its connection pool) and toolbox once, not once a run.
        self._building = threading.Lock()
        #: The agent configuration each run started with (kept, read back on a resume).
        self.snapshots = Snapshots(dispatcher.store, self._now)

    def _now(self) -> datetime:
        return self.d.clock()  # the dispatcher's clock as it is now (tests swap it)

    def prepare(self, claim: Claim) -> Prepared:
        """The frozen context of a claimed task (built once; a retry reuses its first one)."""
        agent = agent_of(self.d.config, claim.task.deployment)
        if agent is None:
            return Prepared({"messages": []}, "-")
        if claim.frozen_context is not None:
            context = claim.frozen_context
            agent = self.snapshots.resolve(context, agent).agent
        else:
            context = prompt.assemble(
                agent,
                claim.task,
                claim.history,
                more_history=claim.more_history,
                memory=self.d.sources.memory(agent, claim.task),
                remember=self.d.config.deployment(claim.task.deployment).remember,
            )
            self.snapshots.name(context, agent)
        return Prepared(context, self.model(agent).name)

    def outcome(self, started: Started, agent: AgentConfig | None, handle: LeaseHandle) -> Outcome:
        task, run_id = started.task, started.run_id
        metrics.started(task, self.d.clock())
        if agent is None:
            missing = f"deployment {task.deployment!r} is no longer configured"
            return Outcome(TaskStatus.FAILED, None, missing, {}, error_class="config")
        ctx = ToolContext(
            task_id=str(task.id),
            run_id=str(run_id),
            labels=task.labels,
            conversation_id=str(task.conversation_id),
            lost=handle.lost,
            tenant=task.tenant,
        )
        try:
            outcome = self._execute(
                started, self.snapshots.resolve(started.context, agent), handle, ctx
            )
        except (LeaseLost, HandBack):
            raise
        except Exception as exc:  # a bug must not wedge the conversation
            if db.is_prepared_statement_error(exc):  # a pooler's mode, not a bug: the setting
                problem = db.describe(exc)
                log.warning("run of task %s failed: database: %s", task.id, problem)
                outcome = Outcome(TaskStatus.FAILED, None, f"database: {problem}", {})
            else:
                log.exception("run of task %s crashed", task.id)
                outcome = Outcome(
                    TaskStatus.FAILED, None, f"internal error: {type(exc).__name__}: {exc}", {}
                )
        finally:
            self.d.stops.unwatch(task.id)
            ctx.cancelled.set()  # a tool left running (ignored its stop) learns the run is over
        if handle.lost.is_set():
            raise LeaseLost(f"lease on conversation {task.conversation_id} was lost mid-run")
        return outcome

    def _execute(
        self, started: Started, resolved: Resolved, handle: LeaseHandle, ctx: ToolContext
    ) -> Outcome:
        """Open the agent's tools for this run (as configured when the run started) and run it
        with its journal and stop watch."""
        d = self.d
        task, run_id, agent = started.task, started.run_id, resolved.agent
        try:
            box = self._toolbox(resolved)
        except ToolLoadError as exc:
            return Outcome(TaskStatus.FAILED, None, f"agent {agent.name!r}: {exc}", {})
        self.snapshots.keep(resolved, lambda: toolbox.specs(box))
        journal = StoreJournal(
            d.store,
            task,
            run_id,
            handle,
            d.clock,
            previous=d.store.journal(task.id) if task.attempts > 1 else (),
            stopping=d.stopping.is_set,
            changed=d.hints.changed,
            stop=d.stops.watch(task.id),
        )
        conversations = d.config.deployment(task.deployment).conversations
        ports = RunPorts(
            journal=journal,
            watch=journal.must_stop,
            timeout_of=box.timeout_of,
            context_tokens=agent.context_tokens,
            budget=d.quotas.budget(task.tenant, task.id),
            prices=d.traffic.prices,
            report_on_interrupt=conversations.report_on_interrupt,
            inbox_waiting=task.inbox > 0,
            tracer=telemetry.tracer(),
            delegation=d.delegations.port(task, agent) if agent.delegates else None,
            waits=StoreWaits(d.store, task, d.clock, approval_timeout_s=agent.approval_timeout),
            deltas=d.streaming.run(task, run_id),
            on_stop=lambda fn: d.stops.on_stop(task.id, fn),
        )
        namespace = d.config.deployment(task.deployment).namespace

        def authorize(action: policy.Action) -> None:
            access = policy.Access(
                action,
                task.caller,
                task.scope,
                task.deployment,
                task.conversation,
                task.conversation_id,
                namespace,
                task.tenant,
            )
            policy.check(d.policy, access)

        try:
            authorize("recall")  # the run starts (or resumes) with the conversation's context
        except Forbidden as exc:
            return Outcome(TaskStatus.FAILED, None, exc.message, {})
        extra = d.sources.tools(agent, task, run_id, authorize)  # type: ignore[arg-type]
        if d.stopping.is_set():  # claimed as the shutdown began: nothing ran yet
            raise HandBack(f"task {task.id}: handed back before its first step")
        try:
            with box.opened(ctx, extra=extra) as tools:
                return run_agent(
                    self.model(agent),
                    tools,
                    prompt.messages(started.context),
                    max_steps=agent.max_steps,
                    ctx=ctx,
                    ports=ports,
                )
        except (ToolServerError, ToolGone) as exc:
            return Outcome(TaskStatus.FAILED, None, str(exc), {}, error_class="tool_error")

    def _toolbox(self, resolved: Resolved) -> Toolbox:
        return self._once(
            self._toolboxes,
            resolved.fingerprint,
            lambda: toolbox.build(resolved.agent, self.d.config.root, kept=resolved.kept_tools),
        )

    def _once(self, built: dict[str, T], name: str, build: Callable[[], T]) -> T:
        """``built[name]``, built under ``_building`` by the first run that needs it."""
        found = built.get(name)
        if found is None:
            with self._building:
                found = built.get(name)
                if found is None:
                    found = built[name] = build()
        return found

    def warm(self) -> None:
        """Build every configured agent's model now (its SDK imported, its clients made): a
        worker that starts hundreds of runs at once does not pay for it inside them."""
        for agent in self.d.config.agents.values():
            try:
                self.model(agent)
            except Exception:  # its first run builds it again and reports why
                log.debug("could not build the model of agent %s", agent.name, exc_info=True)

    def model(self, agent: AgentConfig) -> model_adapters.Model:
        return self._once(
            self._models,
            self.snapshots.fingerprint(agent),
            lambda: model_adapters.build(agent.model, self.d.settings, self.d.traffic),
        )
