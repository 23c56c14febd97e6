"""Footprint benchmark: how fast the CLI starts, how much memory fleet's processes hold.

CLI (embedded, a project with the bench config and a store of ``--tasks`` finished tasks), median
of ``--repeat`` runs each, beside the interpreter's own start (``python -c pass``):

  fleet --help      wall seconds and modules imported
  fleet tasks ls    wall seconds and modules imported

Processes (PostgreSQL on 127.0.0.1, a redis-server of the bench's own): ``fleet serve`` and one
worker (``celery worker -c 2``) after ``--tasks`` tasks submitted over HTTP have finished,
beside the same kinds of process with nothing of fleet's in them (a bare FastAPI app under
uvicorn, a raw Celery worker with a no-op task):

  VmRSS of the API process, the worker's main process and each pool process (MiB)

Run: ``python -m bench.footprint`` (it makes and drops its own database).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.dispatch import PG_ADMIN, admin, write_config
from bench.machine import PrivateRedis, free_port, process_tree, rss_mib
from fleet.store import db, migrate
from tests.support.fleet import Fleet, Proc, wait_for

ROOT = Path(__file__).resolve().parents[1]
COUNT = "import sys; print(len(sys.modules))"


def timed(argv: list[str], cwd: Path, env: dict[str, str], repeat: int) -> float:
    """Median wall seconds of ``argv`` (one unmeasured run first: caches warm)."""
    took = []
    for i in range(repeat + 1):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
        if i:
            took.append(time.perf_counter() - started)
    return statistics.median(took)


def modules(args: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Modules in ``sys.modules`` once the CLI command has run."""
    probe = (
        f"import sys; sys.argv = ['fleet', *{args!r}]\n"
        "from fleet.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(len(sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return int(done.stderr.strip().splitlines()[-1])


def cli(tmp: Path, tasks: int, repeat: int) -> None:
    project = tmp / "cli"
    write_config(project / "config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user runs it: compiled modules cached
    fleet = [sys.executable, "-m", "fleet.cli"]
    for i in range(tasks):
        subprocess.run(
            [*fleet, "run", "bench", f"hello {i}"],
            cwd=project,
            env=env,
            check=True,
            capture_output=True,
        )
    base = timed([sys.executable, "-c", "pass"], project, env, repeat)
    print(f"CLI (embedded, {tasks} tasks in the store; median of {repeat} runs)")
    print(f"  {'python -c pass (baseline)':28}{base:>7.3f} s")
    for args in (["--help"], ["tasks", "ls"]):
        took = timed([*fleet, *args], project, env, repeat)
        count = modules(args, project, env)
        label = "fleet " + " ".join(args)
        print(
            f"  {label:28}{took:>7.3f} s   {count:>5} modules   ({took - base:+.3f} s over python)"
        )


def processes(tmp: Path, tasks: int) -> None:
    redis = PrivateRedis(tmp)
    name = f"fleet_footprint_{os.getpid()}"
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = db.create(url)
    migrate.upgrade(engine)
    engine.dispose()
    fleet = Fleet(
        tmp, database_url=url, redis_url=redis.url, config_dir=write_config(tmp / "config")
    )
    fleet.env["FLEET_LOG_LEVEL"] = "WARNING"
    try:
        api = fleet.serve()
        worker = fleet.worker("w1", concurrency=2)
        ids = []
        with httpx.Client(base_url=api, timeout=10) as client:
            for i in range(tasks):
                answer = client.post(
                    "/v1/tasks",
                    json={
                        "deployment": "bench",
                        "input": f"hello {i}",
                        "conversationKey": f"c{i % 10}",
                    },
                )
                answer.raise_for_status()
                ids.append(answer.json()["id"])

            def finished() -> bool:
                return all(
                    client.get(f"/v1/tasks/{t}").json()["status"] == "succeeded" for t in ids
                )

            wait_for(finished, 120, interval=0.5, what=f"{tasks} tasks to finish")
        api_pid = fleet.procs[0].pid
        tree = process_tree(worker.pid)
        fleet_rows = [("fleet serve", rss_mib(api_pid)), ("worker main", rss_mib(worker.pid))]
        fleet_rows += [(f"worker pool process {i + 1}", rss_mib(p)) for i, p in enumerate(tree[1:])]
    finally:
        fleet.stop()
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    base_rows = baselines(tmp, redis.url)
    redis.close()
    print(f"processes after {tasks} tasks (VmRSS, MiB)")
    for label, mib in fleet_rows:
        print(f"  {label:28}{mib:>7.1f}")
    for label, mib in base_rows:
        print(f"  {label:28}{mib:>7.1f}   (baseline)")


def baselines(tmp: Path, redis_url: str) -> list[tuple[str, float]]:
    """A bare FastAPI app under uvicorn, and a raw Celery worker (-c 2) with a no-op task."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLEET_BENCH_REDIS": redis_url}
    port = free_port()
    app = Proc(
        "bare-api",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.bare_app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env,
        tmp / "bare-api.log",
    )
    raw = Proc(
        "raw-worker",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.noop_app",
            "worker",
            "-c",
            "2",
            "-P",
            "prefork",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ],
        env,
        tmp / "raw-worker.log",
    )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).is_success
            except httpx.HTTPError:
                return False

        wait_for(up, 30, interval=0.1, what="the bare API to answer")
        raw.wait_log(r"ready\.")
        tree = process_tree(raw.pid)
        rows = [
            ("bare FastAPI app", rss_mib(app.pid)),
            ("raw Celery worker main", rss_mib(raw.pid)),
        ]
        rows += [(f"raw Celery pool process {i + 1}", rss_mib(p)) for i, p in enumerate(tree[1:])]
        return rows
    finally:
        app.stop()
        raw.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7, help="CLI runs per command (median)")
    args = ap.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("bench.footprint needs redis-server on PATH (apt-get install redis)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "fleet").mkdir()
        cli(tmp, args.tasks, args.repeat)
        processes(tmp / "fleet", args.tasks)


if __name__ == "__main__":
    main()
