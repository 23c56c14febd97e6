"""Runs in flight: how many runs waiting on a slow model one worker process holds, and at what
cost, against today's prefork worker (a process per run), in one run.

A fake OpenAI-compatible model (``bench.slow_model``, asyncio) answers every chat completion
after ``--delay`` seconds and counts the requests it holds at once. Each phase starts its
worker(s) and a ``fleet beat`` on a database and a redis-server of the bench's own, then
submits its tasks (each on its own conversation) as fast as one process admits them:

  many      ``fleet worker -c 1 --runs R`` with ``--tasks`` tasks
  prefork   ``fleet worker -c 8 --runs 1`` (one run per process) with ``--prefork-tasks`` tasks
  fast      ``fleet worker -c 1 --runs R`` at ``--fast-delay`` a turn: turns/s one process
            sustains
  cancel    ``--cancel-runs`` runs wait on calls the model holds; ``--cancels`` of them are
            cancelled one at a time: seconds from each cancel to its task's end

Per phase: seconds from the first submission to the last task's end; the model's most requests
in flight at once; the worker's processes' peak RSS (sampled every 0.2 s) and its idle RSS
before the tasks; the most connections the database had from processes other than the bench;
CPU per turn of the worker's processes. Prints figures; asserts none.
Run: ``python -m bench.inflight`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select, text

from bench import slow_model
from bench.dispatch import Fleetbench
from bench.machine import CORES, PrivateRedis, process_tree, rss_mib, sample, spent
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for

t = s.tasks


@dataclass
class Phase:
    name: str
    tasks: int
    seconds: float
    model_peak: int
    idle_rss_mib: float
    peak_rss_mib: float
    connections: int
    cpu_ms_per_turn: float
    succeeded: int
    submit_s: float
    #: Seconds from the first submission to the model's first request, and to its last.
    first_call_s: float
    last_call_s: float

    def line(self) -> str:
        per_run = (self.peak_rss_mib - self.idle_rss_mib) / max(1, self.model_peak)
        return (
            f"{self.name:<8} {self.tasks:>5} tasks  {self.seconds:6.1f} s  "
            f"{self.tasks / self.seconds:6.1f} turns/s  model in flight {self.model_peak:>5}  "
            f"RSS idle {self.idle_rss_mib:6.0f} MiB peak {self.peak_rss_mib:6.0f} MiB "
            f"({per_run:5.2f} MiB/run in flight)  db connections {self.connections:>3}  "
            f"CPU/turn {self.cpu_ms_per_turn:5.2f} ms  succeeded {self.succeeded}  "
            f"(submitted in {self.submit_s:.1f} s; model calls began at {self.first_call_s:.1f} s,"
            f" the last at {self.last_call_s:.1f} s)"
        )


class Bench:
    def __init__(self, tmp: Path, args: argparse.Namespace, stack: ExitStack) -> None:
        self.args = args
        (tmp / "redis").mkdir()
        self.redis = PrivateRedis(tmp / "redis")
        stack.callback(self.redis.close)
        self.model = slow_model.Process()
        stack.callback(self.model.close)
        self.model_url = self.model.url
        self.fb = Fleetbench(tmp, 1, args.tasks, redis_url=self.redis.url)
        stack.callback(self.fb.close)
        (self.fb.config / "agents" / "slow.toml").write_text(
            f'[model]\nprovider = "openai"\nname = "slow"\nbase_url = "{self.model_url}/v1"\n'
            "timeout = 120\nmax_retries = 0\n"
        )
        (self.fb.config / "deployments" / "slow.toml").write_text('agent = "slow"\n')
        self.fb.rt.close()
        from fleet.runtime import build

        self.rt = self.fb.rt = build(self.fb.settings())
        self.round = 0

    def _connections(self) -> int:
        """Connections to the bench database, those of the bench's own pool excepted."""
        with self.rt.store.read() as conn:
            total = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            ).scalar_one()
        pool = self.rt.store.engine.pool
        own = pool.checkedin() + pool.checkedout()  # type: ignore[attr-defined]
        return int(total) - int(own)

    def _count(self, *where: object) -> int:
        with self.rt.store.read() as conn:
            return int(conn.execute(select(func.count()).select_from(t).where(*where)).scalar_one())

    def phase(self, name: str, worker_args: list[str], tasks: int, delay: float) -> Phase:
        self.round += 1
        self.model.pace(delay=delay)
        fleet: Fleet = self.fb.fleet()
        try:
            argv = [sys.executable, "-m", "fleet.cli", "worker", *worker_args]
            worker = Proc(f"{name}-worker", argv, fleet.env, self.fb.tmp / f"{name}.log")
            fleet.procs.append(worker)
            worker.wait_log(r"ready\.", timeout=60)
            fleet.beat(f"{name}-beat")
            time.sleep(1.0)  # (the pool processes settle: the idle figure)
            idle = sum(rss_mib(p) for p in process_tree(worker.pid))
            peak = {"rss": idle, "connections": self._connections()}
            stop = threading.Event()

            def watch() -> None:
                while not stop.wait(0.2):
                    try:
                        pids = process_tree(worker.pid)
                        peak["rss"] = max(peak["rss"], sum(rss_mib(p) for p in pids))
                        peak["connections"] = max(peak["connections"], self._connections())
                    except Exception:  # a process that ended between the reads
                        continue

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            before = sample(process_tree(worker.pid))
            deployment = t.c.deployment == "slow"
            done_before = self._count(deployment, t.c.status == "succeeded")
            start, wall = time.monotonic(), time.time()
            for i in range(tasks):
                self.rt.dispatcher.submit("slow", f"m{i}", key=f"{name}{self.round}-c{i}")
            submitted = time.monotonic() - start
            wait_for(
                lambda: (
                    self._count(deployment, t.c.status.in_(("succeeded", "failed")))
                    >= done_before + tasks
                ),
                600,
                interval=0.1,
                what=f"{name}: every task to end",
            )
            seconds = time.monotonic() - start
            cpu = spent(before, sample(process_tree(worker.pid)))
            stop.set()
            watcher.join()
            stats = self.model.stats()
            return Phase(
                name=name,
                tasks=tasks,
                seconds=seconds,
                model_peak=int(stats["peak"]),
                idle_rss_mib=idle,
                peak_rss_mib=peak["rss"],
                connections=peak["connections"],
                cpu_ms_per_turn=cpu * 1000 / tasks,
                succeeded=self._count(deployment, t.c.status == "succeeded") - done_before,
                submit_s=submitted,
                first_call_s=float(stats["first_at"]) - wall,
                last_call_s=float(stats["last_at"]) - wall,
            )
        finally:
            fleet.stop()

    def _ended(self, task_id: uuid.UUID) -> Callable[[], bool]:
        return lambda: self.rt.store.get_task(task_id).status.terminal

    def cancels(self, worker_args: list[str], runs: int, cancels: int) -> list[float]:
        """``runs`` runs wait on calls the model holds; ``cancels`` of them are cancelled one at
        a time: seconds from each cancel to its task's end (its call hung up meanwhile)."""
        self.round += 1
        self.model.pace(delay=0, hold=True)
        fleet: Fleet = self.fb.fleet()
        try:
            argv = [sys.executable, "-m", "fleet.cli", "worker", *worker_args]
            worker = Proc("cancel-worker", argv, fleet.env, self.fb.tmp / "cancel.log")
            fleet.procs.append(worker)
            worker.wait_log(r"ready\.", timeout=60)
            fleet.beat("cancel-beat")
            ids = [
                self.rt.dispatcher.submit("slow", f"m{i}", key=f"cancel{self.round}-c{i}").task.id
                for i in range(runs)
            ]
            wait_for(
                lambda: self.model.stats()["in_flight"] >= runs,
                300,
                interval=0.2,
                what=f"{runs} runs waiting on the model",
            )
            took: list[float] = []
            for task_id in ids[:: max(1, runs // cancels)][:cancels]:
                start = time.monotonic()
                self.rt.dispatcher.cancel(task_id)
                ended = self._ended(task_id)
                wait_for(ended, 30, interval=0.01, what="the cancelled task to end")
                took.append(time.monotonic() - start)
            self.model.release()
            return took
        finally:
            fleet.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=10.0)
    parser.add_argument("--prefork-tasks", type=int, default=100)
    parser.add_argument("--prefork", type=int, default=8)
    parser.add_argument("--fast-delay", type=float, default=2.0)
    parser.add_argument(
        "--phases", default="many,prefork,fast,cancel", help="which phases, comma-separated"
    )
    parser.add_argument("--cancel-runs", type=int, default=500)
    parser.add_argument("--cancels", type=int, default=20)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"machine: {CORES} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), args, stack)
        many_args = ["-c", "1", "--runs", str(args.runs)]
        plan = {
            "many": (many_args, args.tasks, args.delay),
            "prefork": (["-c", str(args.prefork), "--runs", "1"], args.prefork_tasks, args.delay),
            "fast": (many_args, args.tasks, args.fast_delay),
        }
        chosen = [name.strip() for name in args.phases.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in (*plan, "cancel")]
        if unknown:
            known = ", ".join(plan)
            parser.error(f"--phases: unknown phase(s) {', '.join(unknown)} (one of {known})")
        phases = {name: bench.phase(name, *plan[name]) for name in chosen if name in plan}
        took = (
            bench.cancels(many_args, args.cancel_runs, args.cancels) if "cancel" in chosen else []
        )
    print(f"model: every call answered after {args.delay:g} s ({args.fast_delay:g} s: fast)")
    for phase in phases.values():
        print(phase.line())
    if took:
        ranked = sorted(took)
        print(
            f"cancel    {len(took)} of {args.cancel_runs} runs waiting on their model, one at a "
            f"time: cancel to task end median {statistics.median(ranked) * 1000:.0f} ms, "
            f"max {ranked[-1] * 1000:.0f} ms (the stop watch reads every 0.5 s)"
        )
    if "many" not in phases or "prefork" not in phases:
        return
    many, prefork = phases["many"], phases["prefork"]
    print(
        f"many vs prefork: CPU per turn {many.cpu_ms_per_turn / prefork.cpu_ms_per_turn:.2f}x, "
        f"memory per run in flight "
        f"{(many.peak_rss_mib - many.idle_rss_mib) / max(1, many.model_peak):.2f} vs "
        f"{(prefork.peak_rss_mib) / max(1, prefork.model_peak):.1f} MiB (whole processes)"
    )


if __name__ == "__main__":
    main()
