"""Dispatch benchmark: fleet followup vs a raw Celery no-op, same broker and machine, one run.

For each system, alternating so both see the same machine:
  throughput  all tasks queued first, their messages on a holding queue; the workers start and,
              once all are ready, the holding queue is renamed onto theirs (one Redis command):
              tasks/s from the first start to the last finish, so neither side's start-up is in
              the figure; ``--rounds`` short rounds, raw and fleet in turn: the median of the
              rounds' fleet/raw ratios with its 95 % interval (order statistics of the ratios:
              a noisy neighbour moves both sides of a pair alike);
  CPU/task    user+system CPU, from /proc, over each throughput round: the worker processes
              (main and pool), the PostgreSQL backends of the bench database (fleet) and the
              bench's own redis-server (both) — CPU per task does not swing with the machine's
              load the way wall time does;
  latency     workers running, tasks submitted at a steady rate below capacity:
              submit→start p50/p99; the first ``WARMUP`` tasks (the workers' first
              connections and code paths) are run at the same rate but not counted.
Plus the round trips per fleet task, counted on the fleet's own code path.
With ``--pgbouncer``, fleet also runs a third time, each round beside the other two, on a
database of its own reached through a PgBouncer in transaction mode
(``tests/support/pgbouncer.py``, so pgbouncer must be installed): the submitting process and the
workers connect through it with ``FLEET_DATABASE_POOLER=transaction`` (no server-side prepared
statements); the schema is migrated on the direct connection.
Run: ``python -m bench.dispatch`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH; it makes
and drops its own database and runs its own Redis on a free port).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import redis
from sqlalchemy import create_engine, event, select, text

from bench.machine import PrivateRedis, process_tree, sample, spent
from fleet.config import Settings
from fleet.constants import WAKE_QUEUE
from fleet.dispatch.celery_app import CeleryWaker, app_for
from fleet.dispatch.leases.redis import RedisLease
from fleet.runtime import Runtime, build, redis_client
from fleet.store import db, migrate
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for
from tests.support.pgbouncer import pgbouncer

PG_ADMIN = os.environ.get("FLEET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("FLEET_BENCH_REDIS", "redis://127.0.0.1:6379/14")
#: Where the throughput phase parks messages until every worker is ready.
HOLD = "bench-hold"
#: Tasks run before the latency phase's measured ones, on each side (2 s at the default rate).
WARMUP = 200


def admin(sql: str) -> None:
    eng = create_engine(db.normalize_url(PG_ADMIN), isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(text(sql))
    eng.dispose()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@dataclass(frozen=True, slots=True)
class Round:
    """One throughput round: tasks/s and CPU milliseconds per task."""

    tps: float
    cpu_ms: float


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics ``k`` from each end
    with ``P(k-th <= median <= (n-k+1)-th) >= confidence`` (the widest when ``n`` is small)."""
    ordered, n = sorted(values), len(values)
    k = 1
    while k < n // 2:
        below = sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # P(Binomial(n, 1/2) <= k)
        if 1 - 2 * below < confidence:
            break
        k += 1
    return ordered[k - 1], ordered[n - k]


