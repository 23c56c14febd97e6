"""What idle task event streams cost `fleet serve`: memory per connection, CPU while idle, and
SubmitTask's rate with them open, in one run.

``fleet serve`` runs against a PostgreSQL database created here (dropped after) and Redis, with no
worker: the tasks stay queued, so every stream is idle (its shared poller reads the store, finds
nothing new, backs off). Steps: admit ``--connections`` tasks; SubmitTask load (wrk, or httpx)
without streams; open one stream per task and read the server's resident memory (VmRSS) before and
after; count the server's CPU seconds over ``--idle`` seconds; then SubmitTask rounds in turn:
with the streams open, none, with as many idle plain connections (half a request's headers sent,
no stream: what a connection costs the server by itself), none, with the streams open on a
second ``fleet serve`` process of the same fleet (the topology that routes streams to processes
of their own), none, and so on. Each round with connections is compared with the no-streams
rounds either side of it (the machine's drift cancels), and each no-streams round with its like
neighbours (the noise).

Run: ``python -m bench.events [--connections 1000] [--seconds 10] [--idle 10] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
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

#: Seconds opened streams are left before anything is measured: their first reads, the hint
#: subscription's confirmations, the poller settling into its idle clock.
SETTLE_S = 5.0


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
    """Idle connections held open by a thread of their own (its own event loop): SSE streams,
    or (``plain``) as many connections that sent half a request's headers and wait — the
    control: a connection's cost to the server without any stream machinery."""

    def __init__(self, port: int, task_ids: list[str], *, plain: bool = False) -> None:
        self.port, self.task_ids, self.plain = port, task_ids, plain
        self.loop = asyncio.new_event_loop()
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _plain(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the rest never comes
        await writer.drain()
        return reader, writer

    def open(self) -> None:
        import threading

        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def all_of() -> None:
            for i in range(0, len(self.task_ids), 100):  # in waves: the server's accept backlog
                batch = self.task_ids[i : i + 100]
                conns = (self._plain() if self.plain else _open(self.port, t) for t in batch)
                self.conns += await asyncio.gather(*conns)

        asyncio.run_coroutine_threadsafe(all_of(), self.loop).result(300)

    def close(self) -> None:
        async def close_all() -> None:
            for _, writer in self.conns:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in self.conns), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def flanked(rounds: list[tuple[str, float]], kind: str) -> list[float]:
    """Each ``kind`` round's rate over the mean of the no-streams rounds just before and after
    it (the machine's drift cancels); ``"none"``: each no-streams round over the mean of the
    no-streams rounds two before and two after it — the same ratio between like rounds: noise."""
    nones = [i for i, (k, _) in enumerate(rounds) if k == "none"]
    out = []
    for i, (k, rate) in enumerate(rounds):
        if k != kind:
            continue
        if kind == "none":
            j = nones.index(i)
            if j == 0 or j == len(nones) - 1:
                continue
            near = [rounds[nones[j - 1]][1], rounds[nones[j + 1]][1]]
        else:
            if i == 0 or i + 1 == len(rounds):
                continue
            if rounds[i - 1][0] != "none" or rounds[i + 1][0] != "none":
                continue
            near = [rounds[i - 1][1], rounds[i + 1][1]]
        if len(near) == 2:
            out.append(rate / (sum(near) / 2))
    return out


def _t95(df: int) -> float:
    """Student's t for a two-sided 95 % interval with ``df`` degrees of freedom."""
    table = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
    if df in table:
        return table[df]
    return 2.23 if df <= 10 else 2.09 if df <= 20 else 2.04 if df <= 30 else 1.96


