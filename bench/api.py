"""SubmitTask throughput and latency at 50 concurrent clients, beside a bare FastAPI endpoint.

Both servers run the same way (``--workers`` uvicorn processes on 127.0.0.1) in the same run;
the fleet one is ``fleet serve`` against a PostgreSQL database created here from scratch (dropped
after) and Redis. Each request admits a task (one transaction) and publishes its wake-up; no
worker runs, so what is measured is intake alone. The two are loaded in alternating rounds
(``--rounds``; the medians are printed), and beside req/s and latency the bench prints the CPU
time the server's processes spent per request, which a machine busy with other work changes far
less than the rate.

The load comes from ``wrk`` (``apt-get install wrk``); without it the bench stops, unless
``--tool httpx`` asks for httpx async clients in this process (which then share the CPU with the
servers, so the figures are lower).

Run: ``python -m bench.api [--clients 50] [--seconds 10] [--rounds 3] [--workers 1]``.
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
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
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
    eng = create_engine(db.normalize_url(PG_ADMIN), isolation_level="AUTOCOMMIT")
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


def start_bare(tmp: Path, env: dict[str, str], workers: int = 1) -> tuple[Proc, str]:
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
        *(["--workers", str(workers)] if workers > 1 else []),
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


# -- CPU --------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every process below it, as now."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += int(stats[pid][11]) + int(stats[pid][12])
            todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


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


def load(
    url: str, clients: int, seconds: float, tmp: Path, tool: str, *, warm: bool = True
) -> dict[str, float]:
    # a short warm-up: connections, pools, first-request imports
    if tool == "wrk":
        if warm:
            with contextlib.suppress(SystemExit):
                load_wrk(url, clients, 2, tmp)
        return load_wrk(url, clients, seconds, tmp)
    if warm:
        asyncio.run(_load_httpx(url, clients, 1))
    return asyncio.run(_load_httpx(url, clients, seconds))


def measured(pid: int, run: Callable[[bool], dict[str, float]], warm: bool) -> dict[str, float]:
    """One round of ``run`` with the CPU the server's processes spent on it, per request."""
    if warm:  # outside the CPU window
        run(True)
    before = tree_cpu_s(pid)
    result = run(False)
    result["cpu_ms"] = (tree_cpu_s(pid) - before) * 1000 / max(1, result["requests"])
    return result


def tool_of(requested: str | None) -> str:
    """wrk unless httpx is asked for; no silent fallback to a load generator sharing the CPU."""
    if requested == "httpx" or shutil.which("wrk"):
        return requested or "wrk"
    raise SystemExit(
        "bench.api needs wrk on PATH (apt-get install wrk); --tool httpx measures with httpx "
        "clients in this process instead, which share the CPU with the servers"
    )


# -- main -------------------------------------------------------------------------------------

BARE = "bare FastAPI (POST, pydantic body)"
FLEET = "fleet SubmitTask (PostgreSQL+Redis)"


def median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn processes per server")
    parser.add_argument("--tool", choices=["wrk", "httpx"], default=None)
    args = parser.parse_args()
    tool = tool_of(args.tool)

    name = f"fleet_bench_api_{uuid.uuid4().hex[:8]}"
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    broker = redis.Redis.from_url(REDIS)
    broker.flushdb()
    admin(f'CREATE DATABASE "{name}"')
    rounds: dict[str, list[dict[str, float]]] = {BARE: [], FLEET: []}
    try:
        engine = db.create(url)
        migrate.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="fleet-bench-api-") as tmp_name:
            tmp = Path(tmp_name)
            config = write_config(tmp / "config")
            fleet = Fleet(tmp, database_url=url, redis_url=REDIS, config_dir=config)
            try:
                fleet_url = fleet.serve(workers=args.workers)
                fleet_pid = fleet.procs[-1].pid
                bare, bare_url = start_bare(tmp, fleet.env, args.workers)
                fleet.procs.append(bare)
                servers = {BARE: (bare.pid, bare_url), FLEET: (fleet_pid, fleet_url)}
                for i in range(args.rounds):
                    for label, (pid, base) in servers.items():
                        rounds[label].append(
                            measured(
                                pid,
                                lambda warm, base=base: load(  # type: ignore[misc]
                                    base,
                                    args.clients,
                                    2 if warm else args.seconds,
                                    tmp,
                                    tool,
                                    warm=False,
                                ),
                                warm=i == 0,
                            )
                        )
            finally:
                fleet.stop()
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        broker.flushdb()
        broker.close()

    results = {label: median_of(r) for label, r in rounds.items()}
    procs = "one uvicorn process" if args.workers == 1 else f"{args.workers} uvicorn processes"
    print(
        f"\nSubmitTask at {args.clients} concurrent clients, {args.rounds} alternating rounds of "
        f"{args.seconds:g}s (medians), load by {tool}, {procs} each, {os.cpu_count()} CPUs\n"
    )
    print(
        f"{'endpoint':<38} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms/req':>10} "
        f"{'requests':>9} {'non-2xx':>7}"
    )
    for label, r in results.items():
        print(
            f"{label:<38} {r['rps']:>7.0f} {r['p50']:>7.1f} {r['p99']:>7.1f} {r['cpu_ms']:>10.2f} "
            f"{int(sum(x['requests'] for x in rounds[label])):>9} "
            f"{int(sum(x['failed'] for x in rounds[label])):>7}"
        )
    bare_r, fleet_r = results[BARE], results[FLEET]
    rate = fleet_r["rps"] / bare_r["rps"]
    tail = fleet_r["p99"] / bare_r["p99"]
    print(
        f"\nfleet/bare: rate {rate:.2f} (goal >= 0.5), p99 {tail:.2f}x (goal <= 3), "
        f"CPU per request {fleet_r['cpu_ms'] / bare_r['cpu_ms']:.2f}x"
    )
    per_round = ", ".join(
        f"{f['rps'] / b['rps']:.2f}" for b, f in zip(rounds[BARE], rounds[FLEET], strict=True)
    )
    print(f"rate ratio per round: {per_round}")


if __name__ == "__main__":
    main()
