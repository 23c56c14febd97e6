"""SubmitTask throughput and latency at 50 concurrent clients, beside a bare FastAPI endpoint.

Both servers run the same way (one uvicorn process on 127.0.0.1) in the same run; the fleet one
is ``fleet serve`` against a PostgreSQL database created here from scratch (dropped after) and
Redis. Each request admits a task (one transaction) and publishes its wake-up; no worker runs, so
what is measured is intake alone. The load comes from ``wrk`` (``apt-get install wrk``) when it
is on PATH, else from httpx async clients in this process (which then share the CPU).

Run: ``python -m bench.api [--clients 50] [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import redis
from sqlalchemy import create_engine, text

from fleet.store import db, migrate
from tests.support.fleet import Fleet, Proc, wait_for

PG_ADMIN = os.environ.get("FLEET_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("FLEET_BENCH_API_REDIS", "redis://127.0.0.1:6379/12")
KEY = "bench-key-0123456789abcdef"
BODY = {"deployment": "bench", "input": "hello"}


def admin(sql: str) -> None:
    eng = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with eng.connect() as conn:
        conn.execute(text(sql))
    eng.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(root: Path) -> Path:
    for folder in ("agents", "deployments", "callers"):
        (root / folder).mkdir(parents=True)
    (root / "agents" / "instant.toml").write_text('model = "echo"\n')
    (root / "deployments" / "bench.toml").write_text('agent = "instant"\n')
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    (root / "callers" / "bench.toml").write_text(f'source = "api"\nkey_sha256 = "{digest}"\n')
    return root


def start_bare(tmp: Path, env: dict[str, str]) -> tuple[Proc, str]:
    port = free_port()
    argv = [
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
        "--no-access-log",
    ]
    proc = Proc("bare", argv, env, tmp / "bare.log")
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, interval=0.1, what="the bare app to answer")
    return proc, url


# -- load -------------------------------------------------------------------------------------


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def load_wrk(url: str, clients: int, seconds: float, tmp: Path) -> dict[str, float]:
    script = tmp / "submit.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {KEY}"\n'
        f"wrk.body = {json.dumps(json.dumps(BODY))}\n"
    )
    argv = ["wrk", "-t2", f"-c{clients}", f"-d{seconds:g}s", "--latency", "-s", str(script)]
    out = subprocess.run([*argv, f"{url}/v1/tasks"], capture_output=True, text=True, check=True)
    found = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out.stdout, re.M))
    if "99" not in found:  # no request finished (a warm-up against a cold server can do that)
        raise SystemExit(f"wrk got no answers from {url}:\n{out.stdout}")
    total = int(re.search(r"(\d+) requests in", out.stdout).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    errors = re.search(r"Socket errors: (.*)$", out.stdout, re.M)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out.stdout).group(1)),  # type: ignore[union-attr]
        "p50": _ms(found["50"]),
        "p99": _ms(found["99"]),
        "requests": total,
        "failed": int(bad.group(1)) if bad else 0,
        "socket_errors": 1 if errors else 0,
    }


async def _load_httpx(url: str, clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    failed = errors = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, limits=limits, headers=headers, timeout=30) as http:

        async def client() -> None:
            nonlocal failed, errors
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    r = await http.post("/v1/tasks", json=BODY)
                except httpx.TransportError:  # a dropped connection: counted, not fatal
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                failed += r.status_code >= 300

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "rps": len(ordered) / elapsed,
        "p50": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "requests": len(ordered),
        "failed": failed,
        "socket_errors": errors,
    }


def load(url: str, clients: int, seconds: float, tmp: Path, tool: str) -> dict[str, float]:
    # a short warm-up: connections, pools, first-request imports
    if tool == "wrk":
        with contextlib.suppress(SystemExit):
            load_wrk(url, clients, 2, tmp)
        return load_wrk(url, clients, seconds, tmp)
    asyncio.run(_load_httpx(url, clients, 1))
    return asyncio.run(_load_httpx(url, clients, seconds))


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tool", choices=["wrk", "httpx"], default=None)
    args = parser.parse_args()
    tool = args.tool or ("wrk" if shutil.which("wrk") else "httpx")

    name = f"fleet_bench_api_{uuid.uuid4().hex[:8]}"
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    broker = redis.Redis.from_url(REDIS)
    broker.flushdb()
    admin(f'CREATE DATABASE "{name}"')
    results: dict[str, dict[str, float]] = {}
    try:
        engine = db.create(url)
        migrate.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="fleet-bench-api-") as tmp_name:
            tmp = Path(tmp_name)
            config = write_config(tmp / "config")
            fleet = Fleet(tmp, database_url=url, redis_url=REDIS, config_dir=config)
            try:
                fleet_url = fleet.serve()
                bare, bare_url = start_bare(tmp, fleet.env)
                fleet.procs.append(bare)
                results["bare FastAPI (POST, pydantic body)"] = load(
                    bare_url, args.clients, args.seconds, tmp, tool
                )
                results["fleet SubmitTask (PostgreSQL+Redis)"] = load(
                    fleet_url, args.clients, args.seconds, tmp, tool
                )
            finally:
                fleet.stop()
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        broker.flushdb()
        broker.close()

    print(
        f"\nSubmitTask at {args.clients} concurrent clients, {args.seconds:g}s each, load by "
        f"{tool}, one uvicorn process each, {os.cpu_count()} CPUs\n"
    )
    print(
        f"{'endpoint':<38} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'requests':>9} {'non-2xx':>8}"
    )
    for label, r in results.items():
        print(
            f"{label:<38} {r['rps']:>9.0f} {r['p50']:>8.1f} {r['p99']:>8.1f} "
            f"{int(r['requests']):>9} {int(r['failed']):>8}"
        )
    bare_rps = results["bare FastAPI (POST, pydantic body)"]["rps"]
    fleet_rps = results["fleet SubmitTask (PostgreSQL+Redis)"]["rps"]
    print(f"\nfleet SubmitTask runs at {fleet_rps / bare_rps:.0%} of the bare endpoint's rate.")


if __name__ == "__main__":
    main()
