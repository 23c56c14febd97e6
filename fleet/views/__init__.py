"""How tasks, messages and runs look to users: one JSON shape for CLI `--json` and the API."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic.alias_generators import to_camel

from fleet.constants import RECENT_SHOWN
from fleet.domain import delivery, event_waits, redaction
from fleet.domain.cost import money
from fleet.domain.deltas import Delta
from fleet.domain.events import TaskEvent
from fleet.domain.lifecycle import fresh_notice
from fleet.domain.values import Admission, Message, Run, Step, Task, TaskStatus
from fleet.domain.waits import Wait


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat().replace("+00:00", "Z")


def task_json(task: Task) -> dict[str, Any]:
    return {
        "id": str(task.id),
        "deployment": task.deployment,
        "status": task.status.value,
        "conversation": task.conversation,
        "seq": task.seq,
        "input": [p.model_dump() for p in task.input],
        "submissions": task.submissions,
        "labels": task.labels,
        "idempotencyKey": task.idempotency_key,
        "attempts": task.attempts,
        "maxAttempts": task.max_attempts,
        "cancelRequested": task.cancel_requested,
        "createdAt": iso(task.created_at),
        "notBefore": iso(task.not_before),
        "startedAt": iso(task.started_at),
        "finishedAt": iso(task.finished_at),
        "reply": task.reply,
        "error": task.error,
        "errorClass": task.error_class,
    }


def delivery_json(rec: delivery.Record) -> dict[str, Any]:
    """A reply delivery and its journal (every attempt)."""
    return {
        "id": str(rec.id),
        "target": rec.target,
        "kind": rec.kind,
        # (rows stored before URLs were shortened and redacted are shown the same way)
        "url": None if rec.url is None else redaction.DEFAULT.text(delivery.shown_url(rec.url)),
        "status": rec.status,
        "attempts": rec.attempts,
        "maxAttempts": rec.max_attempts,
        "nextAttemptAt": iso(rec.next_at) if rec.status == "pending" else None,
        "error": rec.error,
        "journal": list(rec.journal),
        "createdAt": iso(rec.created_at),
        "updatedAt": iso(rec.updated_at),
    }


def task_with_deliveries(
    task: Task, deliveries: Iterable[delivery.Record], waits: Iterable[Wait] = ()
) -> dict[str, Any]:
    """GetTask and ``fleet tasks show``: the task, where its reply was delivered and what it
    waits for (``waits``: its pending ones; the approvals among them also as
    ``pendingApprovals``)."""
    pending = [w for w in waits if w.status == "pending"]
    return {
        **task_json(task),
        "deliveries": [delivery_json(d) for d in deliveries],
        "pendingApprovals": [approval_json(w) for w in pending if w.kind == "approval"],
        "waitingFor": [waiting_json(w) for w in pending],
    }


def waiting_json(wait: Wait) -> dict[str, Any]:
    """One thing a waiting task waits for: a person's approval of a call, a delegated task,
    a pause's end, an event of a name and key; until when."""
    return {
        "id": wait.id,
        "kind": wait.kind,
        "tool": wait.tool,
        "event": wait.event,
        "key": wait.event_key,
        "taskId": wait.target_task_id,
        "expiresAt": iso(wait.expires_at),
        "text": waiting_text(wait),
    }


def waiting_text(wait: Wait) -> str:
    """``waiting for event payment.cleared (key o-1) until …`` (the CLI, the UI, A2A)."""
    if wait.kind == "event":
        return event_waits.waiting_text(wait.event or "", wait.event_key or "", wait.expires_at)
    until = wait.expires_at.isoformat(timespec="seconds")
    if wait.kind == "approval":
        return f"waiting for a person's approval of {wait.tool} until {until}"
    if wait.kind == "delegate":
        return f"waiting for task {wait.target_task_id} until {until}"
    return f"paused until {until}"


