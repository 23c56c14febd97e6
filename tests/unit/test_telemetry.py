"""Tracing: GenAI spans for runs, model calls and tool calls, checked with the SDK's exporters.

The runner is driven with the OpenTelemetry tracer on an in-memory exporter; the dispatcher on
embedded SQLite through the process hook; and a real ``fleet run`` subprocess exports OTLP/HTTP
to a small receiver on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fleet.agents import telemetry
from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, ToolSpec, Usage
from fleet.agents.models.echo import EchoModel
from fleet.agents.otel import OtelTracer, run_error_type, tool_error_type
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import Tool, ToolContext
from fleet.agents.tools.builtin import BUILTIN_TOOLS
from fleet.agents.tools.executor import CallResult
from fleet.config import AgentConfig, ModelConfig, Settings
from fleet.dispatch.embedded import run_until_done
from fleet.domain.redaction import REDACTED, Redactor
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import Task, TaskStatus, TextPart
from fleet.errors import ModelError
from fleet.runtime import build
from tests.conftest import write_config
from tests.support.otlp import Receiver, otlp_receiver

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
LABELS = {"team": "search", "tier": "gold"}
REPO = Path(__file__).resolve().parents[2]


# -- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    prov = TracerProvider(shutdown_on_exit=False)
    prov.add_span_processor(SimpleSpanProcessor(exporter))
    yield prov
    prov.shutdown()


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No OTEL_* variable of the calling shell leaks in; the process decision starts fresh."""
    for var in list(os.environ):
        if var.startswith("OTEL_"):
            monkeypatch.delenv(var)
    telemetry.reset()
    yield
    telemetry.reset()


def a_task(attempts: int = 1) -> Task:
    now = datetime.now(UTC)
    return Task(
        id=uuid.uuid4(),
        deployment="support",
        conversation_id=uuid.uuid4(),
        scope="api",
        key="ticket-1",
        seq=1,
        status=TaskStatus.RUNNING,
        input=(TextPart(text="hi"),),
        not_before=now,
        labels=LABELS,
        attempts=attempts,
        max_attempts=3,
        created_at=now,
    )


AGENT = AgentConfig(name="support", model=ModelConfig(provider="echo"))


def traced_run(
    tracer: telemetry.Tracer,
    model: Any,
    tools: dict[str, Tool],
    text: str,
    *,
    task: Task | None = None,
    journal: MemoryJournal | None = None,
    redactor: Redactor | None = None,
) -> Outcome:
    """One run through the runner, inside a run span, as the dispatcher opens it."""
    task = task or a_task()
    messages = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content=text),
    ]
    ctx = ToolContext(task_id=str(task.id), run_id="run-1", labels=task.labels)
    ports = RunPorts(journal=journal or MemoryJournal(), tracer=tracer)
    with tracer.run(task, uuid.uuid4(), AGENT, redactor) as span:
        outcome = run_agent(model, tools, messages, max_steps=4, ctx=ctx, ports=ports)
        span.outcome(outcome)
    return outcome


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        found.setdefault(s.name, []).append(s)
    return found


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return {
        k: (tuple(v) if isinstance(v, Sequence) and not isinstance(v, str) else v)
        for k, v in (span.attributes or {}).items()
    }