def write_config(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    (root / "agents" / "instant.toml").write_text('model = "echo"\n')
    (root / "deployments" / "bench.toml").write_text('agent = "instant"\n')
    return root


def steady(n: int, rate: float, submit: Callable[[int], object]) -> None:
    """Submit ``n`` tasks at ``rate`` per second."""
    gap = 1.0 / rate
    t_next = time.perf_counter()
    for i in range(n):
        t_next += gap
        submit(i)
        delay = t_next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


# -- raw Celery --------------------------------------------------------------------------------


class Raw:
    """Celery workers running ``bench.noop`` (same app settings as fleet's)."""

    def __init__(self, tmp: Path, workers: int, redis_url: str = REDIS) -> None:
        from bench.noop_app import app

        self.app = app
        self.tmp = tmp
        self.workers = workers
        self.r = redis.Redis.from_url(redis_url)
        self.env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "FLEET_BENCH_REDIS": redis_url}
        self.procs: list[Proc] = []

    def start(self) -> None:
        for i in range(self.workers):
            argv = [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.noop_app",
                "worker",
                "-c",
                "1",
                "-Q",
                "fleet",
                "-n",
                f"noop{i}@%h",
                "-P",
                "prefork",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "INFO",
            ]
            self.procs.append(Proc(f"noop{i}", argv, self.env, self.tmp / f"noop{i}.log"))
        for p in self.procs:
            p.wait_log(r"ready\.", timeout=60)

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
        self.procs = []

    def send(self, _: int = 0, queue: str = WAKE_QUEUE) -> None:
        self.app.send_task("bench.noop", args=[time.time()], queue=queue)

    def throughput(self, n: int, redis_pid: int) -> Round:
        self.r.flushdb()
        for i in range(n):
            self.send(i, HOLD)
        self.start()
        pids = [pid for p in self.procs for pid in process_tree(p.pid)] + [redis_pid]
        before = sample(pids)
        self.r.rename(HOLD, WAKE_QUEUE)
        wait_for(lambda: self.r.llen("bench:noop:start") >= n, 300, interval=0.05, what="raw")
        cpu = spent(before, sample(pids))
        self.stop()
        starts = [float(x) for x in self.r.lrange("bench:noop:start", 0, -1)]
        # a no-op's start is also its finish
        return Round(n / (max(starts) - min(starts)), cpu * 1000 / n)

    def latency(self, n: int, rate: float) -> list[float]:
        self.r.flushdb()
        self.start()
        steady(WARMUP, rate, self.send)
        wait_for(lambda: self.r.llen("bench:noop:lat") >= WARMUP, 300, what="raw warm-up")
        self.r.delete("bench:noop:lat")
        steady(n, rate, self.send)
        wait_for(lambda: self.r.llen("bench:noop:lat") >= n, 300, interval=0.05, what="raw")
        self.stop()
        return [float(x) * 1000 for x in self.r.lrange("bench:noop:lat", 0, -1)]


# -- fleet ---------------------------------------------------------------------------------------


