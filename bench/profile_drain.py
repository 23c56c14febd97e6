"""Where a worker's time goes: admission and drain in one process, per store call (no Celery).

Run: ``python -m bench.profile_drain [--tasks N] [--per-conversation K] [--cprofile]``.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.dispatch import PG_ADMIN, REDIS, admin, write_config
from fleet.config import Settings
from fleet.dispatch.leases.redis import RedisLease
from fleet.dispatch.waker import LocalWaker
from fleet.runtime import build, redis_client
from fleet.store import db, migrate


def timed(obj: Any, name: str, into: dict[str, float]) -> None:
    fn: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into[name] += time.perf_counter() - t0

    setattr(obj, name, wrapper)


def postgres_cpu() -> float:
    """CPU seconds used so far by every postgres process on this machine (from /proc)."""
    import os

    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)
            if not fields[0].endswith("(postgres"):
                continue
            parts = fields[1].split()
            total += int(parts[11]) + int(parts[12])
        except (OSError, IndexError):
            continue
    return total / tick


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--per-conversation", type=int, default=5)
    ap.add_argument("--cprofile", action="store_true")
    args = ap.parse_args()
    name = "fleet_profile"
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = db.create(url)
    migrate.upgrade(engine)
    engine.dispose()
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(
        home=tmp, database_url=url, redis_url=REDIS, config_dir=write_config(tmp / "config")
    )
    waker = LocalWaker()
    rt = build(settings, lease=RedisLease(redis_client(settings), 10), waker=waker)
    spent: dict[str, float] = collections.defaultdict(float)
    for method in ("start_next", "checkpoint", "settle", "admit"):
        timed(rt.store, method, spent)
    for method in ("acquire", "release"):
        timed(rt.dispatcher.lease, method, spent)
    n, k = args.tasks, args.per_conversation
    keys = [uuid.uuid4().hex for _ in range(n // k)]
    t0 = time.perf_counter()
    for i in range(n):
        rt.dispatcher.submit("bench", f"m{i}", key=keys[i % len(keys)])
    admit_ms = (time.perf_counter() - t0) / n * 1000
    profiler = cProfile.Profile() if args.cprofile else None
    pg_before = postgres_cpu()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    while (conversation := waker.pop_due(rt.dispatcher.clock())) is not None:
        rt.dispatcher.drain(conversation)
    if profiler:
        profiler.disable()
    drain_ms = (time.perf_counter() - t0) / n * 1000
    cpu_ms = (time.process_time() - cpu0) / n * 1000
    pg_ms = (postgres_cpu() - pg_before) / n * 1000
    print(
        f"{n} tasks, {k} per conversation: admission {admit_ms:.2f} ms/task, "
        f"drain {drain_ms:.2f} ms/task (this process's CPU {cpu_ms:.2f} ms, "
        f"PostgreSQL's CPU {pg_ms:.2f} ms)"
    )
    for key, value in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {key:12} {value / n * 1000:6.3f} ms/task")
    rt.close()
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