def the_run(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    return run


class Scripted:
    """A remote-looking model that plays back responses; an exception in the script is raised."""

    provider = "openai"
    name = "openai:gpt-4o-mini"
    model = "gpt-4o-mini"

    def __init__(self, script: list[ChatMessage | Exception]) -> None:
        self.script = list(script)

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return ModelResponse(
            message=step,
            model="gpt-4o-mini-2024-07-18",
            usage=Usage(prompt_tokens=11, completion_tokens=5),
            finish_reason="tool_calls" if step.tool_calls else "stop",
        )


def failing_tool(name: str = "lookup_order") -> Tool:
    def fn(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("order database is down")

    return Tool(name=name, description="looks up an order", parameters={}, fn=fn, retry="safe")


# -- the span tree of one run ----------------------------------------------------------------------


def test_a_run_is_a_span_with_a_child_per_model_call_and_tool_call(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    task = a_task()
    out = traced_run(
        OtelTracer.of(provider), EchoModel(), dict(BUILTIN_TOOLS), "/tool current_time", task=task
    )
    assert out.status == TaskStatus.SUCCEEDED

    spans = exporter.get_finished_spans()
    # finished in this order: the first model call, the tool call, the final model call, the run
    assert [s.name for s in spans] == [
        "chat echo",
        "execute_tool current_time",
        "chat echo",
        "invoke_agent support",
    ]
    run = the_run(spans)
    assert run.parent is None
    assert {s.parent.span_id for s in spans if s is not run if s.parent} == {run.context.span_id}
    assert all(s.parent is not None for s in spans if s is not run)
    assert len({s.context.trace_id for s in spans}) == 1

    assert run.kind == SpanKind.INTERNAL
    assert run.status.status_code == StatusCode.UNSET
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support",
        "gen_ai.provider.name": "echo",
        "gen_ai.request.model": "echo",
        "gen_ai.conversation.id": str(task.conversation_id),
        "fleet.task.id": str(task.id),
        "fleet.run.id": attrs(run)["fleet.run.id"],
        "fleet.run.attempt": 1,
        "fleet.conversation.id": str(task.conversation_id),
        "fleet.deployment": "support",
        "fleet.label.team": "search",
        "fleet.label.tier": "gold",
        "fleet.run.status": "succeeded",
        "gen_ai.usage.input_tokens": out.usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": out.usage["completion_tokens"],
        "fleet.run.steps": 3,
    }
    uuid.UUID(attrs(run)["fleet.run.id"])

    first, tool, final = spans[0], spans[1], spans[2]
    assert first.kind == final.kind == SpanKind.INTERNAL  # echo runs in this process
    assert attrs(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "echo",
        "gen_ai.request.model": "echo",
        "gen_ai.conversation.id": str(task.conversation_id),
        "fleet.step": 1,
        "gen_ai.response.model": "echo",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 4,
        "gen_ai.usage.output_tokens": 5,
    }
    assert attrs(final)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs(final)["fleet.step"] == 3
    assert (
        attrs(first)["gen_ai.usage.input_tokens"] + attrs(final)["gen_ai.usage.input_tokens"]
        == out.usage["prompt_tokens"]
    )
    assert tool.kind == SpanKind.INTERNAL
    assert attrs(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "current_time",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "fleet.step": 2,
    }
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)
    assert [e.name for s in spans for e in s.events] == []


def test_every_attribute_and_event_a_run_carries_is_documented(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    page = (REPO / "docs" / "ops" / "tracing.md").read_text()
    traced_run(
        OtelTracer.of(provider),
        EchoModel(),
        dict(BUILTIN_TOOLS),
        "/tool current_time",
        task=a_task(attempts=2),
        journal=MemoryJournal(previous=first_attempt()[:1]),
    )
    spans = exporter.get_finished_spans()
    keys = {k for s in spans for k in attrs(s)}
    keys |= {e.name for s in spans for e in s.events}
    keys |= {s.name.split(" ")[0] for s in spans}
    assert "fleet.step.replayed" in keys
    documented = {k for k in keys if f"`{k}`" in page or f"`{k} " in page}
    documented |= {
        k for k in keys if k.startswith("fleet.label.") and "`fleet.label.<key>`" in page
    }
    assert keys - documented == set()


def test_contents_are_not_recorded_by_default(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    traced_run(OtelTracer.of(provider), EchoModel(), dict(BUILTIN_TOOLS), "/tool current_time")
    for span in exporter.get_finished_spans():
        keys = set(attrs(span))
        assert not keys & {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        }
        assert "/tool" not in json.dumps(attrs(span), default=str)


def test_contents_are_recorded_redacted_when_opted_in(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    traced_run(
        OtelTracer.of(provider, capture_content=True),
        EchoModel(),
        dict(BUILTIN_TOOLS),
        f'/tool current_time {{"key": "{SECRET}"}}',
        redactor=Redactor(),
    )
    spans = by_name(exporter.get_finished_spans())
    first = attrs(spans["chat echo"][0])
    sent = json.loads(first["gen_ai.input.messages"])
    assert sent[0] == {"role": "system", "parts": [{"type": "text", "content": "be brief"}]}
    assert sent[1]["role"] == "user"
    assert REDACTED in sent[1]["parts"][0]["content"]
    (answer,) = json.loads(first["gen_ai.output.messages"])
    assert answer["finish_reason"] == "tool_calls"
    assert answer["parts"][0]["type"] == "tool_call"
    assert answer["parts"][0]["name"] == "current_time"
    tool = attrs(spans["execute_tool current_time"][0])
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"key": REDACTED}
    assert "gen_ai.tool.call.result" in tool
    final_input = json.loads(attrs(spans["chat echo"][1])["gen_ai.input.messages"])
    assert final_input[-1]["parts"][0]["type"] == "tool_call_response"
    everything = json.dumps([attrs(s) for s in exporter.get_finished_spans()], default=str)
    assert SECRET not in everything


# -- failures --------------------------------------------------------------------------------------


def test_a_failing_model_call_is_an_error_span_and_fails_the_run(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = Scripted([ModelError("openai:gpt-4o-mini: rate limited (429)", status_code=429)])
    out = traced_run(OtelTracer.of(provider), model, {}, "hello")
    assert out.status == TaskStatus.FAILED

    spans = exporter.get_finished_spans()
    chat, run = spans
    assert chat.name == "chat gpt-4o-mini"
    assert chat.kind == SpanKind.CLIENT  # a remote provider
    assert chat.status.status_code == StatusCode.ERROR
    assert "rate limited" in (chat.status.description or "")
    assert attrs(chat)["error.type"] == "429"
    assert attrs(chat)["gen_ai.provider.name"] == "openai"
    assert [e.name for e in chat.events] == ["exception"]
    assert run.status.status_code == StatusCode.ERROR
    assert attrs(run)["error.type"] == "model_error"
    assert attrs(run)["fleet.run.status"] == "failed"


def test_a_failing_tool_is_an_error_span_and_the_run_goes_on(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    call = ToolCall(id="call_9", name="lookup_order", arguments={"order": 1234})
    model = Scripted(
        [
            ChatMessage(role="assistant", tool_calls=(call,)),
            ChatMessage(role="assistant", content="sorry, try later"),
        ]
    )
    out = traced_run(OtelTracer.of(provider), model, {"lookup_order": failing_tool()}, "where?")
    assert out.status == TaskStatus.SUCCEEDED

    spans = by_name(exporter.get_finished_spans())
    (tool,) = spans["execute_tool lookup_order"]
    assert tool.status.status_code == StatusCode.ERROR
    assert attrs(tool)["error.type"] == "RuntimeError"
    assert "order database is down" in (tool.status.description or "")
    assert attrs(tool)["gen_ai.tool.call.id"] == "call_9"
    assert [s.attributes["gen_ai.response.model"] for s in spans["chat gpt-4o-mini"]] == [
        "gpt-4o-mini-2024-07-18"
    ] * 2
    run = the_run(exporter.get_finished_spans())
    assert run.status.status_code == StatusCode.UNSET


def test_a_call_of_a_tool_the_agent_lacks_is_an_error_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    call = ToolCall(id="call_1", name="nope", arguments={})
    model = Scripted(
        [ChatMessage(role="assistant", tool_calls=(call,)), ChatMessage(role="assistant")]
    )
    traced_run(OtelTracer.of(provider), model, {}, "hi")
    (tool,) = by_name(exporter.get_finished_spans())["execute_tool nope"]
    assert tool.status.status_code == StatusCode.ERROR
    assert attrs(tool)["error.type"] == "tool_not_found"


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        (CallResult("error: the tool timed out after 2s", "timed out after 2s"), "timeout"),
        (CallResult("error: the tool raised KeyError: 'x'", "KeyError: 'x'"), "KeyError"),
        (
            CallResult("error: invalid arguments for t: x", "invalid arguments for t: x"),
            "tool_error",
        ),
        (CallResult("stopped: the run is stopping", "stopped", stopped=True), "cancelled"),
    ],
)
def test_tool_error_types(result: CallResult, kind: str) -> None:
    assert tool_error_type(result) == kind


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("step limit reached: 8 model steps without a final reply (…)", "step_limit"),
        ("model openai:gpt-4o-mini failed: timed out", "model_error"),
        ("internal error: KeyError: 'x'", "internal_error"),
        ("deployment 'gone' is no longer configured", "config_error"),
        ("agent 'support': tool shop:lookup does not import", "tool_load_error"),
        ("mcp server 'shop' is down", "_OTHER"),
        (None, "_OTHER"),
    ],
)
def test_run_error_types(error: str | None, kind: str) -> None:
    assert run_error_type(error) == kind


# -- steps that ran nothing ------------------------------------------------------------------------


def first_attempt() -> list[TraceRow]:
    """What a first attempt journaled before its worker died: the model step and the tool call."""
    journal = MemoryJournal()
    traced_run(
        telemetry.NOOP, EchoModel(), dict(BUILTIN_TOOLS), "/tool current_time", journal=journal
    )
    return [row for commit in journal.commits for row in commit]


def test_replayed_steps_are_events_on_the_run_span_not_calls(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    previous = first_attempt()
    assert [(r.kind, r.name) for r in previous] == [("model", "echo"), ("tool", "current_time")]
    out = traced_run(
        OtelTracer.of(provider),
        EchoModel(),
        dict(BUILTIN_TOOLS),
        "/tool current_time",
        task=a_task(attempts=2),
        journal=MemoryJournal(previous=previous),
    )
    assert out.details["replayed"] == [1, 2]

    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat echo", "invoke_agent support"]  # only the new call
    run = the_run(spans)
    assert attrs(run)["fleet.run.attempt"] == 2
    assert attrs(run)["fleet.run.replayed_steps"] == 2
    events = [(e.name, dict(e.attributes or {})) for e in run.events]
    assert events == [
        (
            "fleet.step.replayed",
            {
                "fleet.step": 1,
                "fleet.step.replayed": True,
                "gen_ai.operation.name": "chat",
                "gen_ai.response.model": "echo",
            },
        ),
        (
            "fleet.step.replayed",
            {
                "fleet.step": 2,
                "fleet.step.replayed": True,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "current_time",
                "gen_ai.tool.call.id": "call_1",
            },
        ),
    ]


def test_a_lost_unsafe_call_is_an_event_not_a_call(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    calls: list[dict[str, Any]] = []
    charge = Tool(
        name="charge",
        description="charges a card",
        parameters={},
        fn=lambda args, ctx: calls.append(args) or "charged",
        retry="unsafe",
    )
    journal = MemoryJournal()
    traced_run(telemetry.NOOP, EchoModel(), {"charge": charge}, "/tool charge", journal=journal)
    started = [row for commit in journal.commits for row in commit if row.status == "started"]
    model_step = journal.commits[0][0]
    calls.clear()

    traced_run(
        OtelTracer.of(provider),
        EchoModel(),
        {"charge": charge},
        "/tool charge",
        journal=MemoryJournal(previous=[model_step, *started]),
    )
    assert calls == []
    spans = exporter.get_finished_spans()
    assert "execute_tool charge" not in by_name(spans)
    names = [e.name for e in the_run(spans).events]
    assert names == ["fleet.step.replayed", "fleet.step.outcome_unknown"]
    unknown = dict(the_run(spans).events[1].attributes or {})
    assert unknown["gen_ai.tool.name"] == "charge"
    assert unknown["gen_ai.tool.call.id"] == "call_1"


# -- the process's decision ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "fleet"}, False),
    ],
)
def test_tracing_is_wanted_only_with_an_endpoint(env: dict[str, str], on: bool) -> None:
    assert telemetry.wanted(env) is on


def test_off_by_default_the_tracer_is_the_no_op() -> None:
    assert telemetry.tracer() is telemetry.NOOP
    assert RunPorts(journal=MemoryJournal()).tracer is telemetry.NOOP
    with telemetry.NOOP.run(a_task(), uuid.uuid4(), AGENT) as span:
        assert span is telemetry.NOOP.chat(EchoModel(), [], 1).__enter__()


def test_off_a_run_imports_no_opentelemetry_and_creates_nothing() -> None:
    script = """
import sys
from fleet.agents import telemetry
from fleet.agents.models.base import ChatMessage
from fleet.agents.models.echo import EchoModel
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import ToolContext
from fleet.agents.tools.builtin import BUILTIN_TOOLS
import fleet.dispatch.manager
out = run_agent(
    EchoModel(),
    dict(BUILTIN_TOOLS),
    [ChatMessage(role="user", content="/tool current_time")],
    max_steps=4,
    ctx=ToolContext(task_id="t", run_id="r"),
    ports=RunPorts(journal=MemoryJournal(), tracer=telemetry.tracer()),
)
assert out.status == "succeeded", out
assert telemetry.tracer() is telemetry.NOOP
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "fleet.agents.otel")))
print(loaded)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FLEET_"))}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_wanted_without_the_packages_warns_once_and_stays_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with caplog.at_level(logging.WARNING, logger="fleet.agents.telemetry"):
        assert telemetry.tracer() is telemetry.NOOP
        assert telemetry.tracer() is telemetry.NOOP
    (record,) = caplog.records
    assert "OTEL_EXPORTER_OTLP_ENDPOINT is set" in record.getMessage()
    assert "pip install 'fleet[otel]'" in record.getMessage()


def test_on_it_configures_one_provider_and_says_which_protocol_it_speaks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with caplog.at_level(logging.WARNING, logger="fleet.agents.telemetry"):
        on = telemetry.tracer()
    try:
        assert on.enabled and on is telemetry.tracer()
        assert isinstance(on, OtelTracer) and not on.capture_content
        provider = telemetry._Process.provider
        assert provider is not None
        assert provider.resource.attributes["service.name"] == "fleet"
        (record,) = caplog.records
        assert "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in record.getMessage()
    finally:
        telemetry.shutdown()  # nothing was traced, so nothing is sent
    assert telemetry.tracer() is telemetry.NOOP


# -- through the dispatcher ------------------------------------------------------------------------


def test_a_dispatched_run_is_one_trace_with_its_ids_and_labels(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    settings = Settings(home=tmp_path / "home", config_dir=write_config(tmp_path / "config"))
    rt = build(settings)
    assert rt.local_waker is not None
    telemetry.install(provider)
    try:
        task = rt.dispatcher.submit("tooly", "/tool current_time", key="k", labels=LABELS).task
        done = run_until_done(rt.dispatcher, rt.local_waker, task.id, timeout_s=20)
        (stored_run,) = rt.store.runs_of(task.id)
    finally:
        rt.close()
    assert done.status == TaskStatus.SUCCEEDED

    spans = exporter.get_finished_spans()
    run = the_run(spans)
    assert run.name == "invoke_agent tools"
    assert sorted(s.name for s in spans if s is not run) == [
        "chat echo",
        "chat echo",
        "execute_tool current_time",
    ]
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id
        for s in spans
        if s is not run
    )
    a = attrs(run)
    assert a["fleet.task.id"] == str(task.id)
    assert a["fleet.run.id"] == str(stored_run.id)
    assert a["fleet.run.attempt"] == 1
    assert a["fleet.conversation.id"] == a["gen_ai.conversation.id"] == str(task.conversation_id)
    assert a["fleet.deployment"] == "tooly"
    assert (a["fleet.label.team"], a["fleet.label.tier"]) == ("search", "gold")
    assert a["fleet.run.status"] == "succeeded"


# -- a real export ---------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as r:
        yield r


def test_fleet_run_exports_its_spans_over_otlp_http(tmp_path: Path, receiver: Receiver) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FLEET_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        FLEET_HOME=str(tmp_path / "home"),
        FLEET_CONFIG_DIR=str(REPO / "config"),
    )
    script = Path(sys.executable).with_name("fleet")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "fleet.cli"]
    argv = ["run", "support", "/tool current_time", "--conversation", "otel-1", "--label", "team=s"]
    proc = subprocess.run(
        [*command, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc
    assert proc.stdout.startswith("echo: /tool current_time")

    # the exporter flushed at exit: the process is gone, so every post has arrived
    assert receiver.posts, "no OTLP post arrived"
    assert {(p.path, p.content_type) for p in receiver.posts} == {
        ("/v1/traces", "application/x-protobuf")
    }
    assert all(p.body for p in receiver.posts)
    spans = receiver.spans()
    assert sorted(name for name, _, _ in spans) == [
        "chat echo",
        "chat echo",
        "execute_tool current_time",
        "invoke_agent support",
    ]
    assert {resource["service.name"] for _, _, resource in spans} == {"fleet"}
    (run,) = [a for name, a, _ in spans if name == "invoke_agent support"]
    assert run["fleet.label.team"] == "s"
    assert run["fleet.deployment"] == "support"