def approval_json(wait: Wait) -> dict[str, Any]:
    """One approval: the call as the model gave it (stored, after redaction: ``redacted`` says
    whether that changed it), its deadline and, once decided, who decided and why."""
    return {
        "id": wait.id,
        "taskId": wait.task_id,
        "tool": wait.tool,
        "arguments": wait.arguments,
        "redacted": wait.redacted,
        "status": wait.status,
        "requestedAt": iso(wait.requested_at),
        "expiresAt": iso(wait.expires_at),
        "decidedBy": wait.decided_by,
        "reason": wait.reason,
        "decidedAt": iso(wait.decided_at),
    }


def sent_json(sent: event_waits.Sent) -> dict[str, Any]:
    """SendEvent's answer: the event (a repeat: the first one) and the waits it resolved."""
    ev = sent.event
    return {
        "id": ev.id,
        "event": ev.name,
        "key": ev.key,
        "tenant": ev.tenant,
        "resolved": sent.resolved,
        "duplicate": sent.duplicate,
        "receivedAt": iso(ev.received_at),
    }


def admission_json(adm: Admission) -> dict[str, Any]:
    out = task_json(adm.task)
    out["mergedInto"] = str(adm.merged_into) if adm.merged_into else None
    out["duplicate"] = adm.duplicate
    out["deliveredTo"] = adm.delivered_to
    out["dropped"] = str(adm.dropped) if adm.dropped else None
    out["interrupted"] = str(adm.interrupted) if adm.interrupted else None
    if adm.fresh_after_delete is not None:
        out["freshAfterDelete"] = iso(adm.fresh_after_delete)
        out["notice"] = fresh_notice(out["conversation"], adm.fresh_after_delete)
    return out


def message_json(msg: Message) -> dict[str, Any]:
    return {
        "id": msg.id,
        "role": msg.role,
        "content": msg.content,
        "taskId": str(msg.task_id) if msg.task_id else None,
        "runId": str(msg.run_id) if msg.run_id else None,
        "delivery": msg.delivery,
        "createdAt": iso(msg.created_at),
    }


def run_json(
    run: Run, steps: Iterable[Step] | None = None, *, messages: bool = False
) -> dict[str, Any]:
    """A run; ``steps`` (GetRun) adds its recorded steps, ``messages`` its frozen prompt."""
    usage = run.usage
    out: dict[str, Any] = {
        "id": str(run.id),
        "taskId": str(run.task_id),
        "attempt": run.attempt,
        "worker": run.worker,
        "release": run.release,
        "status": run.status,
        "model": run.model,
        "startedAt": iso(run.started_at),
        "finishedAt": iso(run.finished_at),
        "error": run.error,
        "usage": {
            "promptTokens": usage.get("prompt_tokens", 0),
            "completionTokens": usage.get("completion_tokens", 0),
            "totalTokens": usage.get("total_tokens", 0),
            "steps": usage.get("steps", 0),
            "cost": money(usage.get("cost_micros")),
        },
        "replayedSteps": [int(n) for n in run.details.get("replayed") or ()],
        "shortened": [
            {
                "callId": r.get("call_id"),
                "tool": r.get("tool"),
                "step": r.get("step"),
                "tokens": r.get("tokens"),
                "kept": r.get("kept"),
            }
            for r in run.details.get("shortened") or ()
        ],
        "context": context_json(run.context, messages=messages),
        "models": [
            {
                "model": name,
                "calls": seen.get("calls", 0),
                "promptTokens": seen.get("prompt_tokens", 0),
                "completionTokens": seen.get("completion_tokens", 0),
                "fallback": bool(seen.get("fallback", 0)),
            }
            for name, seen in (run.details.get("models") or {}).items()
        ],
    }
    if steps is not None:
        out["steps"] = [step_json(st) for st in steps]
    return out


def context_json(frozen: dict[str, Any], *, messages: bool = False) -> dict[str, Any]:
    """The provenance of a run's frozen context (and, asked for, the prompt's messages)."""
    injected = [_ref(r) for r in frozen.get("injected") or ()]
    out: dict[str, Any] = {
        "limits": {to_camel(k): v for k, v in (frozen.get("limits") or {}).items()},
        "recent": {"count": len(injected), "items": injected[-RECENT_SHOWN:]},
        "injected": injected,
        "injectedBytes": frozen.get("injected_bytes", 0),
        "injectedTokens": frozen.get("injected_tokens"),
        "tokenizer": frozen.get("tokenizer"),
        "dropped": [_ref(r) for r in frozen.get("dropped") or ()],
        "olderUnseen": bool(frozen.get("older_unseen", False)),
    }
    if frozen.get("memory"):
        out["memory"] = _camel_keys(frozen["memory"])
    if frozen.get("recall"):
        out["recall"] = _camel_keys(frozen["recall"])
    if frozen.get("agent"):
        out["agent"] = dict(frozen["agent"])
    if messages:
        out["messages"] = list(frozen.get("messages") or ())
    return out


