"""What idle task event streams cost `fleet serve`: memory per connection, CPU while idle, and
SubmitTask's rate with them open, in one run.

``fleet serve`` runs against a PostgreSQL database created here (dropped after) and Redis, with no
worker: the tasks stay queued, so every stream is idle (its shared poller reads the store, finds
nothing new, backs off). Steps: admit ``--connections`` tasks; SubmitTask load (wrk, or httpx)
without streams; open one stream per task and read the server's resident memory (VmRSS) before and
after; count the server's CPU seconds over ``--idle`` seconds; SubmitTask load again with the
streams open; close them; the load once more without.

Run: ``python -m bench.events [--connections 1000] [--seconds 10] [--idle 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import redis

from bench.api import KEY, PG_ADMIN, REDIS, admin, write_config
from bench.api import load as _load
from fleet.store import db, migrate
from tests.support.fleet import Fleet


def load(url: str, clients: int, seconds: float, tmp: Path, tool: str) -> dict[str, float]:
    """One SubmitTask round by wrk (after a 2 s warm-up), or bench.api's httpx load."""
    if tool != "wrk":
        return _load(url, clients, seconds, tmp, tool)
    import json
    import re
    import subprocess

    from bench.api import BODY, _ms

    script = tmp / "submit.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {KEY}"\n'
        f"wrk.body = {json.dumps(json.dumps(BODY))}\n"
    )
    out = ""
    for duration in (2.0, seconds):
        argv = ["wrk", "-t2", f"-c{clients}", f"-d{duration:g}s", "--latency", "-s", str(script)]
        out = subprocess.run(
            [*argv, f"{url}/v1/tasks"], check=True, capture_output=True, text=True
        ).stdout
    found = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    total = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if "50" not in found or "99" not in found or total is None or rate is None:
        raise RuntimeError(f"wrk's output could not be read:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(rate.group(1)),
        "p50": _ms(found["50"]),
        "p99": _ms(found["99"]),
        "requests": int(total.group(1)),
        "failed": int(bad.group(1)) if bad else 0,
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _open(port: int, task_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/tasks/{task_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {KEY}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    await reader.readuntil(b"event: status")  # the stream runs: its first event arrived
    return reader, writer


class Streams:
    """Idle SSE connections held open by a thread of their own (its own event loop)."""

    def __init__(self, port: int, task_ids: list[str]) -> None:
        self.port, self.task_ids = port, task_ids
        self.loop = asyncio.new_event_loop()
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def open(self) -> None:
        import threading

        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def all_of() -> None:
            for i in range(0, len(self.task_ids), 100):  # in waves: the server's accept backlog
                batch = self.task_ids[i : i + 100]
                self.conns += await asyncio.gather(*(_open(self.port, t) for t in batch))

        asyncio.run_coroutine_threadsafe(all_of(), self.loop).result(300)

    def close(self) -> None:
        async def close_all() -> None:
            for _, writer in self.conns:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in self.conns), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="SubmitTask rounds of each kind")
    args = parser.parse_args()
    tool = "wrk" if shutil.which("wrk") else "httpx"

    name = f"fleet_bench_events_{uuid.uuid4().hex[:8]}"
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    broker = redis.Redis.from_url(REDIS)
    broker.flushdb()
    admin(f'CREATE DATABASE "{name}"')
    without: list[dict[str, float]] = []
    with_streams: list[dict[str, float]] = []
    try:
        engine = db.create(url)
        migrate.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="fleet-bench-events-") as tmp_name:
            tmp = Path(tmp_name)
            fleet = Fleet(tmp, database_url=url, redis_url=REDIS, config_dir=write_config(tmp))
            try:
                base = fleet.serve()
                server = fleet.procs[-1].pid
                port = int(base.rsplit(":", 1)[1])
                with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}) as h:
                    ids = [
                        h.post("/v1/tasks", json={"deployment": "bench", "input": f"t{i}"}).json()[
                            "id"
                        ]
                        for i in range(args.connections)
                    ]

                def submit_load() -> dict[str, float]:
                    cpu = cpu_s(server)
                    out = load(base, args.clients, args.seconds, tmp, tool)
                    # the server's CPU per request: steadier than the rate on a busy machine
                    spent = cpu_s(server) - cpu
                    out["cpu_ms"] = (
                        spent * 1000 / max(1.0, out["requests"] * (1 + 1 / args.seconds))
                    )
                    return out

                without.append(submit_load())
                before = rss_mib(server)
                half = len(ids) // 2
                first, second = Streams(port, ids[:half]), Streams(port, ids[half:])
                started = time.monotonic()
                first.open()
                time.sleep(3)  # let the poller settle into its idle back-off
                middle = rss_mib(server)
                second.open()
                opened_s = time.monotonic() - started - 3
                time.sleep(3)
                after = rss_mib(server)
                cpu0 = cpu_s(server)
                time.sleep(args.idle)
                idle_cpu = (cpu_s(server) - cpu0) / args.idle
                # alternate: with the streams open, then closed, then open again, …
                for i in range(args.rounds):
                    with_streams.append(submit_load())
                    first.close()
                    second.close()
                    without.append(submit_load())
                    if i + 1 < args.rounds:
                        first, second = Streams(port, ids[:half]), Streams(port, ids[half:])
                        first.open()
                        second.open()
                        time.sleep(3)
            finally:
                fleet.stop()
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        broker.flushdb()
        broker.close()

    n = args.connections
    load_avg = os.getloadavg()[0]
    print(
        f"\nidle task event streams on one `fleet serve` process, {os.cpu_count()} CPUs "
        f"(load average {load_avg:.1f} at the end)"
    )
    print(f"{n} streams opened in {opened_s:.1f}s, one per queued task")
    print(
        f"server memory (VmRSS): {before:.1f} MiB before, {middle:.1f} MiB with {half} open, "
        f"{after:.1f} MiB with {n}: +{after - before:.1f} MiB in all, "
        f"{(after - middle) * 1024 / (n - half):.1f} KiB per stream for the second {n - half} "
        "(the first also warmed thread and connection pools)"
    )
    print(f"server CPU while they idle: {idle_cpu:.1%} of one core (shared poller, one read/poll)")
    print(
        f"\nSubmitTask at {args.clients} concurrent clients, {args.seconds:g}s rounds, load by "
        f"{tool}, alternating"
    )
    print(
        f"{'':<26} {'req/s (rounds)':<22} {'p50 ms':>7} {'p99 ms':>7} {'non-2xx':>7} "
        "server CPU ms/request (rounds)"
    )
    for label, rounds in (
        ("no streams", without),
        (f"{n} idle streams open", with_streams),
    ):
        rates = [r["rps"] for r in rounds]
        med = sorted(rounds, key=lambda r: r["rps"])[len(rounds) // 2]
        shown = f"{med['rps']:.0f} (" + "/".join(f"{x:.0f}" for x in rates) + ")"
        bad = sum(int(r["failed"]) for r in rounds)
        cpu = sorted(r["cpu_ms"] for r in rounds)[len(rounds) // 2]
        cpus = "/".join(f"{r['cpu_ms']:.2f}" for r in rounds)
        print(
            f"{label:<26} {shown:<22} {med['p50']:>7.1f} {med['p99']:>7.1f} {bad:>7} "
            f"{cpu:.2f} ({cpus})"
        )


if __name__ == "__main__":
    main()
