"""Embedded mode's pool: the same work on 1 thread and on N (SQLite, echo with a fixed delay).

Run: ``python -m bench.embedded [--conversations 2] [--tasks 5] [--delay-ms 200]
[--concurrency 1 2 4]``. Needs no services. Each row is a fresh SQLite file; the wall time runs
from the first submission to the last task's end, every task checked succeeded and in order.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fleet.config import Settings
from fleet.dispatch.embedded import EmbeddedLoop
from fleet.domain.values import TaskStatus
from fleet.runtime import build


def write_config(root: Path, delay_ms: int) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    (root / "agents" / "slow.toml").write_text(
        f'[model]\nprovider = "echo"\ndelay_ms = {delay_ms}\n'
    )
    (root / "deployments" / "slow.toml").write_text('agent = "slow"\n')
    return root


def measure(conversations: int, tasks: int, delay_ms: int, concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = Settings(home=root / "home", config_dir=write_config(root / "config", delay_ms))
        rt = build(settings)
        assert rt.local_waker is not None
        loop = EmbeddedLoop(rt.dispatcher, rt.local_waker, concurrency)
        loop.start()
        try:
            t0 = time.perf_counter()
            ids = [
                rt.dispatcher.submit("slow", f"m{i}", key=f"c{c}").task.id
                for i in range(tasks)
                for c in range(conversations)
            ]
            last = ids[-conversations:]
            while not all(rt.store.get_task(t).status.terminal for t in last):
                time.sleep(0.005)
            took = time.perf_counter() - t0
        finally:
            loop.stop()
        for n, task_id in enumerate(ids):
            task = rt.store.get_task(task_id)
            assert task.status == TaskStatus.SUCCEEDED, task
            seen = min(2 * (n // conversations), 20)  # every earlier message (up to max_items)
            assert task.reply is not None and task.reply.endswith(f"[history: {seen}]"), task
        rt.close()
        return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=5, help="tasks per conversation")
    ap.add_argument("--delay-ms", type=int, default=200, help="the echo model's delay per run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    work = args.conversations * args.tasks * args.delay_ms / 1000
    print(
        f"embedded pool: {args.conversations} conversations x {args.tasks} tasks, echo "
        f"{args.delay_ms} ms a run ({work:.1f}s of runs), SQLite"
    )
    print(f"{'concurrency':>11}  {'wall s':>7}  {'vs 1 thread':>11}")
    base = None
    for n in args.concurrency:
        took = measure(args.conversations, args.tasks, args.delay_ms, n)
        base = base or took
        print(f"{n:>11}  {took:>7.2f}  {took / base:>11.2f}")


if __name__ == "__main__":
    main()
