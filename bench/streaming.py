"""Token streaming (issue 39's acceptance): how soon a model's text reaches an SSE client of
``GET /v1/tasks/{id}/events``, and what streaming costs a worker when nobody watches.

A fake OpenAI-compatible model (``bench.slow_model``) streams each reply as ``--chunks`` content
chunks ``--gap`` seconds apart, each chunk's text ``"<i:t> "`` with ``t`` the time it was sent.
``fleet serve`` and one ``fleet worker -c 1 --runs 100`` run on a database and a redis-server of
the bench's own, the agent on that model (``provider = "openai"``, ``max_retries = 0``).

  latency   tasks, each on a conversation of its own and followed by an SSE client of its own
            (httpx, in this process's event loop; frames kept with their arrival time and read
            after the phase). The model holds every request until each client has its first
            event and the model holds all of the phase's requests, then lets them go: every
            chunk goes out while its client listens. For each ``delta`` event, each chunk in it
            has the latency arrival - the time stamped into it; the first delta of a task is
            measured from the first chunk, and each task's last chunk is shown apart too.
            ``1 stream``: ``--single`` tasks one after another; ``N streams``: ``--streams``
            tasks at once (``--rounds`` times), their first chunks at a random point of the
            first ``--gap`` (streams of different callers are not in step). A subscriber of the
            bench's own on the tasks' Redis channels times the same chunks from the model to
            Redis (the worker's part of the latency). Each task's deltas joined must equal its
            reply (from the ``end`` event); mismatches are counted. Two rounds (1 task, then
            10) warm the processes up first, not counted; each phase prints the CPU seconds it
            cost each process (and the bench's client).
  cost      ``--cost-tasks`` tasks nobody watches, the model at ``--cost-gap`` a chunk, on a
            fresh worker with ``FLEET_STREAM_DELTAS=true`` and one with ``false`` (each after
            ``WARMUP`` tasks of its own), ``--cost-rounds`` times, in the order on, off, off,
            on, ...: CPU milliseconds per task of the worker's processes and of the
            redis-server, from /proc, and the Redis commands a task; the ratio of the means.

Prints figures beside the goals; asserts none.
Run: ``python -m bench.streaming`` (PostgreSQL on 127.0.0.1, ``redis-server`` on PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis import asyncio as aioredis

from bench.dispatch import pct
from bench.inflight import Bench as Inflight
from bench.machine import CORES, process_tree, sample, spent
from fleet.dispatch.hints import channel
from fleet.domain.deltas import decode
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for

#: Tasks a fresh worker runs before a cost phase's figures (its imports, connections, threads).
WARMUP = 20
#: A chunk's stamp in its text.
STAMP = re.compile(r"<(\d+):(\d+\.\d+)>")
#: Seconds after every client has its first event before the model lets the requests go (the
#: API's subscriptions to the tasks' channels settle).
SETTLE_S = 0.5


@dataclass
class Watch:
    """One task's SSE client: the frames it received, each with its arrival time."""

    task_id: uuid.UUID
    frames: list[tuple[float, bytes]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Latency:
    """One latency phase's figures."""

    name: str
    tasks: int = 0
    deltas: int = 0
    first: list[float] = field(default_factory=list)
    every: list[float] = field(default_factory=list)
    #: Each task's last chunk (it comes while the tasks end: their final events are read).
    last: list[float] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    #: From the model to Redis (the worker's part): chunk 0 of each task, and every chunk.
    to_redis_first: list[float] = field(default_factory=list)
    to_redis: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def take(self, w: Watch) -> None:
        """Read one client's frames (after the phase: nothing is parsed while it streams)."""
        self.tasks += 1
        text, reply, first = "", None, True
        final = (-1, 0.0)
        for at, frame in w.frames:
            fields = dict(
                line.split(": ", 1) for line in frame.decode().split("\n") if ": " in line
            )
            kind = fields.get("event")
            if kind == "delta":
                data = json.loads(fields["data"])
                self.deltas += 1
                text = data["text"] if data.get("reset") else text + data["text"]
                stamps = [(int(i), (at - float(t)) * 1000) for i, t in STAMP.findall(data["text"])]
                if stamps and first:
                    self.first.append(stamps[0][1])
                    first = False
                self.every.extend(ms for _, ms in stamps)
                final = max([final, *stamps])
            elif kind == "end":
                reply = json.loads(fields["data"])["task"].get("reply")
        if final[0] >= 0:
            self.last.append(final[1])
        if first:
            self.mismatched.append(f"{w.task_id}: no delta")
        elif text != reply:
            self.mismatched.append(f"{w.task_id}: deltas {text[-60:]!r} != reply {reply!r}")

    def tapped(self, messages: list[tuple[float, bytes]]) -> None:
        """Read the delta messages a subscriber of the bench's own saw on Redis."""
        for at, raw in messages:
            for d in decode(raw):
                for i, t in STAMP.findall(d.text):
                    self.to_redis.append((at - float(t)) * 1000)
                    if i == "0":
                        self.to_redis_first.append(self.to_redis[-1])

    def lines(self) -> list[str]:
        def figs(values: list[float]) -> str:
            if not values:
                return "none"
            return (
                f"median {statistics.median(values):6.1f} ms  p99 {pct(values, 99):6.1f} ms  "
                f"max {max(values):6.1f} ms"
            )

        cpu = "  ".join(f"{k} {v:.2f}" for k, v in self.cpu.items())
        return [
            f"{self.name}: {self.tasks} tasks, {self.deltas} deltas in {self.seconds:.1f} s; "
            f"joined deltas != reply: {len(self.mismatched)}",
            f"  first delta  {figs(self.first)}   (goal: median <= 100 ms, p99 <= 300 ms)",
            f"  every delta  {figs(self.every)}   (goal: p99 <= 300 ms)",
            f"    last chunk {figs(self.last)}",
            f"  of which model -> Redis (the worker): first {figs(self.to_redis_first)}",
            f"                                        every {figs(self.to_redis)}",
            f"  CPU s over the phase: {cpu}",
            *(f"  mismatch {m}" for m in self.mismatched[:10]),
        ]


@dataclass
class Cost:
    """One cost phase's figures."""

    stream: bool
    tasks: int
    seconds: float
    worker_ms: float
    redis_ms: float
    commands: Counter[str]
    succeeded: int
    load: float

    def line(self) -> str:
        cmds = ", ".join(
            f"{k} {v / self.tasks:.1f}"
            for k, v in self.commands.most_common()
            if v >= self.tasks / 2
        )
        return (
            f"FLEET_STREAM_DELTAS={str(self.stream).lower():<5}  {self.tasks} tasks in "
            f"{self.seconds:5.1f} s  CPU/task: worker {self.worker_ms:5.2f} ms, redis-server "
            f"{self.redis_ms:5.2f} ms  succeeded {self.succeeded}  (load {self.load:.2f})\n"
            f"  Redis commands a task: {cmds}"
        )


class Bench:
    def __init__(self, tmp: Path, args: argparse.Namespace, stack: ExitStack) -> None:
        self.args = args
        #: The model, redis-server, database and agent ``slow`` of ``bench.inflight``.
        self.base = Inflight(tmp, argparse.Namespace(tasks=args.cost_tasks), stack)
        self.model_url = self.base.model_url
        self.rt = self.base.rt
        self.fleet: Fleet = self.base.fb.fleet()
        stack.callback(self.fleet.stop)
        self.api = self.fleet.serve()
        self.round = 0

    def worker(self, name: str, stream: bool) -> Proc:
        """A fresh ``fleet worker -c 1 --runs R`` (``stream``: ``FLEET_STREAM_DELTAS``)."""
        argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", "1"]
        argv += ["--runs", str(self.args.runs)]
        env = {**self.fleet.env, "FLEET_STREAM_DELTAS": str(stream).lower()}
        proc = Proc(name, argv, env, self.base.fb.tmp / f"{name}.log")
        self.fleet.procs.append(proc)
        proc.wait_log(r"ready\.", timeout=60)
        return proc

    def pace(self, **given: float | bool) -> None:
        httpx.post(f"{self.model_url}/stats", json={"delay": 0, **given}, timeout=5)

    def submit(self, n: int, label: str) -> list[uuid.UUID]:
        self.round += 1
        return [
            self.rt.dispatcher.submit("slow", f"m{i}", key=f"{label}{self.round}-c{i}").task.id
            for i in range(n)
        ]

    def ended(self, n: int, before: int) -> bool:
        return self.finished() >= before + n

    def finished(self) -> int:
        return self.base._count(s.tasks.c.status.in_(("succeeded", "failed", "cancelled")))

    def succeeded(self) -> int:
        return self.base._count(s.tasks.c.status == "succeeded")

    # -- latency ------------------------------------------------------------------------------

    def latency(self, result: Latency, n: int, pids: dict[str, list[int]]) -> None:
        """One round of ``n`` tasks, each followed by a client, into ``result``."""
        self.pace(chunks=self.args.chunks, gap=self.args.gap, phase=n > 1, hold=True)
        ids = self.submit(n, "lat")
        watches = [Watch(task_id) for task_id in ids]
        before = {name: sample(p) for name, p in pids.items()}
        own = time.process_time()
        start = time.monotonic()
        heard = asyncio.run(self._follow(watches))
        result.seconds += time.monotonic() - start
        result.cpu["bench client"] = result.cpu.get("bench client", 0.0)
        result.cpu["bench client"] += time.process_time() - own
        for name, p in pids.items():
            result.cpu[name] = result.cpu.get(name, 0.0) + spent(before[name], sample(p))
        for w in watches:
            result.take(w)
        result.tapped(heard)

    async def _follow(self, watches: list[Watch]) -> list[tuple[float, bytes]]:
        limits = httpx.Limits(max_connections=len(watches) + 10, max_keepalive_connections=0)
        timeout = httpx.Timeout(10, read=120)
        tap = aioredis.Redis.from_url(self.base.redis.url)
        pubsub = tap.pubsub()
        await pubsub.psubscribe(channel("*"))
        heard: list[tuple[float, bytes]] = []
        tapping = asyncio.create_task(_tap(pubsub, heard))
        async with httpx.AsyncClient(base_url=self.api, limits=limits, timeout=timeout) as client:
            clients = [asyncio.create_task(_watch(client, w)) for w in watches]

            async def holding() -> bool:
                got = await client.get(f"{self.model_url}/stats")
                return bool(got.json()["in_flight"] >= len(watches))

            deadline = time.monotonic() + 60
            while not (all(w.ready.is_set() for w in watches) and await holding()):
                if time.monotonic() > deadline:
                    raise AssertionError("the tasks did not all reach the model with a client")
                for c in clients:
                    if c.done():
                        c.result()  # a client that failed: its error
                await asyncio.sleep(0.05)
            await asyncio.sleep(SETTLE_S)
            await client.post(f"{self.model_url}/release")
            await asyncio.wait_for(asyncio.gather(*clients), 120)
        tapping.cancel()
        await pubsub.aclose()
        await tap.aclose()
        return heard

    # -- cost ---------------------------------------------------------------------------------

    def cost(self, stream: bool) -> Cost:
        self.pace(chunks=self.args.chunks, gap=self.args.cost_gap)
        worker = self.worker(f"cost-{str(stream).lower()}", stream)
        try:
            done = self.finished()
            self.submit(WARMUP, "warm")
            wait_for(lambda: self.ended(WARMUP, done), 120, what="the warm-up tasks")
            redis_pid = self.base.redis.proc.pid
            pids = process_tree(worker.pid)
            load = os.getloadavg()[0]
            before = sample(pids), sample([redis_pid]), self.base.redis.commands()
            done, ok = self.finished(), self.succeeded()
            start = time.monotonic()
            n = self.args.cost_tasks
            self.submit(n, "cost")
            wait_for(lambda: self.ended(n, done), 600, interval=0.1, what="the cost tasks")
            seconds = time.monotonic() - start
            worker_s = spent(before[0], sample(process_tree(worker.pid)))
            redis_s = spent(before[1], sample([redis_pid]))
            commands = self.base.redis.commands()
            commands.subtract(before[2])
            succeeded = self.succeeded() - ok
        finally:
            worker.stop()
        return Cost(
            stream, n, seconds, worker_s * 1000 / n, redis_s * 1000 / n, +commands, succeeded, load
        )


async def _watch(client: httpx.AsyncClient, w: Watch) -> None:
    """Follow one task's events to their end, keeping each frame with its arrival time."""
    buf = b""
    async with client.stream("GET", f"/v1/tasks/{w.task_id}/events") as r:
        r.raise_for_status()
        async for raw in r.aiter_raw():
            at = time.time()
            *frames, buf = (buf + raw).split(b"\n\n")
            for frame in frames:
                w.frames.append((at, frame))
                if not w.ready.is_set() and b"event: status" in frame:
                    w.ready.set()


async def _tap(pubsub: Any, heard: list[tuple[float, bytes]]) -> None:
    """Keep each message of text deltas on the tasks' channels with its arrival time."""
    while True:
        message = await pubsub.get_message(timeout=1.0)
        if message is not None and message["type"] == "pmessage" and message["data"]:
            heard.append((time.time(), message["data"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20, help="content chunks a reply")
    parser.add_argument("--gap", type=float, default=0.1, help="latency: seconds between chunks")
    parser.add_argument("--single", type=int, default=10, help="latency: tasks one at a time")
    parser.add_argument("--streams", type=int, default=100, help="latency: tasks at once")
    parser.add_argument("--rounds", type=int, default=1, help="latency: rounds of --streams")
    parser.add_argument("--runs", type=int, default=100, help="the worker's --runs")
    parser.add_argument("--cost-tasks", type=int, default=1000)
    parser.add_argument("--cost-gap", type=float, default=0.005, help="cost: seconds a chunk")
    parser.add_argument(
        "--cost-rounds", type=int, default=4, help="cost: rounds of one phase on, one off"
    )
    args = parser.parse_args(argv)
    began = time.monotonic()
    load = os.getloadavg()
    print(
        f"token streaming benchmark: {CORES} cores, load {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f} at start; model: {args.chunks} chunks {args.gap * 1000:g} ms apart "
        f"(cost phases: {args.cost_gap * 1000:g} ms); fleet serve + fleet worker -c 1 "
        f"--runs {args.runs}"
    )
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), args, stack)
        worker = bench.worker("latency-worker", True)
        api = bench.fleet.procs[0]
        pids = {
            "fleet serve": process_tree(api.pid),
            "worker": process_tree(worker.pid),
            "redis-server": [bench.base.redis.proc.pid],
            "model": [bench.base.model.pid],
        }
        bench.latency(Latency("warm-up"), 1, pids)
        bench.latency(Latency("warm-up"), 10, pids)
        single = Latency("1 stream")
        for _ in range(args.single):
            bench.latency(single, 1, pids)
        single.name = f"1 stream ({args.single} tasks one at a time)"
        many = Latency(f"{args.streams} streams at once")
        for _ in range(args.rounds):
            bench.latency(many, args.streams, pids)
        if args.rounds > 1:
            many.name += f" ({args.rounds} rounds)"
        for line in single.lines() + many.lines():
            print(line, flush=True)
        worker.stop()
        costs = []
        for r in range(args.cost_rounds):  # on, off, then off, on: drift cancels
            order = (True, False) if r % 2 == 0 else (False, True)
            costs += [bench.cost(stream) for stream in order]
    print(
        f"cost with nobody watching: {args.cost_tasks} tasks a phase, {args.chunks} chunks a "
        f"reply {args.cost_gap * 1000:g} ms apart, a fresh worker each phase"
    )
    for c in costs:
        print(c.line())
    on = [c for c in costs if c.stream]
    off = [c for c in costs if not c.stream]

    def ratio(part: Callable[[Cost], float]) -> float:
        return statistics.mean(map(part, on)) / statistics.mean(map(part, off))

    pairs = [a.worker_ms / b.worker_ms for a, b in zip(on, off, strict=True)]
    print(
        f"streaming on/off, CPU per task (mean of {len(on)} phase(s) each): "
        f"worker {ratio(lambda c: c.worker_ms):.3f}x, worker + redis-server "
        f"{ratio(lambda c: c.worker_ms + c.redis_ms):.3f}x   (goal: <= 1.1x); worker, each "
        f"round: {', '.join(f'{p:.3f}' for p in pairs)}"
    )
    print(f"the bench took {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
