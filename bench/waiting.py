"""Waiting benchmark: what 1,000 tasks waiting for an approval cost a fleet, and how soon a
decided one resumes.

One fleet — ``--workers`` Celery worker processes of ``--concurrency`` each and a ``fleet beat``
(the sweeper), on a database and a redis-server of the bench's own — runs throughout:

  throughput  ``--tasks`` plain tasks (instant echo model, each its own conversation) admitted
              first, their wake-ups on a holding queue released in one Redis command (as in
              ``bench.dispatch``): tasks/s from the first start to the last finish, and the CPU
              per task of the fleet's processes, PostgreSQL's backends and Redis. ``--rounds``
              rounds with no task waiting, then as many with ``--waiting`` tasks waiting, then
              as many with none again (after they resumed): each waiting round against the mean
              of the no-waiting rounds of the same index before and after it (which cancels a
              steady drift of the machine), the median of those ratios with its interval (order
              statistics, as ``bench.dispatch`` does);
  idle        the CPU the fleet's processes spend in ``--idle`` seconds with nothing to do, with
              no task waiting and with the ``--waiting`` tasks waiting (nothing polls a waiting
              task: a decision wakes it, the sweeper finds its deadline);
  resume      ``--sample`` of the waiting tasks decided one at a time at ``--decide-rate`` a
              second, then the rest all at once (``--deciders`` threads, as fast as they can):
              for each, from the decision's commit to the start of the run that resumed it
              (the ``runs`` row's ``started_at``): p50, p95, p99, the most and how many took
              over 1 s; and the drain of the all-at-once batch.

The waiting tasks are ``/tool current_time {}`` to the echo model of an agent whose built-in
``current_time`` needs an approval: each stops at that call, holding no worker.
Prints figures; asserts no timing. Run: ``python -m bench.waiting`` (PostgreSQL on 127.0.0.1,
``redis-server`` on PATH; it makes and drops its own database and runs its own Redis).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.dispatch import HOLD, Fleetbench, Round, median_interval, pct, steady
from bench.machine import CORES, PrivateRedis, process_tree, sample, spent
from fleet.constants import WAKE_QUEUE
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import build
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for

t, r, w = s.tasks, s.runs, s.waits
#: The deployment whose tasks wait: the echo model calls a built-in that needs an approval.
WAITER = "approver"
WAITER_INPUT = "/tool current_time {}"


@dataclass(frozen=True, slots=True)
class Idle:
    """Percent of one core each group of processes spent while the fleet had nothing to do."""

    workers: float
    beat: float
    postgres: float
    redis: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """Decision commit → resumed run start, seconds, and the batch's span."""

    latencies: list[float]
    decided_s: float
    last_start_s: float
    last_finish_s: float
    #: CPU ms a resumed task of the fleet's processes, PostgreSQL and Redis (from the first
    #: decision to the last finish: the resumed runs and the decisions' wake-ups)
    cpu_ms: float
    #: CPU ms a decision of the deciding process (the bench: the API's part)
    decide_ms: float


