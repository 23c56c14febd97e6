"""Redis Sentinel failover under load: what became of the accepted tasks, and how long it took.

A master, a replica and three sentinels (``redis-server``, started here on free ports of
127.0.0.1; ``down-after-milliseconds`` 1000), a PostgreSQL database created here from scratch
(dropped after), two workers (two processes each) and a beat. Tasks are submitted in the
dispatcher (the API's own path; ``--api``: as SubmitTask requests to a ``fleet serve``) by one
thread per conversation; once a share of them were
accepted (stored: the submission returned) the master is SIGKILLed and submissions go on through
the failover. Printed per round: accepted, lost, duplicated (a reply stored twice), retried,
out of order, refused submissions, and the seconds from the kill to the sentinels' new master,
to the first task finished, and to the first finish of a task submitted after the kill.

Run: ``python -m bench.failover [--rounds 3] [--conversations 15] [--per 10] [--run-ms 50]
[--pace-ms 50] [--api]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from pathlib import Path

from bench.dispatch import PG_ADMIN, admin
from fleet.store import db, migrate
from tests.support import failover
from tests.support.redis_servers import sentinel_group


def write_config(root: Path, run_ms: int) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    (root / "agents" / "work.toml").write_text(
        f'[model]\nprovider = "echo"\ndelay_ms = [0, {run_ms}]\n'
    )
    (root / "deployments" / "work.toml").write_text('agent = "work"\n')
    return root


def one_round(args: argparse.Namespace) -> failover.Failover:
    name = f"fleet_bench_failover_{uuid.uuid4().hex[:8]}"
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    admin(f'CREATE DATABASE "{name}"')
    try:
        engine = db.create(url)
        migrate.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="fleet-bench-failover-") as tmp_name:
            tmp = Path(tmp_name)
            config = write_config(tmp / "config", args.run_ms)
            with sentinel_group(tmp / "redis") as group:
                return failover.run(
                    tmp,
                    group,
                    url,
                    config,
                    deployment="work",
                    conversations=args.conversations,
                    per=args.per,
                    kill_after=args.kill_after,
                    pace_s=args.pace_ms / 1000,
                    via_api=args.api,
                    lease_ttl=args.lease_ttl,
                    sweep_interval=args.sweep_interval,
                )
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=15)
    ap.add_argument("--per", type=int, default=10, help="tasks per conversation")
    ap.add_argument("--run-ms", type=int, default=50, help="each run takes 0 to this long")
    ap.add_argument("--kill-after", type=float, default=0.3, help="share accepted before the kill")
    ap.add_argument("--pace-ms", type=float, default=50, help="one submission per this long")
    ap.add_argument("--api", action="store_true", help="submit as SubmitTask to `fleet serve`")
    ap.add_argument("--lease-ttl", type=float, default=3.0)
    ap.add_argument("--sweep-interval", type=float, default=1.0)
    args = ap.parse_args()
    results = []
    for i in range(args.rounds):
        found = one_round(args)
        results.append(found)
        print(f"round {i + 1}:\n  " + "\n  ".join(found.lines()), flush=True)
    totals = [r.outcome for r in results]
    print(
        f"\n{len(results)} rounds: accepted {sum(o.accepted for o in totals)}, "
        f"lost {sum(o.lost for o in totals)}, duplicated {sum(o.duplicated for o in totals)}, "
        f"out of order {sum(o.out_of_order for o in totals)}, "
        f"refused {sum(r.refused for r in results)}"
    )
    new = [r.first_new_finish_s for r in results if r.first_new_finish_s is not None]
    print(
        f"median: new master after {statistics.median(r.promoted_s for r in results):.2f} s, "
        + (f"first new task finished after {statistics.median(new):.2f} s" if new else "")
    )


if __name__ == "__main__":
    main()
