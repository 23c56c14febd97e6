"""Dispatch benchmark: fleet followup vs a raw Celery no-op, same broker and machine, one run.

Two phases for each system:
  throughput  all tasks queued first (workers stopped), then workers start: tasks/s from the
              first start to the last finish;
  latency     workers running, tasks submitted at a steady rate below capacity:
              submit→start p50/p99.
Plus database round trips per fleet task (statements + BEGIN + COMMIT), counted in-process on the
same code path. Run: ``python -m bench.dispatch`` (PostgreSQL and Redis on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import create_engine, event, select, text

from fleet.config import Settings
from fleet.runtime import build
from fleet.store import db, migrate
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for

PG_ADMIN = os.environ.get("FLEET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("FLEET_BENCH_REDIS", "redis://127.0.0.1:6379/14")


def admin(sql: str) -> None:
    eng = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(text(sql))
    eng.dispose()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def write_config(root: Path) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    (root / "agents" / "instant.toml").write_text('model = "echo"\n')
    (root / "deployments" / "bench.toml").write_text('agent = "instant"\n')
    return root


# -- raw Celery --------------------------------------------------------------------------------


def raw_celery(tmp: Path, n: int, rate: float, workers: int) -> dict[str, float]:
    from bench.noop_app import app

    r = redis.Redis.from_url(REDIS)
    r.flushdb()
    env = {**os.environ, "FLEET_REDIS_URL": REDIS, "PYTHONPATH": str(Path.cwd())}

    def start_workers() -> list[Proc]:
        procs = []
        for i in range(workers):
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
            procs.append(Proc(f"noop{i}", argv, env, tmp / f"noop{i}.log"))
        for p in procs:
            p.wait_log(r"ready\.")
        return procs

    # throughput: queue everything, then start the workers
    for _ in range(n):
        app.send_task("bench.noop", args=[time.time()], queue="fleet")
    procs = start_workers()
    wait_for(lambda: r.llen("bench:noop:start") >= n, 300, interval=0.05, what="raw tasks")
    starts = [float(x) for x in r.lrange("bench:noop:start", 0, -1)]
    # the task's own start time is its finish time too (a no-op)
    throughput = n / (max(starts) - min(starts))
    r.delete("bench:noop:lat", "bench:noop:start")
    # latency: steady submissions
    gap = 1.0 / rate
    t_next = time.perf_counter()
    for _ in range(n):
        t_next += gap
        app.send_task("bench.noop", args=[time.time()], queue="fleet")
        delay = t_next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    wait_for(lambda: r.llen("bench:noop:lat") >= n, 300, interval=0.05, what="raw latency tasks")
    lat = [float(x) * 1000 for x in r.lrange("bench:noop:lat", 0, -1)]
    for p in procs:
        p.stop()
    r.close()
    return {"throughput": throughput, "p50": pct(lat, 50), "p99": pct(lat, 99)}


# -- fleet ---------------------------------------------------------------------------------------


def fleet_bench(
    tmp: Path, n: int, rate: float, workers: int, conversations: int
) -> dict[str, float]:
    name = f"fleet_bench_{os.getpid()}"
    admin(f'DROP DATABASE IF EXISTS "{name}"')
    admin(f'CREATE DATABASE "{name}"')
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = db.create(url)
    migrate.upgrade(engine)
    engine.dispose()
    r = redis.Redis.from_url(REDIS)
    r.flushdb()
    config = write_config(tmp / "config")
    settings = Settings(home=tmp / "home", database_url=url, redis_url=REDIS, config_dir=config)
    rt = build(settings)
    fleet = Fleet(tmp, database_url=url, redis_url=REDIS, config_dir=config, log_level="WARNING")
    try:
        # throughput: queue n tasks over the conversations, then start the workers
        for i in range(n):
            rt.dispatcher.submit("bench", f"m{i}", key=f"c{i % conversations}")
        for i in range(workers):
            fleet.worker(f"fleet{i}")
        wait_for(lambda: finished(rt) >= n, 600, interval=0.1, what="fleet throughput tasks")
        with rt.store.read() as conn:
            first, last = conn.execute(
                select(text("min(started_at), max(finished_at)")).select_from(s.runs)
            ).one()
        throughput = n / (last - first).total_seconds()
        # latency: steady submissions, each a new task of one of the conversations
        with rt.store.tx() as conn:
            conn.execute(
                text(
                    "DELETE FROM traces; DELETE FROM messages; DELETE FROM runs; DELETE FROM tasks"
                )
            )
        gap = 1.0 / rate
        t_next = time.perf_counter()
        for i in range(n):
            t_next += gap
            rt.dispatcher.submit("bench", f"l{i}", key=f"c{i % conversations}")
            delay = t_next - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        wait_for(lambda: finished(rt) >= n, 600, interval=0.1, what="fleet latency tasks")
        with rt.store.read() as conn:
            lat = [
                (row.started_at - row.created_at).total_seconds() * 1000
                for row in conn.execute(
                    select(s.tasks.c.created_at, s.runs.c.started_at).join(
                        s.runs, s.runs.c.task_id == s.tasks.c.id
                    )
                )
            ]
    finally:
        fleet.stop()
        rt.close()
        r.close()
    trips = round_trips(url, tmp, conversations)
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return {"throughput": throughput, "p50": pct(lat, 50), "p99": pct(lat, 99), **trips}


def finished(rt) -> int:  # type: ignore[no-untyped-def]
    with rt.store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM tasks WHERE finished_at IS NOT NULL")
            ).scalar_one()
        )


def round_trips(url: str, tmp: Path, conversations: int) -> dict[str, float]:
    """PostgreSQL statements and Redis round trips per task, admission and drain apart.

    Counted on the fleet's own code path in this process: statements by SQLAlchemy's cursor
    events (on PostgreSQL each hot-path statement is its own transaction: no BEGIN/COMMIT round
    trips), Redis round trips by counting the lease client's commands and the wake-up publishes.
    """
    settings = Settings(
        home=tmp / "home", database_url=url, redis_url=REDIS, config_dir=tmp / "config"
    )
    rt = build(settings)
    counts = {"pg": 0, "redis": 0}

    @event.listens_for(rt.store.engine, "before_cursor_execute")
    def _stmt(*_a: object) -> None:
        counts["pg"] += 1

    first = rt.store.first  # the PostgreSQL hot path runs on the driver connection

    def counted_first(*args: Any, **kwargs: Any) -> Any:
        counts["pg"] += 1
        return first(*args, **kwargs)

    rt.store.first = counted_first  # type: ignore[method-assign]

    lease_client = rt.dispatcher.lease._redis  # type: ignore[attr-defined]
    execute = lease_client.execute_command

    def counted(*args: object, **kwargs: object) -> object:
        counts["redis"] += 1
        return execute(*args, **kwargs)

    lease_client.execute_command = counted
    waker_app = rt.dispatcher.waker._app  # type: ignore[attr-defined]
    send = waker_app.send_task

    def counted_send(*args: object, **kwargs: object) -> object:
        counts["redis"] += 1
        return send(*args, **kwargs)

    waker_app.send_task = counted_send
    k = 200
    keys = [f"rt-{uuid.uuid4().hex[:8]}" for _ in range(k)]
    convs = [rt.dispatcher.submit("bench", "x", key=key).task.conversation_id for key in keys]
    admit = (counts["pg"] / k, counts["redis"] / k)
    counts.update(pg=0, redis=0)
    for conv in convs:
        rt.dispatcher.drain(conv)
    drain = (counts["pg"] / k, counts["redis"] / k)
    waker_app.send_task = send
    rt.close()
    return {
        "rt_admit_pg": admit[0],
        "rt_admit_redis": admit[1],
        "rt_drain_pg": drain[0],
        "rt_drain_redis": drain[1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=100.0, help="latency phase: submissions/s")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "raw").mkdir()
        (tmp / "fleet").mkdir()
        raw = raw_celery(tmp / "raw", args.tasks, args.rate, args.workers)
        fl = fleet_bench(tmp / "fleet", args.tasks, args.rate, args.workers, args.conversations)
    print(
        f"dispatch benchmark: {args.tasks} tasks, {args.workers} worker processes, "
        f"{args.conversations} conversations, latency phase at {args.rate:g}/s"
    )
    print(f"{'':28}{'throughput/s':>14}{'submit→start p50':>18}{'p99':>10}")
    print(
        f"{'(a) raw Celery no-op':28}{raw['throughput']:>14.0f}"
        f"{raw['p50']:>15.2f} ms{raw['p99']:>7.2f} ms"
    )
    print(
        f"{'(b) fleet followup, echo':28}{fl['throughput']:>14.0f}"
        f"{fl['p50']:>15.2f} ms{fl['p99']:>7.2f} ms"
    )
    print(
        f"ratio (b)/(a) throughput: {fl['throughput'] / raw['throughput']:.2f}   "
        f"p50 difference: {fl['p50'] - raw['p50']:+.2f} ms"
    )
    print(
        f"round trips per task: admission {fl['rt_admit_pg']:.1f} PostgreSQL statements + "
        f"{fl['rt_admit_redis']:.1f} Redis (the wake-up); worker "
        f"{fl['rt_drain_pg']:.1f} PostgreSQL statements + {fl['rt_drain_redis']:.1f} Redis "
        "(a drain of one task; fewer per task when a drain runs several)"
    )
    print("goal: throughput ratio >= 0.60, p50 within raw + 3 ms")


if __name__ == "__main__":
    main()