def _ref(record: dict[str, Any]) -> dict[str, Any]:
    """A message the context injected or dropped (``reason`` for dropped ones; ``tokens`` when
    a token budget priced it)."""
    out = {k: record.get(k) for k in ("id", "seq", "role", "bytes", "preview")}
    for optional in ("tokens", "reason", "delivery"):
        if optional in record:
            out[optional] = record[optional]
    return out


def step_json(step: Step) -> dict[str, Any]:
    """One model or tool step: what went in, what came out, how long it took."""
    out: dict[str, Any] = {
        "step": step.step,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "replayed": step.replayed,
        "startedAt": iso(step.started_at),
        "durationMs": step.duration_ms,
        "error": step.error,
        "model": None,
        "tool": None,
        "wait": None,
    }
    if step.kind == "model":
        output = step.output if isinstance(step.output, dict) else {}
        sent = step.input.get("messages") if isinstance(step.input, dict) else None
        out["model"] = {
            "tokens": {
                "prompt": step.usage.get("prompt_tokens", 0),
                "completion": step.usage.get("completion_tokens", 0),
            },
            "finishReason": output.get("finish_reason"),
            "messages": sent if isinstance(sent, int) else None,
            "content": output.get("content"),
            "toolCalls": [
                {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
                for c in output.get("tool_calls") or ()
                if isinstance(c, dict)
            ],
            "cost": money(step.usage.get("cost_micros")),
            "answeredBy": output.get("answered_by"),
            "fallback": bool(output.get("fallback", False)),
            "waitedS": output.get("waited_s"),
        }
    elif step.kind == "wait":
        args = step.input if isinstance(step.input, dict) else {}
        shown = step.output if isinstance(step.output, dict) else {}
        out["wait"] = {
            "text": shown.get("text"),
            "seconds": shown.get("seconds"),
            "limit": args.get("limit"),
            "reason": args.get("reason"),
            "model": args.get("model"),
        }
    else:
        args = step.input
        if isinstance(args, dict):  # ``_meta`` (labels, task id) is fleet's, not the model's
            args = {k: v for k, v in args.items() if k != "_meta"}
        out["tool"] = {"callId": step.call_id, "arguments": args, "result": step.output}
    return out


def _camel_keys(value: Any) -> Any:
    """A provenance record with camelCase keys, as the rest of the API speaks."""
    if isinstance(value, dict):
        return {to_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def delta_json(delta: Delta) -> dict[str, Any]:
    """The data of a ``delta`` event: a piece of a model step's text."""
    out: dict[str, Any] = {
        "text": delta.text,
        "runId": delta.run_id,
        "attempt": delta.position.attempt,
        "step": delta.position.step,
    }
    if delta.reset:
        out["reset"] = True
    return out


def event_json(event: TaskEvent) -> dict[str, Any]:
    """The data of one task event (``StreamTaskEvents``, ``fleet run``'s live view)."""
    run = event.run
    out: dict[str, Any] = {
        "taskId": str(event.task.id),
        "attempt": run.attempt if run is not None else 0,
        "runId": str(run.id) if run is not None else None,
    }
    if event.kind == "status":
        assert event.status is not None
        out.update(status=event.status.value, at=iso(event.at), error=event.error)
        if event.status == TaskStatus.RUNNING and run is not None:
            out.update(worker=run.worker, model=run.model)
    elif event.kind in ("step", "inbox"):
        assert event.step is not None
        out.update(step_json(event.step))
    elif event.kind == "reply":
        out["reply"] = event.task.reply
    else:  # end
        out["task"] = task_json(event.task)
    return out
