"""Model limits benchmark: the rate a provider sees from a fleet, and what limits cost the calls.

A fake OpenAI-compatible server runs here; an agent calls it through real Celery worker
processes (``--concurrency`` each) on a database and a redis-server of the bench's own. For 1 and
2 workers, ``--tasks`` tasks (each its own conversation, one model call each) run twice: without
a model limit (the baseline: whatever the workers can send) and under ``[[model_limits]]
match = "openai:*"`` with ``--rpm`` requests a minute and a burst of ``--burst``. Printed: the
requests a second the server saw (over the whole run, and the most in any 1 s and 5 s window)
against the limit plus its burst, and the calls' added wait (what each model step recorded as
``waited_s``: mean, 95th percentile, most).

Then the issue's 429 scenario, with 2 workers: the server answers the first call 429 with
``Retry-After: 3``; printed is how many requests reached it in the 2.5 s after it, without a
limit (each process retries on its own) and with one (a shared cooldown).

Run: ``python -m bench.model_limits`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from bench.dispatch import PG_ADMIN, admin
from bench.scale import PrivateRedis
from fleet.config import Settings
from fleet.runtime import Runtime, build
from fleet.store import db, migrate
from tests.support.fleet import Fleet, wait_for
from tests.support.openai_server import FakeOpenAI


@dataclass(frozen=True)
class Figures:
    workers: int
    limited: bool
    rate: float
    most_1s: int
    most_5s: int
    waits: Sequence[float]


def most_in(arrivals: Sequence[float], window: float) -> int:
    return max((sum(1 for t in arrivals if t0 <= t < t0 + window) for t0 in arrivals), default=0)


class Bench:
    def __init__(self, tmp: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = tmp
        self.name = f"fleet_limits_{os.getpid()}"
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        admin(f'CREATE DATABASE "{self.name}"')
        self.url = (
            db.normalize_url(PG_ADMIN).set(database=self.name).render_as_string(hide_password=False)
        )
        engine = db.create(self.url)
        migrate.upgrade(engine)
        engine.dispose()
        self.redis = PrivateRedis(tmp)
        self.server = FakeOpenAI().start()

    def configure(self, root: Path, limited: bool) -> Path:
        (root / "agents").mkdir(parents=True)
        (root / "deployments").mkdir()
        (root / "agents" / "talk.toml").write_text(
            f'[model]\nprovider = "openai"\nname = "gpt-bench"\n'
            f'base_url = "{self.server.base_url}"\nmax_retries = 3\n'
        )
        (root / "deployments" / "talk.toml").write_text('agent = "talk"\n')
        if limited:
            (root / "fleet.toml").write_text(
                f'[[model_limits]]\nmatch = "openai:*"\nrequests_per_minute = {self.args.rpm}\n'
                f'burst = {self.args.burst}\nmax_wait = "300s"\n'
            )
        return root

    def run(self, workers: int, limited: bool, *, first_429: bool = False) -> tuple[Runtime, list]:
        """Start ``workers`` workers, run the tasks, and return the runtime and the tasks."""
        self.redis.client.flushdb()
        seen = len(self.server.requests)
        tag = f"{workers}{'l' if limited else 'b'}{'c' if first_429 else ''}"
        root = self.configure(self.tmp / f"config-{tag}", limited)
        settings = Settings(
            home=self.tmp / "home", database_url=self.url, redis_url=self.redis.url, config_dir=root
        )
        rt = build(settings)
        with rt.store.tx() as conn:
            conn.execute(text("TRUNCATE conversations CASCADE"))
        fleet = Fleet(
            self.tmp / tag,
            database_url=self.url,
            redis_url=self.redis.url,
            config_dir=root,
            log_level="WARNING",
        )
        (self.tmp / tag).mkdir()
        try:
            for i in range(workers):
                fleet.worker(f"w{i + 1}", concurrency=self.args.concurrency)
            if first_429:
                self.server.enqueue(429, headers={"retry-after": "3"})
            tasks = [
                rt.dispatcher.submit("talk", f"t{i}", key=f"{tag}-{i}").task
                for i in range(self.args.tasks)
            ]

            def done() -> bool:
                return all(rt.store.get_task(t.id).status.terminal for t in tasks)

            wait_for(done, 600, interval=0.2, what="the tasks to finish")
        finally:
            fleet.stop()
        self.arrivals = sorted(r.at for r in self.server.requests[seen:])
        return rt, tasks

    def measure(self, workers: int, limited: bool) -> Figures:
        rt, tasks = self.run(workers, limited)
        try:
            waits = []
            for t in tasks:
                run = rt.store.runs_of(t.id)[-1]
                for step in rt.store.get_run(run.id).steps:
                    if step.kind == "model" and isinstance(step.output, dict):
                        waits.append(float(step.output.get("waited_s", 0.0)))
        finally:
            rt.close()
        a = self.arrivals
        span = a[-1] - a[0] if len(a) > 1 else 0.0
        rate = (len(a) - 1) / span if span > 0 else float("inf")
        return Figures(workers, limited, rate, most_in(a, 1.0), most_in(a, 5.0), waits)

    def cooldown(self, limited: bool) -> int:
        """Requests that reached the server in the 2.5 s after its 429, 2 workers."""
        rt, _ = self.run(2, limited, first_429=True)
        rt.close()
        first = self.arrivals[0]
        return sum(1 for t in self.arrivals[1:] if t - first <= 2.5)

    def close(self) -> None:
        self.server.stop()
        self.redis.close()
        admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def p95(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else (values or [0.0])[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rpm", type=int, default=300)
    ap.add_argument("--burst", type=int, default=5)
    args = ap.parse_args()
    started = datetime.now(UTC)
    load = os.getloadavg()[0]
    rows: list[Figures] = []
    cooled: dict[bool, int] = {}
    with tempfile.TemporaryDirectory() as d:
        bench = Bench(Path(d), args)
        try:
            for workers in (1, 2):
                for limited in (False, True):
                    rows.append(bench.measure(workers, limited))
            for limited in (False, True):
                cooled[limited] = bench.cooldown(limited)
        finally:
            bench.close()
    per_s = args.rpm / 60.0
    print(
        f"model limits benchmark ({started:%Y-%m-%d}, load average at start {load:.1f}): "
        f"{args.tasks} tasks of one model call each, workers of concurrency {args.concurrency}, "
        f"a fake OpenAI-compatible server answering at once; limit: requests_per_minute "
        f"{args.rpm} ({per_s:g}/s), burst {args.burst}"
    )
    print(
        f"{'workers':>7}  {'limit':<8}{'req/s':>8}{'most in 1 s':>13}{'most in 5 s':>13}"
        f"{'wait mean':>11}{'p95':>8}{'most':>8}"
    )
    for f in rows:
        rate = "inf" if f.rate == float("inf") else f"{f.rate:.2f}"
        w = f.waits or [0.0]
        print(
            f"{f.workers:>7}  {'on' if f.limited else 'off':<8}{rate:>8}{f.most_1s:>13}"
            f"{f.most_5s:>13}{statistics.mean(w):>9.2f} s{p95(w):>6.2f} s{max(w):>6.2f} s"
        )
    print(
        f"bound under the limit: at most {per_s + args.burst:g} in 1 s, "
        f"{5 * per_s + args.burst:g} in 5 s; steady rate {per_s:g}/s"
    )
    print(
        "after a 429 with Retry-After: 3 (2 workers): requests in the next 2.5 s: "
        f"{cooled[False]} without a limit, {cooled[True]} with one (issue: 19 before; with a "
        "limit, only calls already on their way when the 429 came)"
    )


if __name__ == "__main__":
    main()
