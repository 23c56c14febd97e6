"""The agent loop: model call, tool calls, repeat until a reply or the step limit.

The runner gets its ports handed in and never touches the store (``fleet.agents.ports``): a
``Journal`` that stores finished steps (fenced) before the next step begins and hands back an
earlier attempt's steps to replay, and a ``watch`` that says, while a tool runs, whether the run
must stop. Every step boundary (before a model call or a tool call, once there is something
unstored) is a journal commit, which also says whether a cancel or an interrupt was requested and
whether messages wait in the run's inbox. The boundary before a model call takes them (steer,
signals): they join the conversation as user messages. Tool calls not started when a message
arrives are skipped (the model sees why); an interrupt gives the model one last turn, without
tools, to report, then the run ends as ``superseded``. A ``tracer`` (a no-op unless tracing is
on) gets a span around each model call and each tool call.

About 500 lines, on purpose: the loop and its steps (model step, tool step, park, report) share
the conversation being built and the boundary rules above, and are read as one state machine;
what stands apart has its own room (``steps``, ``waiting``, ``budget``, ``tracing``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fleet import metrics
from fleet.agents import tokens, waiting
from fleet.agents.budget import fit as budget_fit
from fleet.agents.capacity import Wait
from fleet.agents.models.base import (
    Abort,
    ChatMessage,
    Model,
    ModelResponse,
    Stopped,
    ToolCall,
    streams,
)
from fleet.agents.models.traffic import ManagedModel
from fleet.agents.ports import Delegation, Journal, MemoryJournal, RunPorts
from fleet.agents.steps import Steps, inbox_texts
from fleet.agents.tools import delegation, executor
from fleet.agents.tools.base import Tool, ToolContext
from fleet.domain import cost, error_classes, journal, waits
from fleet.domain.model_limits import waiting_text
from fleet.domain.runs import Outcome, Signals, TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import ModelError

__all__ = ["Journal", "MemoryJournal", "RunPorts", "run_agent"]

#: The result a tool call gets when it was not started because a message arrived first.
SKIPPED_FOR_INBOX = "skipped: a new message arrived before this call started"
#: The result a tool call gets when the run was interrupted before it started.
SKIPPED_FOR_INTERRUPT = "skipped: the task was interrupted by a newer message"
#: What the model is told for its last turn when a newer message interrupts the run.
INTERRUPT_NOTE = (
    "[fleet] A newer message interrupts this task: it will be handled next, with this "
    "conversation's history. Reply now, briefly, with what you have found or done so far; "
    "you cannot call tools any more."
)


def run_agent(
    model: Model,
    tools: Mapping[str, Tool],
    messages: Sequence[ChatMessage],
    *,
    max_steps: int,
    ctx: ToolContext,
    ports: RunPorts,
) -> Outcome:
    """Run to a reply; model errors and the step limit end it as ``failed``, a cancel as
    ``cancelled``, an interrupt as ``superseded`` (with the report it gave); tool failures are
    results the model sees. Raises LeaseLost (from commits)."""
    convo = list(messages)
    if ports.delegation is not None:
        tools, clash = _with_delegation(tools, ports.delegation)
        if clash is not None:
            return Outcome(TaskStatus.FAILED, None, clash, {})
    specs = [t.spec for t in tools.values()]
    steps = Steps(ports)
    replay = journal.Replay(ports.journal.replay())
    model_calls = 0
    while True:
        if model_calls >= max_steps:
            return steps.outcome(
                TaskStatus.FAILED,
                error=f"step limit reached: {max_steps} model steps without a final reply "
                "(raise max_steps in the agent's config if the task needs more)",
                error_class="step_limit",
            )
        # The boundary before a model step: what an earlier attempt delivered comes again,
        # then finished steps are stored and waiting messages taken.
        while (entry := replay.inbox()) is not None:
            steps.replay(entry)
            texts = inbox_texts(entry.output)
            steps.delivered.extend(texts)
            convo.extend(ChatMessage(role="user", content=t) for t in texts)
        signals = steps.commit(take_inbox=True)
        if signals.cancel:
            return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
        if signals.interrupt:
            return _report(model, convo, steps)
        convo.extend(ChatMessage(role="user", content=i.text) for i in signals.taken)
        model_calls += 1
        entry = replay.model()
        if entry is not None:
            msg = _message_of(entry.output)
            steps.replay(entry)
        else:
            spent = ports.budget()  # before the call, never in the middle of one
            if spent is not None:
                return steps.outcome(TaskStatus.FAILED, error=spent, error_class="budget")
            turn = _model_turn(model, convo, specs, steps)
            if isinstance(turn, Outcome):
                return turn
            msg = turn
        if not msg.tool_calls:
            return steps.outcome(TaskStatus.SUCCEEDED, reply=msg.content)
        convo.append(msg)
        skip: str | None = None
        for i, call in enumerate(msg.tool_calls):
            if skip is not None:  # calls not started when a message or an interrupt came
                text = _skip(call, steps, replay, skip)
            else:
                try:
                    text, signals = _tool_step(tools, call, ctx, steps, replay)
                except waiting.Undecided:  # a person must decide first: stop here, holding nothing
                    return _park(
                        model, tools, msg.tool_calls[i:], convo=convo, steps=steps, replay=replay
                    )
                except (
                    waiting.Parking
                ) as parking:  # a tool waits for something outside (a delegate)
                    return _park(
                        model,
                        tools,
                        msg.tool_calls[i:],
                        convo=convo,
                        steps=steps,
                        replay=replay,
                        requests=[parking.request],
                    )
                if signals.cancel:
                    return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
                if signals.interrupt:
                    skip = SKIPPED_FOR_INTERRUPT
                elif signals.waiting:
                    skip = SKIPPED_FOR_INBOX
            convo.append(
                ChatMessage(role="tool", content=text, tool_call_id=call.id, name=call.name)
            )
        if skip == SKIPPED_FOR_INTERRUPT:
            return _report(model, convo, steps)


def _model_turn(
    model: Model, convo: list[ChatMessage], specs: list[Any], steps: Steps
) -> ChatMessage | Outcome:
    """A model step's message, or how the run ends: the model failed, or the run had to stop
    (a cancel, an interrupt, a lost lease) while the call waited for model capacity."""
    try:
        msg_or_error = _call_model(model, convo, specs, steps)
    except Stopped as stopped:
        now = datetime.now(UTC)
        steps.record("model", model.name, now, time.perf_counter(), error=str(stopped))
        signals = steps.commit()  # which one (a lost lease raises LeaseLost here)
        if signals.cancel:
            return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
        if signals.interrupt:
            return _report(model, convo, steps)
        # (it waited for model capacity until it had to stop)
        return steps.outcome(
            TaskStatus.FAILED, error=f"model {model.name}: {stopped}", error_class="rate_limit"
        )
    if isinstance(msg_or_error, ModelError):
        return steps.outcome(
            TaskStatus.FAILED,
            error=f"model {model.name} failed: {msg_or_error.message}",
            error_class=error_classes.of_model(msg_or_error.status_code, msg_or_error.message),
        )
    return msg_or_error


def _with_delegation(
    tools: Mapping[str, Tool], port: Delegation
) -> tuple[Mapping[str, Tool], str | None]:
    """The agent's tools and the delegation tools (``call_agent``, ``start_agent``,
    ``signal_agent``), or why
    not: one of the agent's own tools has the name of one."""
    found = {t.name: t for t in delegation.tools(port, port.delegates)}
    clash = sorted(set(found) & set(tools))
    if clash:
        return tools, f"the agent's tool {clash[0]!r} has the name of a delegation tool; rename it"
    return {**tools, **found}, None