def mean_ci(ratios: list[float]) -> str:
    """The ratios' mean and its 95% confidence interval (Student's t): a cost is beyond the
    noise when the interval leaves out 1.00."""
    n = len(ratios)
    mean = statistics.fmean(ratios)
    if n < 2:
        return f"{mean:.3f}"
    half = _t95(n - 1) * statistics.stdev(ratios) / n**0.5
    return f"{mean:.3f} ± {half:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="cycles of rounds: streams, none, plain, none, streams elsewhere, none",
    )
    parser.add_argument(
        "--kinds",
        default="streams,plain,elsewhere",
        help="which rounds with connections a cycle has (each followed by a no-streams round); "
        "`--kinds streams` sets only streams against none",
    )
    parser.add_argument(
        "--keepalive",
        default=None,
        help="FLEET_EVENT_KEEPALIVE for the servers (e.g. 1h: keep-alives out of the picture)",
    )
    args = parser.parse_args()
    serve_env = {"FLEET_EVENT_KEEPALIVE": args.keepalive} if args.keepalive else {}
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or set(kinds) - {"streams", "plain", "elsewhere"}:
        parser.error(f"--kinds {args.kinds!r}: name some of streams, plain, elsewhere")
    tool = "wrk" if shutil.which("wrk") else "httpx"

    name = f"fleet_bench_events_{uuid.uuid4().hex[:8]}"
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    broker = redis.Redis.from_url(REDIS)
    broker.flushdb()
    admin(f'CREATE DATABASE "{name}"')
    rounds: list[tuple[str, dict[str, float]]] = []
    try:
        engine = db.create(url)
        migrate.upgrade(engine)
        engine.dispose()
        with tempfile.TemporaryDirectory(prefix="fleet-bench-events-") as tmp_name:
            tmp = Path(tmp_name)
            fleet = Fleet(tmp, database_url=url, redis_url=REDIS, config_dir=write_config(tmp))
            try:
                base = fleet.serve(**serve_env)
                server = fleet.procs[-1].pid
                port = int(base.rsplit(":", 1)[1])
                # a second API process of the same fleet: where ``elsewhere`` rounds' streams go
                other = int(fleet.serve(**serve_env).rsplit(":", 1)[1])
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

                fresh = submit_load()
                before = rss_mib(server)
                half = len(ids) // 2
                first, second = Streams(port, ids[:half]), Streams(port, ids[half:])
                started = time.monotonic()
                first.open()
                time.sleep(SETTLE_S)  # idle: the poller settles into its idle back-off
                middle = rss_mib(server)
                second.open()
                opened_s = time.monotonic() - started - SETTLE_S
                time.sleep(SETTLE_S)
                after = rss_mib(server)
                cpu0 = cpu_s(server)
                time.sleep(args.idle)
                idle_cpu = (cpu_s(server) - cpu0) / args.idle
                # alternate: streams, none, plain connections, none, streams elsewhere, none, …
                held = [first, second]
                if kinds[0] != "streams":  # the first round with connections is of another kind
                    for conns in held:
                        conns.close()
                    held = []
                for _ in range(args.rounds):
                    for kind in [k for c in kinds for k in (c, "none")]:
                        if kind != "none" and not held:
                            to = other if kind == "elsewhere" else port
                            held = [Streams(to, ids, plain=kind == "plain")]
                            held[0].open()
                            time.sleep(SETTLE_S)
                        rounds.append((kind, submit_load()))
                        for conns in held:
                            conns.close()
                        held = []
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
    print(
        f"server CPU while they idle: {idle_cpu:.1%} of one core (keep-alives; the shared "
        "poller, the idle tasks read together on a 5 s grid while change hints come)"
    )
    described = {
        "streams": f"{n} idle streams",
        "plain": f"{n} idle plain connections (half a request's headers sent: a connection "
        "without a stream)",
        "elsewhere": f"{n} idle streams on a second `fleet serve` process",
    }
    print(
        f"\nSubmitTask at {args.clients} concurrent clients, {args.seconds:g}s rounds, load by "
        f"{tool}, in turn: " + ", ".join(f"{described[k]}, none" for k in kinds) + ", …"
    )
    print(
        f"{'':<30} {'req/s (rounds)':<34} {'p50 ms':>7} {'p99 ms':>7} {'non-2xx':>7} "
        "CPU ms/req  vs the no-streams rounds either side: median (range); mean ± 95% CI; "
        "CPU a request vs the same rounds: mean ± 95% CI"
    )
    rates = [(k, r["rps"]) for k, r in rounds]
    shown = {
        "none": "no streams",
        "streams": f"{n} idle streams open",
        "plain": f"{n} idle plain connections",
        "elsewhere": f"{n} streams, other process",
    }
    fr = fresh
    print(
        f"{'no streams, fresh server':<30} {fr['rps']:<34.0f} {fr['p50']:>7.1f} {fr['p99']:>7.1f}"
        f" {int(fr['failed']):>7} {fr['cpu_ms']:>10.2f}"
    )
    for kind, label in shown.items():
        of = [r for k, r in rounds if k == kind]
        if not of:
            continue
        med = sorted(of, key=lambda r: r["rps"])[len(of) // 2]
        each = f"{med['rps']:.0f} (" + "/".join(f"{r['rps']:.0f}" for r in of) + ")"
        bad = sum(int(r["failed"]) for r in of)
        cpu = sorted(r["cpu_ms"] for r in of)[len(of) // 2]
        ratios = sorted(flanked(rates, kind))
        vs = (
            f"{ratios[len(ratios) // 2]:.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f}); "
            f"{mean_ci(ratios)}"
            if ratios
            else "-"
        )
        if kind == "none":
            vs += " (like rounds: the noise)"
        cpus = flanked([(k, r["cpu_ms"]) for k, r in rounds], kind)
        if cpus:  # the server's CPU a request, against its neighbours alike: steadier
            vs += f"; CPU/req {mean_ci(cpus)}"
        print(
            f"{label:<30} {each:<34} {med['p50']:>7.1f} {med['p99']:>7.1f} {bad:>7} {cpu:>10.2f}"
            f"  {vs}"
        )


if __name__ == "__main__":
    main()
