"""Scale benchmark: one workload on 1, 2 and 4 worker processes, and what each task costs.

Workload: ``--tasks`` followup tasks (2000) over ``--conversations`` (200), the instant echo
model, queued before the workers start (their wake-ups parked on a holding queue that is
renamed onto the workers' queue once all are ready, as in bench/dispatch.py). For each number
of worker processes (``celery worker -c 1`` each, fleet's settings), ``--rounds`` rounds:

  tasks/s          first run started to last run finished (median of the rounds);
  CPU per task     user+system seconds, from /proc: the worker processes (main and pool), the
                   PostgreSQL backends serving the bench database, the Redis server;
  statements/task  PostgreSQL statements: pg_stat_statements when the server preloads it, else
                   counted inside the worker processes (bench/scale_app.py, the counters
                   bench/dispatch.py uses);
  commands/task    Redis commands (INFO commandstats of a Redis server of the bench's own).

Run: ``python -m bench.scale`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH; it makes and
drops its own database and runs its own Redis on a free port).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event, select, text

from bench.dispatch import HOLD, PG_ADMIN, admin, write_config
from bench.machine import CORES, PrivateRedis, process_tree, sample, spent
from fleet.config import Settings
from fleet.constants import WAKE_QUEUE
from fleet.dispatch.celery_app import CeleryWaker, app_for
from fleet.dispatch.leases.redis import RedisLease
from fleet.runtime import Runtime, build, redis_client
from fleet.store import db, migrate
from fleet.store import schema as s
from tests.support.fleet import Proc, wait_for


@dataclass
class Row:
    """What one number of worker processes measured, over all its rounds."""

    workers: int
    throughput: list[float] = field(default_factory=list)
    tasks: int = 0
    cpu_workers: float = 0.0
    cpu_pg: float = 0.0
    cpu_redis: float = 0.0
    busy: list[float] = field(default_factory=list)
    statements: int = 0
    commands: Counter[str] = field(default_factory=Counter)


@dataclass
class Admission:
    """What admitting the tasks cost (the bench process admits as `fleet serve` would, no HTTP)."""

    tasks: int = 0
    cpu_admitter: float = 0.0
    cpu_pg: float = 0.0
    cpu_redis: float = 0.0
    statements: int = 0
    commands: int = 0


class Scale:
    """A bench database, a private Redis, the config; runs one round at a time."""

    def __init__(self, tmp: Path, tasks: int, conversations: int) -> None:
        self.tmp = tmp
        self.tasks = tasks
        self.conversations = conversations
        self.redis = PrivateRedis(tmp)
        self.name = f"fleet_scale_{os.getpid()}"
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        admin(f'CREATE DATABASE "{self.name}"')
        url = db.normalize_url(PG_ADMIN).set(database=self.name)
        self.url = url.render_as_string(hide_password=False)
        self.libpq = db.conninfo(url)
        engine = db.create(self.url)
        migrate.upgrade(engine)
        engine.dispose()
        self.config = write_config(tmp / "config")
        settings = self.settings()
        lease = RedisLease(redis_client(settings), settings.lease_ttl)
        #: Admits with wake-ups parked on the holding queue.
        self.admit: Runtime = build(
            settings,
            lease=lease,
            waker=CeleryWaker(app_for(self.redis.url), lease, queue=HOLD, turns_of=WAKE_QUEUE),
        )
        #: The bench's one connection while workers run: its statements and backend are known.
        self.watch = psycopg.connect(self.libpq, autocommit=True)
        self.watch_statements = 0
        self.watch_pid = self.scalar("SELECT pg_backend_pid()")
        self.pgss = self.pg_stat_statements()
        self.round = 0
        self.admission = Admission()
        self.admitted = {"pg": 0}
        self._count_admissions()

    def _count_admissions(self) -> None:
        """The admitting runtime's statements, counted as bench/scale_app.py counts a worker's."""
        store = self.admit.store

        @event.listens_for(store.engine, "before_cursor_execute")
        def _statement(*_a: object) -> None:
            self.admitted["pg"] += 1

        first = store.first

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.admitted["pg"] += 1
            return first(*args, **kwargs)

        store.first = counted  # type: ignore[method-assign]

    def settings(self) -> Settings:
        return Settings(
            home=self.tmp / "home",
            database_url=self.url,
            redis_url=self.redis.url,
            config_dir=self.config,
        )

    def scalar(self, sql: str, *params: object) -> int:
        self.watch_statements += 1
        row = self.watch.execute(sql, params).fetchone()
        assert row is not None
        return int(row[0] or 0)

    def pg_stat_statements(self) -> bool:
        preload = str(self.watch.execute("SHOW shared_preload_libraries").fetchone())
        if "pg_stat_statements" not in preload:
            return False
        self.watch.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return True

    def pg_calls(self) -> int:
        return self.scalar(
            "SELECT sum(calls) FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )

    def backends(self) -> list[int]:
        rows = self.watch.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s",
            (self.watch_pid,),
        ).fetchall()
        self.watch_statements += 1
        return [int(r[0]) for r in rows]

    def reset(self) -> None:
        self.round += 1
        self.redis.client.flushall()
        with self.admit.store.tx() as conn:
            conn.execute(text("TRUNCATE conversations CASCADE"))

    def submit_all(self) -> None:
        """Admit every task, measuring what admission costs: CPU, statements, Redis commands."""
        a = self.admission
        with self.admit.store.read() as conn:  # its backend exists before the first sample
            conn.execute(text("SELECT 1"))
        before = sample([os.getpid()]), sample(self.backends()), sample([self.redis.proc.pid])
        self.redis.client.config_resetstat()
        statements = self.admitted["pg"]
        for i in range(self.tasks):
            key = f"r{self.round}-c{i % self.conversations}"
            self.admit.dispatcher.submit("bench", f"m{i}", key=key)
        a.commands += sum(self.redis.commands().values()) - 1  # less this INFO itself
        a.statements += self.admitted["pg"] - statements
        after = sample([os.getpid()]), sample(self.backends()), sample([self.redis.proc.pid])
        cpu = [spent(b, x) for b, x in zip(before, after, strict=True)]
        a.cpu_admitter += cpu[0]
        a.cpu_pg += cpu[1]
        a.cpu_redis += cpu[2]
        a.tasks += self.tasks
        self.admit.store.engine.dispose()  # no bench backends but `watch` while workers run

    def start_workers(self, n: int, counts: Path) -> list[Proc]:
        env = {
            **os.environ,
            "PYTHONPATH": str(Path.cwd()),
            "FLEET_DATABASE_URL": self.url,
            "FLEET_REDIS_URL": self.redis.url,
            "FLEET_CONFIG_DIR": str(self.config),
            "FLEET_HOME": str(self.tmp / "home"),
            "FLEET_LOG_LEVEL": "WARNING",
            "FLEET_BENCH_COUNTS": str(counts),
        }
        procs = []
        for i in range(n):
            argv = [sys.executable, "-m", "celery", "-A", "bench.scale_app", "worker"]
            argv += ["-c", "1", "-Q", WAKE_QUEUE, "-n", f"scale{i}@%h", "-P", "prefork"]
            argv += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
            log = self.tmp / f"r{self.round}-w{i}.log"
            procs.append(Proc(f"scale{i}", argv, env, log))
        for proc in procs:
            proc.wait_log(r"ready\.", timeout=120)
        return procs

    def finished(self) -> int:
        return self.scalar("SELECT count(*) FROM tasks WHERE finished_at IS NOT NULL")

    def one_round(self, row: Row) -> None:
        self.reset()
        self.submit_all()
        counts = self.tmp / f"counts-{self.round}"
        counts.mkdir()
        procs = self.start_workers(row.workers, counts)
        workers = [pid for p in procs for pid in process_tree(p.pid)]
        redis_pid = self.redis.proc.pid
        before = sample(workers), sample(self.backends()), sample([redis_pid])
        self.redis.client.config_resetstat()
        calls = self.pg_calls() if self.pgss else 0
        watched = self.watch_statements
        start = time.perf_counter()
        self.redis.client.rename(HOLD, WAKE_QUEUE)
        wait_for(lambda: self.finished() >= self.tasks, 600, interval=0.1, what="the tasks")
        wall = time.perf_counter() - start
        commands = self.redis.commands()
        after = sample(workers), sample(self.backends()), sample([redis_pid])
        if self.pgss:
            own = self.watch_statements - watched + 1  # the bench's own, this query included
            row.statements += self.pg_calls() - calls - own
        # Warm shutdown from each worker's main process (not its whole process group): a pool
        # process still taking a leftover turn token ends its turn, then writes its counts.
        for proc in procs:
            os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.popen.wait(60)
            proc.stop()
        if not self.pgss:
            files = list(counts.glob("*.json"))
            assert len(files) == row.workers, f"{len(files)} count files for {row.workers}"
            row.statements += sum(json.loads(f.read_text())["pg"] for f in files)
        cpu = [spent(b, a) for b, a in zip(before, after, strict=True)]
        row.cpu_workers += cpu[0]
        row.cpu_pg += cpu[1]
        row.cpu_redis += cpu[2]
        row.busy.append(sum(cpu) / (wall * CORES))
        row.commands += commands
        row.tasks += self.tasks
        with self.admit.store.read() as conn:
            first, last = conn.execute(
                select(text("min(started_at), max(finished_at)")).select_from(s.runs)
            ).one()
        self.admit.store.engine.dispose()
        row.throughput.append(self.tasks / (last - first).total_seconds())

    def close(self) -> None:
        self.watch.close()
        self.admit.close()
        self.redis.close()
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def report(rows: list[Row], args: argparse.Namespace, bench: Scale) -> None:
    pg_version = bench.watch.execute("SHOW server_version").fetchone()
    print(
        f"scale benchmark: {args.tasks} followup tasks over {args.conversations} conversations, "
        f"instant echo model, {args.rounds} rounds per row (load average at start "
        f"{args.load:.1f})"
    )
    print(
        f"machine: {CORES} cores; each worker process is `celery worker -c 1`. "
        + (
            f"Rows with more worker processes than {CORES} share the {CORES} cores: "
            "they show contention, not scale-out."
            if max(r.workers for r in rows) > CORES
            else ""
        )
    )
    counted = (
        "pg_stat_statements"
        if bench.pgss
        else "counted in the worker processes (pg_stat_statements is not preloaded)"
    )
    print(
        f"PostgreSQL {pg_version[0] if pg_version else '?'} (statements: {counted}); "
        f"Redis {bench.redis.version}, a server of the bench's own"
    )
    print()
    print(
        f"{'workers':>7}  {'tasks/s (rounds)':<24}{'CPU ms per task: workers':>25}"
        f"{'PostgreSQL':>11}{'Redis':>7}{'total':>7}  {'PG stmts':>8}  {'Redis cmds':>10}"
        f"  {'CPU busy':>8}"
    )
    for r in rows:
        rounds = "/".join(f"{x:.0f}" for x in r.throughput)
        tput = f"{statistics.median(r.throughput):>6.0f} ({rounds})"
        per = [1000 * x / r.tasks for x in (r.cpu_workers, r.cpu_pg, r.cpu_redis)]
        print(
            f"{r.workers:>7}  {tput:<24}{per[0]:>25.2f}{per[1]:>11.2f}{per[2]:>7.2f}"
            f"{sum(per):>7.2f}"
            f"  {r.statements / r.tasks:>8.2f}  {sum(r.commands.values()) / r.tasks:>10.2f}"
            f"  {100 * statistics.median(r.busy):>7.0f}%"
        )
    print("(CPU busy: all three parts' CPU over wall time x cores; per task = summed over rounds)")
    a = bench.admission
    print(
        f"admission, per task (one process admitting in a loop, no HTTP): "
        f"CPU {1000 * a.cpu_admitter / a.tasks:.2f} ms admitting, "
        f"{1000 * a.cpu_pg / a.tasks:.2f} ms PostgreSQL, {1000 * a.cpu_redis / a.tasks:.2f} ms "
        f"Redis; {a.statements / a.tasks:.2f} PostgreSQL statements, "
        f"{a.commands / a.tasks:.2f} Redis commands"
    )
    for r in rows:
        top = ", ".join(f"{k} {v / r.tasks:.2f}" for k, v in r.commands.most_common(8))
        print(f"Redis commands per task, {r.workers} worker(s): {top}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    args.load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        bench = Scale(Path(d), args.tasks, args.conversations)
        try:
            rows = [Row(n) for n in args.workers]
            for _ in range(args.rounds):  # rows in turn, so each sees the machine alike
                for row in rows:
                    bench.one_round(row)
            report(rows, args, bench)
        finally:
            bench.close()


if __name__ == "__main__":
    main()