class Fleetbench:
    """fleet workers on a database of their own, followup deployment, instant echo model.

    ``bounce``: given the database's direct URL, the URL fleet connects through instead (a
    transaction-mode pooler's: ``FLEET_DATABASE_POOLER=transaction`` for every fleet process);
    the migrations run on the direct URL.
    """

    def __init__(
        self,
        tmp: Path,
        workers: int,
        conversations: int,
        *,
        suffix: str = "",
        bounce: Callable[[str], str] | None = None,
        redis_url: str = REDIS,
        runs: int = 1,
    ) -> None:
        self.redis_url = redis_url
        #: Runs in flight a worker process holds (``fleet worker --runs``; 1: prefork).
        self.runs = runs
        self.name = f"fleet_bench_{os.getpid()}{suffix}"
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        admin(f'CREATE DATABASE "{self.name}"')
        direct = (
            db.normalize_url(PG_ADMIN).set(database=self.name).render_as_string(hide_password=False)
        )
        engine = db.create(direct)
        migrate.upgrade(engine)
        engine.dispose()
        self.url = bounce(direct) if bounce else direct
        self.pooler: Literal["transaction"] | None = "transaction" if bounce else None
        self.tmp = tmp
        self.config = write_config(tmp / "config")
        self.workers = workers
        self.conversations = conversations
        self.r = redis.Redis.from_url(redis_url)
        self.rt: Runtime = build(self.settings())
        settings = self.settings()
        lease = RedisLease(redis_client(settings), settings.lease_ttl)
        #: Admits like ``rt`` but parks its wake-ups on the holding queue.
        self.holding: Runtime = build(
            settings,
            lease=lease,
            waker=CeleryWaker(app_for(redis_url), lease, queue=HOLD, turns_of=WAKE_QUEUE),
        )
        self.round = 0

    def settings(self) -> Settings:
        return Settings(
            home=self.tmp / "home",
            database_url=self.url,
            database_pooler=self.pooler,
            redis_url=self.redis_url,
            config_dir=self.config,
        )

    def fleet(self) -> Fleet:
        pooler = {"database_pooler": self.pooler} if self.pooler else {}
        return Fleet(
            self.tmp,
            database_url=self.url,
            redis_url=self.redis_url,
            config_dir=self.config,
            log_level="WARNING",
            **pooler,
        )

    def submit(self, i: int, rt: Runtime | None = None) -> None:
        key = f"r{self.round}-c{i % self.conversations}"  # fresh conversations each round
        (rt or self.rt).dispatcher.submit("bench", f"m{i}", key=key)

    def start(self) -> Fleet:
        fleet = self.fleet()
        if self.runs == 1:
            procs = [fleet.worker(f"fleet{i}", ready=False) for i in range(self.workers)]
        else:  # what `fleet worker` runs by default: a process of many runs, a thread each
            procs = []
            for i in range(self.workers):
                argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", "1"]
                argv += ["--runs", str(self.runs), "--name", f"fleet{i}@%h"]
                proc = Proc(f"fleet{i}", argv, fleet.env, self.tmp / f"fleet{i}.log")
                fleet.procs.append(proc)
                procs.append(proc)
        for p in procs:
            p.wait_log(r"ready\.")
        return fleet

    def done(self) -> int:
        with self.rt.store.read() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM tasks WHERE finished_at IS NOT NULL")
                ).scalar_one()
            )

    def reset(self) -> None:
        self.round += 1
        self.r.flushdb()
        with self.rt.store.tx() as conn:
            conn.execute(text("TRUNCATE conversations CASCADE"))

    def backends(self) -> list[int]:
        """The PostgreSQL backends serving the bench database (the workers' connections)."""
        with self.rt.store.read() as conn:
            return [
                int(pid)
                for pid in conn.execute(
                    text("SELECT pid FROM pg_stat_activity WHERE datname = :db"), {"db": self.name}
                ).scalars()
            ]

    def throughput(self, n: int, redis_pid: int) -> Round:
        self.reset()
        for i in range(n):
            self.submit(i, self.holding)
        fleet = self.start()
        workers = [pid for p in fleet.procs for pid in process_tree(p.pid)] + [redis_pid]
        before = sample(workers), sample(self.backends())
        self.r.rename(HOLD, WAKE_QUEUE)
        wait_for(lambda: self.done() >= n, 600, interval=0.1, what="fleet tasks")
        cpu = spent(before[0], sample(workers)) + spent(before[1], sample(self.backends()))
        fleet.stop()
        with self.rt.store.read() as conn:
            first, last = conn.execute(
                select(text("min(started_at), max(finished_at)")).select_from(s.runs)
            ).one()
        return Round(n / (last - first).total_seconds(), cpu * 1000 / n)

    def latency(self, n: int, rate: float) -> list[float]:
        self.reset()
        fleet = self.start()
        steady(WARMUP, rate, self.submit)
        wait_for(lambda: self.done() >= WARMUP, 300, what="fleet warm-up")
        counted = datetime.now(UTC)
        steady(n, rate, lambda i: self.submit(WARMUP + i))
        wait_for(lambda: self.done() >= WARMUP + n, 600, interval=0.1, what="fleet tasks")
        fleet.stop()
        with self.rt.store.read() as conn:
            return [
                (row.started_at - row.created_at).total_seconds() * 1000
                for row in conn.execute(
                    select(s.tasks.c.created_at, s.runs.c.started_at)
                    .join(s.runs, s.runs.c.task_id == s.tasks.c.id)
                    .where(s.tasks.c.created_at >= counted)
                )
            ]

    def round_trips(self) -> dict[str, float]:
        """PostgreSQL statements and Redis round trips per task, admission and drain apart.

        Counted on the fleet's own code path in this process: SQLAlchemy's cursor events plus
        the hot path's driver statements (each its own transaction: no BEGIN/COMMIT round
        trips), the lease client's Redis commands and the wake-up publishes; apart, the change
        hints (``fleet.dispatch.hints``: published from a thread of their own, batched).
        """
        self.reset()
        rt = build(self.settings())
        counts = {"pg": 0, "redis": 0, "hints": 0}

        @event.listens_for(rt.store.engine, "before_cursor_execute")
        def _stmt(*_a: object) -> None:
            counts["pg"] += 1

        def counting(kind: str, call: Callable[..., Any]) -> Callable[..., Any]:
            def counted(*args: Any, **kwargs: Any) -> Any:
                counts[kind] += 1
                return call(*args, **kwargs)

            return counted

        rt.store.first = counting("pg", rt.store.first)  # type: ignore[method-assign]
        client = rt.dispatcher.lease._redis  # type: ignore[attr-defined]
        client.execute_command = counting("redis", client.execute_command)
        broker = rt.dispatcher.waker._redis  # type: ignore[attr-defined]  # direct pushes
        broker.execute_command = counting("redis", broker.execute_command)
        app = rt.dispatcher.waker._app  # type: ignore[attr-defined]
        send = app.send_task
        app.send_task = counting("redis", send)
        rt.dispatcher.hints.changed = counting("hints", rt.dispatcher.hints.changed)  # type: ignore[method-assign]
        k = 200
        keys = [uuid.uuid4().hex for _ in range(k)]
        convs = [rt.dispatcher.submit("bench", "x", key=key).task.conversation_id for key in keys]
        admit = (counts["pg"] / k, counts["redis"] / k)
        counts.update(pg=0, redis=0, hints=0)
        for conv in convs:
            rt.dispatcher.drain(conv)
        drain = (counts["pg"] / k, counts["redis"] / k)
        hints = counts["hints"] / k
        # drains of ten queued tasks each, as in the throughput phase
        convs = []
        for key in keys[:20]:
            for _ in range(10):
                convs.append(rt.dispatcher.submit("bench", "y", key=key).task.conversation_id)
        counts.update(pg=0, redis=0)
        for conv in dict.fromkeys(convs):
            rt.dispatcher.drain(conv)
        batch = (counts["pg"] / len(convs), counts["redis"] / len(convs))
        app.send_task = send
        rt.close()
        return {
            "admit_pg": admit[0],
            "admit_redis": admit[1],
            "drain_pg": drain[0],
            "drain_redis": drain[1],
            "batch_pg": batch[0],
            "batch_redis": batch[1],
            "drain_hints": hints,
        }

    def close(self) -> None:
        self.rt.close()
        self.holding.close()
        self.r.close()
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=2000, help="latency phase: measured tasks")
    ap.add_argument("--round-tasks", type=int, default=600, help="tasks per throughput round")
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--runs",
        type=int,
        default=100,
        help="fleet's runs in flight a worker process (fleet worker --runs; 1: prefork)",
    )
    ap.add_argument("--rounds", type=int, default=9, help="throughput rounds per system")
    ap.add_argument("--rate", type=float, default=100.0, help="latency phase: submissions/s")
    ap.add_argument(
        "--pgbouncer",
        action="store_true",
        help="also run fleet through a PgBouncer in transaction mode (FLEET_DATABASE_POOLER="
        "transaction), each round beside the direct one",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        tmp = Path(d)
        for part in ("raw", "fleet", "redis"):
            (tmp / part).mkdir()
        private = PrivateRedis(tmp / "redis")  # its CPU is the bench's alone
        stack.callback(private.close)
        os.environ["FLEET_BENCH_REDIS"] = private.url  # (bench/noop_app.py reads it)
        redis_pid = private.proc.pid
        raw = Raw(tmp / "raw", args.workers, private.url)
        stack.callback(raw.stop)
        fl = Fleetbench(
            tmp / "fleet", args.workers, args.conversations, redis_url=private.url, runs=args.runs
        )
        stack.callback(fl.close)
        pb: Fleetbench | None = None
        if args.pgbouncer:
            (tmp / "pgbouncer").mkdir()

            def bounce(url: str) -> str:
                return stack.enter_context(pgbouncer(url, "transaction")).url

            pb = Fleetbench(
                tmp / "pgbouncer",
                args.workers,
                args.conversations,
                suffix="_pgb",
                bounce=bounce,
                redis_url=private.url,
            )
            stack.callback(pb.close)  # before the bouncer stops (callbacks run last in, first out)
        raw_r: list[Round] = []
        fl_r: list[Round] = []
        pb_r: list[Round] = []
        for _ in range(args.rounds):
            raw_r.append(raw.throughput(args.round_tasks, redis_pid))
            fl_r.append(fl.throughput(args.round_tasks, redis_pid))
            if pb:
                pb_r.append(pb.throughput(args.round_tasks, redis_pid))
        raw_lat = raw.latency(args.tasks, args.rate)
        fl_lat = fl.latency(args.tasks, args.rate)
        pb_lat = pb.latency(args.tasks, args.rate) if pb else []
        trips = fl.round_trips()
    print(
        f"dispatch benchmark: {args.workers} worker processes (fleet's of --runs {args.runs}), "
        f"{args.conversations} conversations; throughput: {args.rounds} rounds of "
        f"{args.round_tasks} tasks per system, in turn; latency: {args.tasks} tasks at "
        f"{args.rate:g}/s"
    )
    print(
        f"{'':28}{'throughput/s median (min-max)':>32}{'CPU ms/task':>13}"
        f"{'submit→start p50':>18}{'p99':>10}"
    )
    rows = [("(a) raw Celery no-op", raw_r, raw_lat), ("(b) fleet followup, echo", fl_r, fl_lat)]
    if pb_r:
        rows.append(("(c) fleet via PgBouncer", pb_r, pb_lat))
    for label, rounds, lat in rows:
        tps = [r.tps for r in rounds]
        cpu = statistics.median(r.cpu_ms for r in rounds)
        print(
            f"{label:28}{statistics.median(tps):>12.0f} ({min(tps):.0f}-{max(tps):.0f})"
            f"{'':>8}{cpu:>11.2f}{pct(lat, 50):>15.2f} ms{pct(lat, 99):>7.2f} ms"
        )

    def paired(over: list[Round], under: list[Round]) -> str:
        ratios = [o.tps / u.tps for o, u in zip(over, under, strict=True)]
        low, high = median_interval(ratios)
        cpu = statistics.median(o.cpu_ms for o in over) / statistics.median(u.cpu_ms for u in under)
        return (
            f"throughput ratio (median of {len(ratios)} paired rounds): "
            f"{statistics.median(ratios):.2f}, 95 % interval {low:.2f}-{high:.2f}   "
            f"CPU per task ratio: {cpu:.2f}"
        )

    print(f"(b)/(a) {paired(fl_r, raw_r)}")
    print(
        f"(b)/(a) p50 difference: {pct(fl_lat, 50) - pct(raw_lat, 50):+.2f} ms   "
        f"p99 ratio: {pct(fl_lat, 99) / pct(raw_lat, 99):.2f}"
    )
    if pb_r:
        print(
            "(c) = (b) through PgBouncer in transaction mode, FLEET_DATABASE_POOLER=transaction: "
            f"(c)/(b) {paired(pb_r, fl_r)}   "
            f"p50 difference: {pct(pb_lat, 50) - pct(fl_lat, 50):+.2f} ms   "
            f"p99 ratio (c)/(b): {pct(pb_lat, 99) / pct(fl_lat, 99):.2f}"
        )
    print(
        f"round trips per task: admission {trips['admit_pg']:.1f} PostgreSQL statements + "
        f"{trips['admit_redis']:.1f} Redis (the wake-up); worker {trips['drain_pg']:.1f} "
        f"PostgreSQL statements + {trips['drain_redis']:.1f} Redis in a drain of one task, "
        f"{trips['batch_pg']:.1f} + {trips['batch_redis']:.1f} in drains of ten; plus "
        f"{trips['drain_hints']:.1f} change hints a task (Redis PUBLISH, pipelined off the run's "
        "thread)"
    )
    print("goal: throughput ratio >= 0.9, p99 within 2x raw's p99, CPU per task within 1.5x raw's")


if __name__ == "__main__":
    main()