class Bench:
    def __init__(self, tmp: Path, args: argparse.Namespace, stack: ExitStack) -> None:
        self.args = args
        (tmp / "redis").mkdir()
        self.redis = PrivateRedis(tmp / "redis")
        stack.callback(self.redis.close)
        # the plain tasks: bench.dispatch's echo deployment, a fresh conversation each
        self.fb = Fleetbench(tmp, args.workers, args.tasks, redis_url=self.redis.url)
        stack.callback(self.fb.close)
        (self.fb.config / "agents" / f"{WAITER}.toml").write_text(
            'model = "echo"\ntools = [{ tool = "current_time", approval = "required" }]\n'
        )
        (self.fb.config / "deployments" / f"{WAITER}.toml").write_text(f'agent = "{WAITER}"\n')
        self.fb.rt.close()  # built before the waiting agent was written
        self.rt = self.fb.rt = build(self.fb.settings())
        self.committed: dict[uuid.UUID, datetime] = {}
        decide = self.rt.store.decide

        def recorded(task_id: uuid.UUID, *a: Any, **kw: Any) -> Any:
            out = decide(task_id, *a, **kw)  # returns once its transaction committed
            self.committed[task_id] = datetime.now(UTC)
            return out

        self.rt.store.decide = recorded  # type: ignore[method-assign]
        self.fleet: Fleet = self.fb.fleet()
        stack.callback(self.fleet.stop)
        self.workers: list[Proc] = [
            self.fleet.worker(f"w{i}", args.concurrency, ready=False) for i in range(args.workers)
        ]
        for proc in self.workers:
            proc.wait_log(r"ready\.", timeout=60)
        self.beat = self.fleet.beat()

    # -- reading the store ----------------------------------------------------------------------

    def count(self, *where: Any) -> int:
        with self.rt.store.read() as conn:
            return int(conn.execute(select(func.count()).select_from(t).where(*where)).scalar_one())

    def statuses(self, deployment: str) -> dict[str, int]:
        with self.rt.store.read() as conn:
            found = conn.execute(
                select(t.c.status, func.count())
                .where(t.c.deployment == deployment)
                .group_by(t.c.status)
            ).all()
        return {status: int(n) for status, n in found}

    # -- throughput -----------------------------------------------------------------------------

    def round(self) -> Round:
        """``--tasks`` plain tasks on fresh conversations, released at once to the running
        workers: tasks/s from the first start to the last finish, CPU ms per task."""
        self.fb.round += 1
        n, mine = self.args.tasks, t.c.conversation_key.like(f"r{self.fb.round}-%")
        wait_for(lambda: self.fb.r.llen(WAKE_QUEUE) == 0, 60, what="an empty wake-up queue")
        for i in range(n):
            self.fb.submit(i, self.fb.holding)
        cpu = self.meter()
        self.fb.r.rename(HOLD, WAKE_QUEUE)
        wait_for(
            lambda: self.count(mine, t.c.finished_at.is_not(None)) >= n,
            300,
            interval=0.05,
            what="the round's tasks",
        )
        used = cpu()
        with self.rt.store.read() as conn:
            first, last = conn.execute(
                select(func.min(r.c.started_at), func.max(r.c.finished_at))
                .select_from(r.join(t, t.c.id == r.c.task_id))
                .where(mine)
            ).one()
        return Round(n / (last - first).total_seconds(), used * 1000 / n)

    def meter(self) -> Callable[[], float]:
        """CPU seconds the fleet's processes, PostgreSQL's backends and Redis spend from now
        until the returned function is called."""
        procs = [pid for p in self.fleet.procs for pid in process_tree(p.pid)]
        procs.append(self.redis.proc.pid)
        before = sample(procs), sample(self.fb.backends())
        return lambda: (
            spent(before[0], sample(procs)) + spent(before[1], sample(self.fb.backends()))
        )

    def quiet(self) -> None:
        """Wait until the fleet has nothing left to do: no wake-up queued (a burst of wake-ups
        leaves surplus turn tokens, each an empty turn), then 2 s for the last turns, hints and
        a sweep."""
        wait_for(lambda: self.fb.r.llen(WAKE_QUEUE) == 0, 120, interval=0.1, what="no wake-up")
        time.sleep(2.0)

    # -- idle -----------------------------------------------------------------------------------

    def idle(self) -> Idle:
        self.quiet()
        groups: dict[str, list[int]] = {
            "workers": [pid for p in self.workers for pid in process_tree(p.pid)],
            "beat": process_tree(self.beat.pid),
            "postgres": self.fb.backends(),
            "redis": [self.redis.proc.pid],
        }
        before = {k: sample(v) for k, v in groups.items()}
        time.sleep(self.args.idle)
        pct_of_core = {
            k: spent(before[k], sample(v)) * 100 / self.args.idle for k, v in groups.items()
        }
        return Idle(**pct_of_core)

    # -- waiting and resuming -------------------------------------------------------------------

    def park(self) -> float:
        """Submit ``--waiting`` tasks, each on its own conversation; seconds until all wait."""
        k = self.args.waiting
        started = time.perf_counter()
        for i in range(k):
            self.rt.dispatcher.submit(WAITER, WAITER_INPUT, key=f"wait-{i}")

        def parked() -> bool:
            now = self.statuses(WAITER)
            ended = {st: n for st, n in now.items() if TaskStatus(st).terminal}
            if ended:
                raise SystemExit(f"waiting tasks ended instead of waiting: {ended}")
            return bool(now.get(TaskStatus.WAITING.value, 0) >= k)

        wait_for(parked, 600, interval=0.2, what=f"{k} tasks to wait")
        return time.perf_counter() - started

    def pending(self) -> list[tuple[Task, uuid.UUID]]:
        with self.rt.store.read() as conn:
            found = conn.execute(
                select(w.c.task_id, w.c.id).where(w.c.status == "pending").order_by(w.c.task_id)
            ).all()
        return [(self.rt.store.get_task(task_id), wait_id) for task_id, wait_id in found]

    def decide(self, batch: list[tuple[Task, uuid.UUID]], pace: Callable[..., None]) -> Resumed:
        """Approve ``batch`` (``pace``: how the decisions are spread); wait until every task of
        it finished; commit → resumed start for each."""

        def approve(i: int) -> None:
            task, wait_id = batch[i]
            self.rt.dispatcher.waiting.decide(task, wait_id, "approve", by="bench")

        self.quiet()
        cpu, own = self.meter(), time.process_time()
        begun = datetime.now(UTC)
        pace(approve)
        decided = datetime.now(UTC)
        own = time.process_time() - own
        ids = [task.id for task, _ in batch]
        wait_for(
            lambda: self.count(t.c.id.in_(ids), t.c.finished_at.is_not(None)) >= len(ids),
            300,
            interval=0.1,
            what="the decided tasks to finish",
        )
        used = cpu()
        with self.rt.store.read() as conn:
            runs = conn.execute(
                select(r.c.task_id, func.min(r.c.started_at), func.max(r.c.finished_at))
                .where(r.c.task_id.in_(ids), r.c.status != TaskStatus.WAITING.value)
                .group_by(r.c.task_id)
            ).all()
        latencies = [(start - self.committed[tid]).total_seconds() for tid, start, _ in runs]
        return Resumed(
            latencies,
            (decided - begun).total_seconds(),
            (max(start for _, start, _ in runs) - begun).total_seconds(),
            (max(end for _, _, end in runs) - begun).total_seconds(),
            used * 1000 / len(ids),
            own * 1000 / len(ids),
        )

    def resume(self) -> tuple[Resumed, Resumed]:
        """``--sample`` decided one at a time, spread over time, then the rest all at once."""
        todo = self.pending()
        spread, burst = todo[: self.args.sample], todo[self.args.sample :]
        rate = self.args.decide_rate
        one = self.decide(spread, lambda approve: steady(len(spread), rate, approve))

        def at_once(approve: Callable[[int], None]) -> None:
            with ThreadPoolExecutor(self.args.deciders) as pool:
                list(pool.map(approve, range(len(burst))))

        everything = self.decide(burst, at_once)
        return one, everything


