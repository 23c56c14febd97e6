"""What tracing costs a run: the no-op hooks (tracing off) and OpenTelemetry spans (on).

Run: ``python -m bench.telemetry [--runs N] [--rounds R]``. No services needed. Each figure is
the median of R rounds, the four cases taking turns in each round (the machine's load drifts). A
run is the echo model calling ``current_time`` once, then replying (two model calls, one tool
call), through the runner with an in-memory journal. "on" exports through a BatchSpanProcessor to
an exporter that drops the spans, so it measures fleet and the SDK, not a network.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from fleet.agents import telemetry
from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall
from fleet.agents.models.echo import EchoModel
from fleet.agents.otel import OtelTracer
from fleet.agents.runner import MemoryJournal, RunPorts, run_agent
from fleet.agents.tools import ToolContext
from fleet.agents.tools.builtin import BUILTIN_TOOLS
from fleet.agents.tools.executor import CallResult
from fleet.config import AgentConfig
from fleet.domain.runs import Outcome
from fleet.domain.values import Task, TaskStatus, TextPart

AGENT = AgentConfig(name="bench")
MESSAGES = [ChatMessage(role="user", content="/tool current_time")]
RESP = ModelResponse(message=MESSAGES[0], model="echo")
CALL = ToolCall(id="c", name="current_time")
RESULT = CallResult(text="now")
OUTCOME = Outcome(TaskStatus.SUCCEEDED, "ok", None, {"prompt_tokens": 1, "steps": 3})
MODEL = EchoModel()


class Drop(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def a_task() -> Task:
    now = datetime.now(UTC)
    return Task(
        id=uuid.uuid4(),
        deployment="bench",
        conversation_id=uuid.uuid4(),
        scope="api",
        key="k",
        seq=1,
        status=TaskStatus.RUNNING,
        input=(TextPart(text="x"),),
        not_before=now,
        labels={"team": "bench"},
        attempts=1,
        max_attempts=3,
        created_at=now,
    )


def one_run(tracer: telemetry.Tracer, task: Task) -> None:
    ports = RunPorts(journal=MemoryJournal(), tracer=tracer)
    with tracer.run(task, uuid.uuid4(), AGENT) as span:
        out = run_agent(
            EchoModel(),
            BUILTIN_TOOLS,
            MESSAGES,
            max_steps=4,
            ctx=ToolContext(task_id="t", run_id="r"),
            ports=ports,
        )
        span.outcome(out)
    assert out.status == TaskStatus.SUCCEEDED


def hooks_only(tracer: telemetry.Tracer, task: Task) -> None:
    """The tracer calls one such run makes, and nothing else."""
    resp, call, result, outcome, model = RESP, CALL, RESULT, OUTCOME, MODEL
    with tracer.run(task, task.id, AGENT) as run:
        with tracer.chat(model, MESSAGES, 1) as span:
            span.response(resp)
        with tracer.tool(call, 2) as span:
            span.result(result)
        with tracer.chat(model, MESSAGES, 3) as span:
            span.response(resp)
        run.outcome(outcome)


def per_run_us(
    fn: Callable[[telemetry.Tracer, Task], None], tracer: telemetry.Tracer, runs: int
) -> float:
    """Mean µs per call of ``fn`` over ``runs`` calls."""
    task = a_task()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn(tracer, task)
    return (time.perf_counter() - t0) / runs * 1e6


def alternating(
    cases: dict[str, tuple[Callable[[telemetry.Tracer, Task], None], telemetry.Tracer, int]],
    rounds: int,
) -> dict[str, float]:
    """Median per-call µs of each case, the cases taking turns round by round (load drifts)."""
    for fn, tracer, _ in cases.values():  # warm up
        per_run_us(fn, tracer, 200)
    seen: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (fn, tracer, runs) in cases.items():
            seen[name].append(per_run_us(fn, tracer, runs))
    return {name: statistics.median(values) for name, values in seen.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    on = OtelTracer.of(provider)
    off = telemetry.NOOP
    got = alternating(
        {
            "run_off": (one_run, off, args.runs),
            "run_on": (one_run, on, args.runs),
            "hooks_off": (hooks_only, off, args.runs * 50),
            "hooks_on": (hooks_only, on, args.runs),
        },
        args.rounds,
    )
    run_off, run_on, hooks_off, hooks_on = (
        got["run_off"],
        got["run_on"],
        got["hooks_off"],
        got["hooks_on"],
    )
    provider.shutdown()
    print(
        f"tracing cost per run (2 model calls + 1 tool call, echo model), "
        f"median of {args.rounds} rounds"
    )
    print(f"{'':34}{'per run':>12}")
    print(f"{'run, tracing off (no-op hooks)':34}{run_off:>9.1f} µs")
    print(f"{'  of which the no-op hooks':34}{hooks_off:>9.2f} µs  ({hooks_off / run_off:.2%})")
    print(f"{'run, tracing on (4 spans, SDK)':34}{run_on:>9.1f} µs")
    print(f"{'  of which the spans':34}{hooks_on:>9.1f} µs  ({hooks_on / run_on:.1%})")


if __name__ == "__main__":
    main()
