"""Fairness benchmark: how long another tenant's first task waits behind one tenant's flood.

For each flood size (``--floods``, default 100, 1,000 and 10,000 tasks): tenant ``alpha``'s
flood (two tasks a conversation) is admitted with its wake-ups parked on a holding queue; one
worker (``--concurrency`` 2) starts and the holding queue is renamed onto its queue (one Redis
command), so the whole flood is due at once. Once ``--running`` of its tasks have finished,
tenant ``bravo`` submits one task and, at the same moment, ``alpha`` one more of its own (a new
conversation): the baseline, which waits its turn behind alpha's flood as any task of one
tenant waits behind that tenant's earlier ones (and as every task waited before tenants took
turns). The figure is submit → run start of each; the baseline is given up after
``--patience`` seconds (``> N s``). The echo model takes ``--run-ms`` a run.

Run: ``python -m bench.fairness`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH: it makes
and drops its own database and runs its own Redis).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bench.dispatch import HOLD, PG_ADMIN, admin
from bench.machine import PrivateRedis
from fleet.config import Settings
from fleet.constants import WAKE_QUEUE
from fleet.dispatch.celery_app import CeleryWaker, app_for
from fleet.dispatch.leases.redis import RedisLease
from fleet.runtime import Runtime, build, redis_client
from fleet.store import db, migrate
from tests.support.fleet import Fleet, wait_for


def write_config(root: Path, run_ms: int) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    (root / "agents" / "ticks.toml").write_text(
        f'[model]\nprovider = "echo"\ndelay_ms = {run_ms}\n'
    )
    (root / "deployments" / "work.toml").write_text('agent = "ticks"\n')
    return root


class Bench:
    def __init__(self, tmp: Path, run_ms: int) -> None:
        self.name = f"fleet_fair_{os.getpid()}"
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        admin(f'CREATE DATABASE "{self.name}"')
        self.url = (
            db.normalize_url(PG_ADMIN).set(database=self.name).render_as_string(hide_password=False)
        )
        engine = db.create(self.url)
        migrate.upgrade(engine)
        engine.dispose()
        self.tmp = tmp
        self.redis = PrivateRedis(tmp)
        self.config = write_config(tmp / "config", run_ms)
        settings = self.settings()
        self.rt: Runtime = build(settings)
        lease = RedisLease(redis_client(settings), settings.lease_ttl)
        #: Admits like ``rt`` but parks its tokens on the holding queue (the same turns).
        self.holding: Runtime = build(
            settings,
            lease=lease,
            waker=CeleryWaker(app_for(self.redis.url), lease, queue=HOLD, turns_of=WAKE_QUEUE),
        )

    def settings(self) -> Settings:
        return Settings(
            home=self.tmp / "home",
            database_url=self.url,
            redis_url=self.redis.url,
            config_dir=self.config,
        )

    def reset(self) -> None:
        self.redis.client.flushdb()
        with self.rt.store.tx() as conn:
            conn.execute(text("TRUNCATE conversations CASCADE"))

    def count(self, sql: str) -> int:
        with self.rt.store.read() as conn:
            return int(conn.execute(text(sql)).scalar_one())

    def started(self, task_id: uuid.UUID) -> datetime | None:
        return self.rt.store.get_task(task_id).started_at

    def flood(
        self, n: int, concurrency: int, running: int, patience: float
    ) -> tuple[float, float | None, int]:
        """(bravo's wait, alpha's extra task's wait or None past ``patience``, flood tasks
        still waiting when they were submitted)."""
        self.reset()
        submit = self.holding.dispatcher.submit
        for i in range(n):
            submit("work", f"a{i}", scope="api:alpha", key=f"c{i // 2}", tenant="alpha")
        fleet = Fleet(
            self.tmp,
            database_url=self.url,
            redis_url=self.redis.url,
            config_dir=self.config,
            log_level="WARNING",
        )
        try:
            fleet.worker("w1", concurrency=concurrency)
            self.redis.client.rename(HOLD, WAKE_QUEUE)
            done = "SELECT count(*) FROM tasks WHERE finished_at IS NOT NULL"
            wait_for(lambda: self.count(done) >= running, 300, what="the flood to run")
            waiting = self.count("SELECT count(*) FROM tasks WHERE status = 'queued'")
            submit = self.rt.dispatcher.submit
            other = submit("work", "b", scope="api:bravo", key="b", tenant="bravo").task
            own = submit("work", "a", scope="api:alpha", key="extra", tenant="alpha").task
            began = wait_for(lambda: self.started(other.id), 120, what="bravo's task")
            bravo = (began - other.created_at).total_seconds()
            deadline = time.monotonic() + patience
            alpha: float | None = None
            while time.monotonic() < deadline:
                at = self.started(own.id)
                if at is not None:
                    alpha = (at - own.created_at).total_seconds()
                    break
                time.sleep(0.1)
            return bravo, alpha, waiting
        finally:
            fleet.stop()

    def close(self) -> None:
        self.rt.close()
        self.holding.close()
        self.redis.close()
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--floods", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--run-ms", type=int, default=100)
    ap.add_argument("--running", type=int, default=20, help="flood tasks done before measuring")
    ap.add_argument("--patience", type=float, default=60.0)
    args = ap.parse_args()
    started = datetime.now(UTC)
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        bench = Bench(Path(d), args.run_ms)
        try:
            for n in args.floods:
                rows.append((n, *bench.flood(n, args.concurrency, args.running, args.patience)))
        finally:
            bench.close()
    print(
        f"fairness benchmark ({started:%Y-%m-%d}, load average at start {load:.1f}): one worker, "
        f"concurrency {args.concurrency}, "
        f"echo model {args.run_ms} ms a run; tenant alpha's flood (2 tasks a conversation), "
        f"then, {args.running} of its tasks done, one task of tenant bravo and one more of "
        "alpha's own (a new conversation: the baseline, a task behind alpha's backlog)"
    )
    print(f"{'flood':>7}{'still queued':>14}{'bravo waits':>14}{'alpha waits (baseline)':>25}")
    for n, bravo, alpha, waiting in rows:
        base = f"{alpha:.2f} s" if alpha is not None else f"> {args.patience:.0f} s"
        print(f"{n:>7}{waiting:>14}{bravo:>12.2f} s{base:>25}")
    print(
        "goal: bravo's wait about one run and flat across floods (issue: 16.8 s behind 300 "
        "tasks before tenants took turns)"
    )


if __name__ == "__main__":
    main()
