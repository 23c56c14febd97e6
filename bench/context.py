"""Context assembly and step-journal cost on PostgreSQL, each against a baseline in the same run.

context   three conversations with 1k, 10k and 100k stored messages (inserted in bulk). Per
          sample a fresh task is admitted (untimed) and claimed with ``store.start_next`` — the
          head read with its history, prompt assembly (``fleet.agents.prompt.assemble``) and the
          claim that opens the run — then settled (untimed). Also the read and the assembly alone
          (``fleet.store.pg.HEAD_WITH_CONTEXT`` + ``assemble``). Sizes take turns sample by sample,
          so all see the same machine. Goal: flat, the 100k p50 within 2x of the 1k p50.
journal   ``store.checkpoint`` of one model step and of one tool step (the fenced statement that
          stores a step before the next begins), against a bare fenced no-op UPDATE of the same
          task on the same connection path: p50/p99 and the overhead per step.
Run: ``python -m bench.context [--samples N]`` (PostgreSQL on 127.0.0.1; it makes and drops its
own database).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bench.dispatch import PG_ADMIN, admin, pct, write_config
from fleet.agents import prompt
from fleet.config import AgentConfig, load_config
from fleet.domain.admission import QueuePolicy, Submission
from fleet.domain.context import Record
from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome, TraceRow
from fleet.domain.values import Task, TaskStatus, TextPart
from fleet.store import Claim, Prepared, Started, Store, db, migrate, pg, rows

SIZES = (1_000, 10_000, 100_000)
#: Content of the bulk messages: about 140 bytes each, so the newest 20 fit the byte budget.
FILLER = "lorem ipsum dolor sit amet " * 5
#: A fenced write that stores nothing: the floor under any step boundary.
FENCED_NOOP = """UPDATE tasks SET fence = fence
WHERE id = %(task)s AND fence = %(fence)s AND status = 'running'
RETURNING cancel_requested"""


def submission(key: str, text_: str) -> Submission:
    return Submission(
        deployment="bench",
        scope="api",
        key=key,
        input=(TextPart(text=text_),),
        input_bytes=len(text_.encode()),
        labels={},
        idempotency_key=None,
        policy=QueuePolicy("followup", 0.0),
        max_attempts=3,
        max_input_bytes=16_384,
    )


def now() -> datetime:
    return datetime.now(UTC)


class Conversation:
    """One conversation holding ``size`` stored messages, claimed one fresh task at a time."""

    def __init__(self, store: Store, agent: AgentConfig, size: int) -> None:
        self.store, self.agent, self.size = store, agent, size
        first = store.admit(submission(f"c{size}", "first"), now()).task
        self.conv = first.conversation_id
        with store.tx() as conn:  # the first task done; its history is the bulk below
            conn.execute(
                text("UPDATE tasks SET status = 'succeeded', finished_at = now() WHERE id = :t"),
                {"t": first.id},
            )
            conn.execute(
                text(
                    """INSERT INTO messages (conversation_id, generation, task_id, role, content,
                                        delivery, created_at)
                    SELECT :conv, 0, :task, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                           'message ' || g || ': ' || :filler, 'sent', now()
                    FROM generate_series(1, :n) AS g"""
                ),
                {"conv": self.conv, "task": first.id, "filler": FILLER, "n": size},
            )
        self.claim_ms: list[float] = []
        self.read_ms: list[float] = []

    def prepare(self, claim: Claim) -> Prepared:
        context = claim.frozen_context or prompt.assemble(
            self.agent, claim.task, claim.history, more_history=claim.more_history
        )
        return Prepared(context, "echo")

    def sample(self, keep: bool) -> None:
        """Admit a task; time reading its head and assembling its prompt, then its claim."""
        self.store.admit(submission(f"c{self.size}", "next"), now())
        items = self.agent.history.max_items
        reads = prompt.history_reads(items)  # what a worker's claim reads (as the dispatcher)
        t0 = time.perf_counter()
        row = self.store.first(pg.HEAD_WITH_CONTEXT, {"conv": self.conv, "history": reads + 1})
        assert row is not None
        found = tuple(Record(i, role, content) for i, role, content in row["history"])
        context = prompt.assemble(
            self.agent, rows.task(row), found[:reads], more_history=len(found) > reads
        )
        t1 = time.perf_counter()
        started = self.store.start_next(
            self.conv,
            "bench",
            now(),
            history_items=lambda _: reads,
            prepare=self.prepare,
            history_cap=reads,
        )
        t2 = time.perf_counter()
        assert isinstance(started, Started), started
        for built in (context, started.context):
            assert len(built["injected"]) == items and len(built["dropped"]) == reads - items
        self.store.settle(
            started.task,
            started.run_id,
            Outcome(TaskStatus.SUCCEEDED, "ok", None, {"total_tokens": 1}),
            now(),
        )
        if keep:
            self.read_ms.append((t1 - t0) * 1000)
            self.claim_ms.append((t2 - t1) * 1000)


def model_step(step: int) -> TraceRow:
    return TraceRow(
        step=step,
        kind="model",
        name="gpt-4o-mini",
        input={"messages": 12},
        output={
            "content": "",
            "tool_calls": [
                {"id": f"call_{step}", "name": "lookup_order", "arguments": {"order_id": 1234}}
            ],
            "finish_reason": "tool_calls",
        },
        error=None,
        usage={"prompt_tokens": 812, "completion_tokens": 24},
        started_at=now(),
        duration_ms=640.0,
    )


def tool_step(step: int) -> TraceRow:
    return TraceRow(
        step=step,
        kind="tool",
        name="lookup_order",
        input={"order_id": 1234, "_meta": {"labels": {"team": "support"}, "task": "t"}},
        output='{"order": 1234, "status": "shipped", "carrier": "ups", "eta": "2026-12-03"}',
        error=None,
        usage={},
        started_at=now(),
        duration_ms=35.0,
        call_id=f"call_{step}",
    )


def journal(store: Store, samples: int) -> dict[str, list[float]]:
    """Per round: one fenced no-op, one model-step checkpoint, one tool-step checkpoint."""
    task = store.admit(submission("journal", "go"), now()).task
    started = store.start_next(
        task.conversation_id,
        "bench",
        now(),
        history_items=lambda _: 20,
        prepare=lambda _: Prepared({"messages": []}, "echo"),
    )
    assert isinstance(started, Started)
    running: Task = started.task
    fenced = {"task": running.id, "fence": running.fence}
    spent: dict[str, list[float]] = {"no-op": [], "model": [], "tool": []}
    step = 0
    ops: dict[str, Callable[[], object]] = {
        "no-op": lambda: store.first(FENCED_NOOP, fenced),
        "model": lambda: store.checkpoint(running, started.run_id, [model_step(step)], now()),
        "tool": lambda: store.checkpoint(running, started.run_id, [tool_step(step)], now()),
    }
    for i in range(samples + samples // 10):
        for name, op in ops.items():
            step += 1
            t0 = time.perf_counter()
            assert op() is not None
            if i >= samples // 10:  # the first tenth warms up
                spent[name].append((time.perf_counter() - t0) * 1000)
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300, help="timed samples per figure")
    args = ap.parse_args()
    name = f"fleet_bench_context_{uuid.uuid4().hex[:6]}"
    admin(f'CREATE DATABASE "{name}"')
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = db.create(url)
    migrate.upgrade(engine)
    engine.dispose()
    store = Store.open(url, Redactor(()))
    try:
        agent = load_config(write_config(Path(tempfile.mkdtemp()) / "config")).agents["instant"]
        t0 = time.perf_counter()
        convs = [Conversation(store, agent, n) for n in SIZES]
        with store.tx() as conn:
            conn.execute(text("ANALYZE"))
        print(
            f"context assembly: {sum(SIZES)} messages inserted in "
            f"{time.perf_counter() - t0:.1f}s; history.max_items {agent.history.max_items}, "
            f"max_bytes {agent.history.max_bytes}; {args.samples} samples per size, sizes in turn"
        )
        with store.pinned():
            for i in range(args.samples + args.samples // 10):
                for conv in convs:
                    conv.sample(keep=i >= args.samples // 10)
            spent = journal(store, args.samples)
        head = ("stored messages", "read+assemble p50", "p99", "start_next p50", "p99")
        print(f"{head[0]:>16}  {head[1]:>17} {head[2]:>8}  {head[3]:>14} {head[4]:>8}")
        for conv in convs:
            read, claim = conv.read_ms, conv.claim_ms
            print(
                f"{conv.size:>16,}  {pct(read, 50):>14.2f} ms {pct(read, 99):>5.2f} ms"
                f"  {pct(claim, 50):>11.2f} ms {pct(claim, 99):>5.2f} ms"
            )
        small, large = convs[0], convs[-1]
        print(
            f"ratio {large.size // 1000}k/{small.size // 1000}k (p50): read+assemble "
            f"{pct(large.read_ms, 50) / pct(small.read_ms, 50):.2f}, start_next "
            f"{pct(large.claim_ms, 50) / pct(small.claim_ms, 50):.2f}   goal: <= 2 (flat)"
        )
        base = pct(spent["no-op"], 50)
        print(f"step journal: {args.samples} samples each, in turn")
        print(f"{'':>34} {'p50':>8} {'p99':>8}  {'over the no-op (p50)':>20}")
        for key, label in (
            ("no-op", "baseline: fenced no-op UPDATE"),
            ("model", "checkpoint of one model step"),
            ("tool", "checkpoint of one tool step"),
        ):
            p50, p99 = pct(spent[key], 50), pct(spent[key], 99)
            extra = "" if key == "no-op" else f"+{p50 - base:.2f} ms"
            print(f"{label:>34} {p50:>5.2f} ms {p99:>5.2f} ms  {extra:>20}")
    finally:
        store.dispose()
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