def _skip(
    call: ToolCall, steps: Steps, replay: journal.Replay, why: str, step: int | None = None
) -> str:
    """Record a tool call that will not run (a message arrived, or an interrupt): the model
    gets ``why`` as its result, so every call it asked for has one."""
    if step is None:
        entry = replay.tool(call.id)
        if entry is not None and entry.status == "finished":
            steps.replay(entry)
            return _as_text(entry.output)
        step = entry.step if entry is not None else steps.next_step()
    now = datetime.now(UTC)
    steps.record(
        "tool",
        call.name,
        now,
        time.perf_counter(),
        step=step,
        input=dict(call.arguments),
        output=why,
        error="skipped",
        call_id=call.id,
    )
    return why


def _report(model: Model, convo: list[ChatMessage], steps: Steps) -> Outcome:
    """Interrupted: one last model turn without tools to report, then the run ends."""
    why = "interrupted by a newer message"
    if not steps.ports.report_on_interrupt or steps.ports.budget() is not None:
        return steps.outcome(TaskStatus.SUPERSEDED, error=why)
    note = ChatMessage(role="user", content=INTERRUPT_NOTE, name="fleet_interrupt")
    steps.reporting = True  # the interrupt is what asks for this call: it must not stop it
    msg = _call_model(model, [*convo, note], [], steps)
    reply = None if isinstance(msg, ModelError) else (msg.content or None)
    return steps.outcome(TaskStatus.SUPERSEDED, reply=reply, error=why)


def _to_send(convo: list[ChatMessage], steps: Steps) -> tuple[list[ChatMessage], dict[str, Any]]:
    """What this model step sends: the conversation, cut to the token budget if it has one."""
    budget = steps.ports.context_tokens
    if budget is None:
        return convo, {"messages": len(convo)}
    tok = steps.ports.tokenizer or tokens.tokenizer()
    sent, total, cut = budget_fit(convo, budget, tok)
    step = steps.count + 1
    for record in cut:
        steps.shortened.setdefault(str(record["call_id"]), {**record, "step": step})
    return sent, {"messages": len(sent), "tokens": total, "shortened": len(cut)}