def coverage(low: float, ordered: list[float]) -> float:
    """The confidence of ``median_interval``'s order statistics (``low`` its lower end) for
    the ``ordered`` values."""
    n, k = len(ordered), ordered.index(low) + 1
    return float(1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n)


def latency_line(label: str, res: Resumed) -> str:
    ms = [x * 1000 for x in res.latencies]
    over = sum(1 for x in res.latencies if x > 1.0)
    return (
        f"  {label:<26}{len(ms):>6}{pct(ms, 50):>9.1f}{pct(ms, 95):>9.1f}{pct(ms, 99):>9.1f}"
        f"{max(ms):>9.1f}{over:>9}{res.cpu_ms:>12.2f}{res.decide_ms:>12.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=2, help="worker processes")
    ap.add_argument("--concurrency", type=int, default=1, help="pool processes a worker")
    ap.add_argument("--tasks", type=int, default=400, help="plain tasks a throughput round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per condition")
    ap.add_argument("--waiting", type=int, default=1000, help="tasks waiting at once")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of each idle reading")
    ap.add_argument("--sample", type=int, default=200, help="decided one at a time")
    ap.add_argument("--decide-rate", type=float, default=20.0, help="those decisions a second")
    ap.add_argument("--deciders", type=int, default=4, help="threads deciding the rest at once")
    args = ap.parse_args()
    args.sample = min(args.sample, args.waiting)
    started, load, t0 = datetime.now(UTC), os.getloadavg()[0], time.monotonic()
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        bench = Bench(Path(d), args, stack)
        bench.round()  # warm-up: the workers' first connections and code paths
        idle_none = bench.idle()
        before = [bench.round() for _ in range(args.rounds)]
        park_s = bench.park()
        idle_waiting = bench.idle()
        during = [bench.round() for _ in range(args.rounds)]
        still = bench.statuses(WAITER).get(TaskStatus.WAITING.value, 0)
        one, everything = bench.resume()
        after = [bench.round() for _ in range(args.rounds)]
        done = bench.statuses(WAITER)
    print(
        f"waiting benchmark ({started:%Y-%m-%d}, load average at start {load:.1f}, {CORES} "
        f"cores): {args.workers} worker processes of concurrency {args.concurrency} and a beat; "
        f"{args.waiting} tasks waiting for an approval, each on its own conversation; "
        f"throughput: {args.rounds} rounds of {args.tasks} plain echo tasks (fresh "
        "conversations) per condition"
    )
    print(f"parked: {args.waiting} tasks waiting {park_s:.1f} s after their submission")
    print(
        f"{'':34}{'tasks/s median (min-max)':>26}{'CPU ms/task':>13}"
        "  (fleet processes, PostgreSQL, Redis)"
    )
    rows = [
        ("none waiting, before", before),
        (f"{args.waiting} waiting", during),
        ("none waiting, after they resumed", after),
    ]
    for label, rounds in rows:
        tps = [x.tps for x in rounds]
        cpu = statistics.median(x.cpu_ms for x in rounds)
        print(
            f"  {label:<32}{statistics.median(tps):>10.0f} ({min(tps):.0f}-{max(tps):.0f})"
            f"{'':>5}{cpu:>11.2f}"
        )
    ratios = [x.tps / ((b.tps + a.tps) / 2) for x, b, a in zip(during, before, after, strict=True)]
    low, high = median_interval(ratios)
    conf = coverage(low, sorted(ratios))
    cpu_ratio = statistics.median(x.cpu_ms for x in during) / statistics.median(
        x.cpu_ms for x in before + after
    )
    print(
        f"waiting/none throughput ratio (median of {len(ratios)} rounds, each against the "
        f"none-waiting rounds before and after): {statistics.median(ratios):.2f}, "
        f"{conf * 100:.0f} % interval {low:.2f}-{high:.2f}   CPU per task ratio: {cpu_ratio:.2f}"
    )
    print(f"  still waiting after those rounds: {still} of {args.waiting}")
    print(f"idle CPU, % of one core over {args.idle:g} s:  workers    beat  PostgreSQL   Redis")
    for label, idle in (("none waiting", idle_none), (f"{args.waiting} waiting", idle_waiting)):
        print(
            f"  {label:<36}{idle.workers:>7.2f}{idle.beat:>8.2f}{idle.postgres:>12.2f}"
            f"{idle.redis:>8.2f}"
        )
    print("resume: from the decision's commit to the start of the run that resumed the task, ms")
    print(
        f"  {'decided':<26}{'tasks':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'most':>9}{'over 1 s':>9}"
        f"{'CPU ms/task':>12}{'ms/decision':>12}"
    )
    print(latency_line(f"one at a time, {args.decide_rate:g}/s", one))
    print(latency_line("all at once", everything))
    print(
        f"  all at once: {len(everything.latencies)} decided by {args.deciders} threads in "
        f"{everything.decided_s:.2f} s; "
        f"the last resumed run started {everything.last_start_s:.2f} s and finished "
        f"{everything.last_finish_s:.2f} s after the first decision "
        f"({len(everything.latencies) / everything.last_finish_s:.0f} resumed tasks/s)"
    )
    print(
        "  CPU ms/task: the fleet's processes, PostgreSQL and Redis for a decided task's wake-up "
        "and resumed run; ms/decision: the deciding process's CPU (the API's share)"
    )
    print(f"  the waiting tasks at the end: {done}; the bench took {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
