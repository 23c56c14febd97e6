"""Reading runs back (ListTaskRuns, GetRun, `tasks show`): store reads on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from pydantic import ValidationError

from fleet import views
from fleet.domain import context
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import NotFound
from fleet.store import Claim, Prepared, Started, Store
from tests.integration.test_store import T0, items, sub

HISTORY = (  # three turns of one message each
    context.Record(4, "assistant", "echo: b [history: 2]", seq=3),
    context.Record(3, "user", "x" * 500, seq=2),
    context.Record(2, "assistant", "echo: a [history: 0]", seq=1),
)


def prepare(claim: Claim) -> Prepared:
    """A context with provenance as the runner records it: one injected, one oversized, one
    past the byte budget, older messages unseen."""
    sel = context.select(HISTORY, max_items=3, max_bytes=30, more_exist=True)
    frozen = {
        "messages": [{"role": "user", "content": "the prompt"}],
        **context.provenance(sel, max_items=3, max_bytes=30),
    }
    return Prepared(claim.frozen_context or frozen, "echo")


def start(store: Store, conv: uuid.UUID, worker: str) -> Started:
    result = store.start_next(conv, worker, T0, history_items=items, prepare=prepare)
    assert isinstance(result, Started)
    return result


def row(step: int, kind: str, name: str, **kw: object) -> TraceRow:
    fields: dict = {
        "input": None,
        "output": None,
        "error": None,
        "usage": {},
        "started_at": T0 + timedelta(seconds=step),
        "duration_ms": 1.5 * step,
        **kw,
    }
    return TraceRow(step, kind, name, **fields)


MODEL_CALL = row(
    1,
    "model",
    "echo",
    input={"messages": 3},
    output={
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": {"order": 7}}],
        "finish_reason": "tool_calls",
    },
    usage={"prompt_tokens": 12, "completion_tokens": 5},
)
TOOL_CALL = row(
    2,
    "tool",
    "lookup",
    input={"order": 7, "_meta": {"labels": {}, "task": "t"}},
    output="[bold]shipped[/bold]",
    call_id="call_1",
)


def test_runs_and_their_steps_read_back_in_order(store: Store) -> None:
    task = store.admit(sub("hello"), T0).task
    first = start(store, task.conversation_id, "host:1")
    # the tool call is journaled as started, then the worker is lost mid-call
    store.checkpoint(first.task, first.run_id, [MODEL_CALL], T0)
    in_flight = row(2, "tool", "lookup", input=TOOL_CALL.input, status="started", call_id="call_1")
    store.checkpoint(first.task, first.run_id, [in_flight], T0)
    store.recover(task.id, first.task.fence, "worker lost", T0)
    second = start(store, task.conversation_id, "host:2")
    replayed = [dataclasses.replace(MODEL_CALL, replayed=True)]
    final = row(3, "model", "echo", output={"content": "done", "finish_reason": "stop"})
    # stored out of step order: reads come back ordered by step
    store.checkpoint(second.task, second.run_id, [TOOL_CALL], T0)
    outcome = Outcome(
        TaskStatus.SUCCEEDED,
        "done",
        None,
        {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29, "steps": 3},
        traces=[*replayed, final],
        details={
            "replayed": [1],
            "shortened": [
                {"call_id": "call_1", "tool": "lookup", "tokens": 900, "kept": 64, "step": 3}
            ],
        },
    )
    store.settle(second.task, second.run_id, outcome, T0 + timedelta(seconds=5))

    runs = store.list_runs(task.id)
    assert [(r.attempt, r.status, r.worker) for r in runs] == [
        (1, "interrupted", "host:1"),
        (2, "succeeded", "host:2"),
    ]
    assert runs[1].details["replayed"] == [1] and runs[1].usage["total_tokens"] == 29
    assert views.run_json(runs[1])["shortened"] == [
        {"callId": "call_1", "tool": "lookup", "step": 3, "tokens": 900, "kept": 64}
    ]
    assert views.run_json(runs[1])["replayedSteps"] == [1]
    assert runs[0].error == "worker lost" and runs[0].finished_at is not None
    with pytest.raises(ValidationError):
        runs[0].status = "succeeded"  # type: ignore[misc]  # frozen values

    lost = store.get_run(first.run_id)
    assert [(s.step, s.kind, s.status) for s in lost.steps] == [
        (1, "model", "finished"),
        (2, "tool", "started"),
    ]
    done = store.get_run(second.run_id)
    assert done.run == runs[1]
    assert [(s.step, s.name, s.replayed) for s in done.steps] == [
        (1, "echo", True),
        (2, "lookup", False),
        (3, "echo", False),
    ]
    assert done.steps[1].output == "[bold]shipped[/bold]" and done.steps[1].call_id == "call_1"
    assert done.steps[0].usage == {"prompt_tokens": 12, "completion_tokens": 5}


def test_run_json_shows_provenance_usage_and_steps(store: Store) -> None:
    task = store.admit(sub("hello"), T0).task
    started = start(store, task.conversation_id, "host:1")
    store.checkpoint(started.task, started.run_id, [MODEL_CALL, TOOL_CALL], T0)
    outcome = Outcome(TaskStatus.SUCCEEDED, "done", None, {"total_tokens": 17, "steps": 2})
    store.settle(started.task, started.run_id, outcome, T0)
    detail = store.get_run(started.run_id)

    listed = views.run_json(store.list_runs(task.id)[0])
    assert "steps" not in listed and "messages" not in listed["context"]
    body = views.run_json(detail.run, detail.steps, messages=True)
    assert {k: body[k] for k in ("id", "taskId", "attempt", "worker", "status", "model")} == {
        "id": str(started.run_id),
        "taskId": str(task.id),
        "attempt": 1,
        "worker": "host:1",
        "status": "succeeded",
        "model": "echo",
    }
    assert body["usage"] == {
        "promptTokens": 0,
        "completionTokens": 0,
        "totalTokens": 17,
        "steps": 2,
        "cost": None,  # no model of the run is priced
    }
    assert body["replayedSteps"] == [] and body["shortened"] == []
    ctx = body["context"]
    assert ctx["limits"] == {"maxItems": 3, "maxBytes": 30}
    assert ctx["injectedTokens"] is None and ctx["tokenizer"] is None
    assert [(m["id"], m["role"], m["bytes"]) for m in ctx["injected"]] == [(4, "assistant", 20)]
    assert [(m["id"], m["reason"]) for m in ctx["dropped"]] == [(3, "oversized"), (2, "byte_limit")]
    assert ctx["olderUnseen"] is True and ctx["injectedBytes"] == 20
    assert ctx["messages"] == [{"role": "user", "content": "the prompt"}]
    model, tool = body["steps"]
    assert model["model"] == {
        "tokens": {"prompt": 12, "completion": 5},
        "finishReason": "tool_calls",
        "messages": 3,
        "content": "",
        "toolCalls": [{"id": "call_1", "name": "lookup", "arguments": {"order": 7}}],
        "cost": None,
        "answeredBy": None,  # fleet did not manage the call (no model limit, no fallbacks)
        "fallback": False,
        "waitedS": None,
    }
    assert body["models"] == []
    assert model["tool"] is None and model["durationMs"] == 1.5
    assert tool["tool"] == {
        "callId": "call_1",
        "arguments": {"order": 7},  # fleet's _meta is not the model's
        "result": "[bold]shipped[/bold]",
    }
    assert (tool["status"], tool["replayed"], tool["error"]) == ("finished", False, None)


def test_runs_of_another_scope_are_not_found(store: Store) -> None:
    task = store.admit(sub("a", scope="webhook:gh"), T0).task
    started = start(store, task.conversation_id, "w")
    assert [r.id for r in store.list_runs(task.id, scope="webhook:gh")] == [started.run_id]
    assert store.get_run(started.run_id, scope="webhook:gh").run.id == started.run_id
    with pytest.raises(NotFound, match="no task with id"):
        store.list_runs(task.id, scope="api")
    with pytest.raises(NotFound, match="no run with id"):
        store.get_run(started.run_id, scope="api")
    with pytest.raises(NotFound, match="no run with id"):
        store.get_run(uuid.uuid4())
    with pytest.raises(NotFound):
        store.list_runs(uuid.uuid4())
    queued = store.admit(sub("b", key="other"), T0).task
    assert store.list_runs(queued.id) == []