def _call_model(
    model: Model, convo: list[ChatMessage], specs: list[Any], steps: Steps
) -> ChatMessage | ModelError:
    """One model step, recorded; the message, or the error if the call failed."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    sent, seen = _to_send(convo, steps)
    with steps.ports.tracer.chat(model, sent, steps.count + 1) as span:
        try:
            resp = _complete(model, sent, specs, steps)
        except ModelError as exc:
            span.error(exc)
            steps.record("model", model.name, started, t0, input=seen, error=exc.message)
            metrics.model_call(model.name, error_classes.of_model(exc.status_code, exc.message))
            return exc
        span.response(resp)
    metrics.model_call(resp.answered_by or model.name, "ok")
    out = _dump(resp.message)
    if resp.finish_reason:
        out["finish_reason"] = resp.finish_reason
    if resp.answered_by is not None:
        out["answered_by"] = resp.answered_by
        steps.answered(resp.answered_by, resp.usage, fallback=resp.fallback)
    if resp.fallback:
        out["fallback"] = True
    if resp.waited_s:
        out["waited_s"] = resp.waited_s
    priced = resp.answered_by or model.name
    steps.record(
        "model",
        resp.model or model.name,
        started,
        t0,
        input=seen,
        output=out,
        usage=resp.usage,
        cost_micros=cost.step_micros(
            steps.ports.prices, priced, resp.usage.prompt_tokens, resp.usage.completion_tokens
        ),
    )
    return resp.message


class _Listen:
    """A streaming call's text, told to the run's deltas as it comes; the call stops as soon as
    the run must stop: at its next chunk (``Stopped`` from ``text``), or at once while it waits
    for one (``opened``: the run's stop hangs its connection up). A cancel or an interrupt
    aborts a model call in flight instead of waiting for its step to end."""

    __slots__ = ("_unhook", "aborted", "steps")

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.aborted = False
        self._unhook: Callable[[], None] | None = None

    def text(self, chunk: str) -> None:
        ports = self.steps.ports
        if not self.steps.reporting and ports.watch():
            raise Stopped("the run must stop (cancelled, interrupted or its lease lost)")
        ports.deltas.text(self.steps.count + 1, chunk)

    def reset(self) -> None:
        self.steps.ports.deltas.reset(self.steps.count + 1)

    def opened(self, abort: Abort | None) -> None:
        """The call in flight can be ended with ``abort`` (None: it is over)."""
        if self._unhook is not None:
            self._unhook()
            self._unhook = None
        if abort is not None and not self.steps.reporting:

            def stop() -> None:
                self.aborted = True
                abort()

            self._unhook = self.steps.ports.on_stop(stop)


def _complete(
    model: Model, sent: list[ChatMessage], specs: list[Any], steps: Steps
) -> ModelResponse:
    """One model call (streamed when the model streams: ``_Listen``)."""
    if not streams(model):
        return _managed(model, sent, specs, steps)
    try:
        return _managed(model, sent, specs, steps, listen=_Listen(steps))
    finally:
        steps.ports.deltas.end(steps.count + 1)


def _managed(
    model: Model,
    sent: list[ChatMessage],
    specs: list[Any],
    steps: Steps,
    **listen: _Listen,
) -> ModelResponse:
    """One model call; a managed model's waits for capacity are shown as ``wait`` steps,
    committed as they begin (the trace and the task's events show them while they last)."""
    if not isinstance(model, ManagedModel):
        return model.complete(sent, specs, **listen)

    def waiting(wait: Wait, name: str) -> Callable[[float], None]:
        started, step = datetime.now(UTC), steps.next_step()
        shown: dict[str, Any] = {
            "input": {"model": name, "limit": wait.limit, "reason": wait.reason},
            "output": {
                "text": waiting_text(wait.limit, wait.seconds, wait.reason),
                "seconds": round(wait.seconds, 3),
            },
        }
        steps.record("wait", "model capacity", started, time.perf_counter(), step=step, **shown)
        steps.commit()

        def ended(seconds: float) -> None:
            # The same step again, with how long the wait lasted: stored (in place) with the
            # next step's commit.
            steps.record(
                "wait", "model capacity", started, 0.0, step=step, duration_s=seconds, **shown
            )

        return ended

    return model.complete(sent, specs, waiting=waiting, stop=steps.ports.watch, **listen)


def _tool_step(
    tools: Mapping[str, Tool],
    call: ToolCall,
    ctx: ToolContext,
    steps: Steps,
    replay: journal.Replay,
) -> tuple[str, Signals]:
    """The result text of one tool call (replayed, reported, run or skipped) and what the
    boundary before it, or a stop during it, said (cancel, interrupt, waiting messages)."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    args = {**call.arguments, "_meta": {"labels": dict(ctx.labels), "task": ctx.task_id}}
    tool = tools.get(call.name)
    entry = replay.tool(call.id)
    action = journal.tool_action(entry, tool.retry if tool is not None else "safe")
    if action == "replay":
        assert entry is not None
        steps.replay(entry)
        return _as_text(entry.output), Signals()
    step = entry.step if entry is not None else steps.next_step()

    def record(output: str, error: str | None, since: float) -> None:
        steps.record(
            "tool",
            call.name,
            started,
            since,
            step=step,
            input=args,
            output=output,
            error=error,
            call_id=call.id,
        )

    if action == "unknown":
        steps.ports.tracer.unknown(call, step)
        record(journal.UNKNOWN_RESULT, "in flight when its worker was lost", t0)
        return journal.UNKNOWN_RESULT, Signals()
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        text = f"error: no tool named {call.name!r} (available: {known})"
        with steps.ports.tracer.tool(call, step) as span:
            span.fail("tool_not_found", text)
        record(text, text, t0)
        return text, Signals()
    call_args = dict(call.arguments)
    if tool.approval and steps.ports.waits is None:
        record(waiting.NO_APPROVALS, waiting.NO_APPROVALS, t0)
        return waiting.NO_APPROVALS, Signals()
    if tool.approval:  # runs only once a person approved it, with the arguments they saw
        decided = waiting.decision(call, steps)
        if not decided.runs:
            text = waits.refused_result(call.name, decided)
            record(text, decided.status, t0)
            return text, Signals()
        call_args = dict(decided.arguments)
        args = {**call_args, "_meta": args["_meta"]}
    # Finished steps are stored before this one begins; an unsafe call is journaled as
    # started first, so a retry knows it may have had its effect.
    marker = (
        [TraceRow(step, "tool", call.name, args, None, None, {}, started, 0.0, "started", call.id)]
        if tool.retry == "unsafe"
        else []
    )
    before = steps.commit(marker)
    if before.cancel:
        return "", before
    if before.interrupt or before.waiting:
        why = SKIPPED_FOR_INTERRUPT if before.interrupt else SKIPPED_FOR_INBOX
        return _skip(call, steps, replay, why, step), before
    t0 = time.perf_counter()
    with steps.ports.tracer.tool(call, step) as span:
        result = executor.call(
            tool,
            call_args,
            dataclasses.replace(ctx, call_id=call.id),
            timeout_s=steps.ports.timeout_of(tool),
            watch=steps.ports.watch,
        )
        span.result(result)
    if result.wait is not None:  # nothing is journaled: the call runs again on the resume
        raise waiting.Parking(result.wait)
    record(result.text, result.error, t0)
    if result.stopped:  # the watch saw a cancel, an interrupt or a lost lease: which?
        return result.text, steps.commit()
    return result.text, Signals()


def _park(
    model: Model,
    tools: Mapping[str, Tool],
    calls: Sequence[ToolCall],
    *,
    convo: list[ChatMessage],
    steps: Steps,
    replay: journal.Replay,
    requests: list[waits.Request] | None = None,
) -> Outcome:
    """Stop the run to wait: for ``requests`` (a tool's), else for approvals: one for each call
    of the step from the first undecided one on that needs one (each its own; the calls after
    it run when the run resumes, in order). The finished steps are stored first; a cancel or
    an interrupt that came meanwhile ends the run instead."""
    if requests is None:
        requests = waiting.approvals(tools, calls, steps)
    else:
        waiting.record(requests, steps)
    signals = steps.commit()
    if signals.cancel:
        return steps.outcome(TaskStatus.CANCELLED, error="cancelled by request")
    if signals.interrupt:
        for call in calls:
            text = _skip(call, steps, replay, SKIPPED_FOR_INTERRUPT, steps.next_step())
            convo.append(
                ChatMessage(role="tool", content=text, tool_call_id=call.id, name=call.name)
            )
        return _report(model, convo, steps)
    return steps.outcome(TaskStatus.WAITING, waits=tuple(requests))


def _message_of(output: Any) -> ChatMessage:
    """The assistant message a journaled model step produced."""
    out = output if isinstance(output, dict) else {}
    calls = tuple(
        ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=c.get("arguments") or {})
        for c in out.get("tool_calls") or ()
    )
    return ChatMessage(role="assistant", content=out.get("content") or "", tool_calls=calls)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _dump(msg: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": json.loads(json.dumps(c.arguments))}
            for c in msg.tool_calls
        ]
    return out
