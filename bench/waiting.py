"""Waiting benchmark: what 1,000 tasks waiting for an approval cost a fleet, and how soon a
decided one resumes.

One fleet — ``--workers`` Celery worker processes of ``--concurrency`` each and a ``fleet beat``
(the sweeper), on a database and a redis-server of the bench's own — runs throughout:

  throughput  ``--tasks`` plain tasks (instant echo model, each its own conversation) admitted
              first, their wake-ups on a holding queue released in one Redis command (as in
              ``bench.dispatch``): tasks/s from the first start to the last finish, and the CPU
              per task of the fleet's processes, PostgreSQL's backends and Redis. ``--rounds``
              rounds with no task waiting, then as many with ``--waiting`` tasks waiting, then
              as many with none again (after they resumed): each waiting round against the mean
              of the no-waiting rounds of the same index before and after it (which cancels a
              steady drift of the machine), the median of those ratios with its interval (order
              statistics, as ``bench.dispatch`` does);
  idle        the CPU the fleet's processes spend in ``--idle`` seconds with nothing to do, with
              no task waiting and with the ``--waiting`` tasks waiting (nothing polls a waiting
              task: a decision wakes it, the sweeper finds its deadline);
  resume      ``--sample`` of the waiting tasks decided one at a time at ``--decide-rate`` a
              second, then the rest all at once (``--deciders`` threads, as fast as they can):
              for each, from the decision's commit to the start of the run that resumed it
              (the ``runs`` row's ``started_at``): p50, p95, p99, the most and how many took
              over 1 s; and the drain of the all-at-once batch.

The waiting tasks are ``/tool current_time {}`` to the echo model of an agent whose built-in
``current_time`` needs an approval: each stops at that call, holding no worker.

Then (``--phases``: ``approval``, ``event``, both by default) the same fleet's workers are
replaced by ``--workers`` processes of ``fleet worker -c 1 --runs R`` (the runs-in-flight workers:
Celery's thread pool, ``--runs`` runs in flight a process) for event waits:

  events      ``--waiting`` tasks ``/tool wait_for_event {"event": "payment.cleared", "key":
              "o-<i>", "timeout": "1h"}``, each on its own conversation and key, park holding no
              worker: the registry's runs in flight and free slots of each worker process (read
              once every entry was renewed after the last one parked), the same throughput
              rounds (none waiting, waiting for an event, none after they resumed) and idle
              readings as above on these workers; then ``--sample`` of them get their event one
              at a time at ``--event-rate`` a second and the rest all at once (``--deciders``
              threads): from the event (its received time, which the resolved wait keeps as its
              ``decided_at``) to the start of the run that resumed its task (``runs.started_at``)
              and the batch's drain; the baseline of that drain, on the same workers: as many
              approval waits as the batch, parked and decided all at once by as many threads
              (and, with the ``approval`` phase, that phase's drain on the prefork workers).
Prints figures; asserts no timing. Run: ``python -m bench.waiting`` (PostgreSQL on 127.0.0.1,
``redis-server`` on PATH; it makes and drops its own database and runs its own Redis).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from bench.dispatch import HOLD, Fleetbench, Round, median_interval, pct, steady
from bench.machine import CORES, PrivateRedis, process_tree, sample, spent
from fleet.constants import DEFAULT_RUNS, WAKE_QUEUE
from fleet.dispatch.registry import Registry
from fleet.domain.registry import Entry
from fleet.domain.values import TaskStatus
from fleet.runtime import build
from fleet.store import schema as s
from tests.support.fleet import Fleet, Proc, wait_for

t, r, w = s.tasks, s.runs, s.waits
#: The deployment whose tasks wait: the echo model calls a built-in that needs an approval.
WAITER = "approver"
WAITER_INPUT = "/tool current_time {}"
#: The deployment whose tasks wait for an event (``wait_for_event``), and the event's name.
LISTENER = "listener"
EVENT = "payment.cleared"
#: Where ``rt.dispatcher.submit`` puts a task: the events are sent to that tenant and scope.
TENANT, SCOPE = "default", "api"
PHASES = ("approval", "event")


def listener_input(key: str) -> str:
    return "/tool wait_for_event " + json.dumps({"event": EVENT, "key": key, "timeout": "1h"})


@dataclass(frozen=True, slots=True)
class Idle:
    """Percent of one core each group of processes spent while the fleet had nothing to do."""

    workers: float
    beat: float
    postgres: float
    redis: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """Decision commit (an event: its received time) → resumed run start, seconds, and the
    batch's span."""

    latencies: list[float]
    decided_s: float
    last_start_s: float
    last_finish_s: float
    #: CPU ms a resumed task of the fleet's processes, PostgreSQL and Redis (from the first
    #: decision to the last finish: the resumed runs and the decisions' wake-ups)
    cpu_ms: float
    #: CPU ms a decision of the deciding process (the bench: the API's part)
    decide_ms: float


@dataclass(frozen=True, slots=True)
class Conditions:
    """Throughput rounds and idle readings with none waiting, with ``--waiting`` tasks
    waiting, and with none again after they resumed."""

    park_s: float
    idle_none: Idle
    idle_waiting: Idle
    before: list[Round]
    during: list[Round]
    after: list[Round]
    still: int


@dataclass(frozen=True, slots=True)
class Events:
    """The event phase, on the runs-in-flight workers."""

    pool: str
    conditions: Conditions
    #: The registry's entries of the worker processes, read with every event wait parked.
    load: list[Entry]
    #: Seconds from the last one parked to the oldest of those entries' renewal.
    load_after_s: float
    one: Resumed
    everything: Resumed
    #: Waits each event resolved (``Sent.resolved``), and the duplicates among them.
    resolved: list[int]
    duplicates: int
    #: As many approvals as ``everything``'s events, parked and decided all at once on the
    #: same workers (the drain's baseline).
    approvals: Resumed
    approvals_park_s: float
    done: dict[str, int]
    approvals_done: dict[str, int]


class Bench:
    def __init__(self, tmp: Path, args: argparse.Namespace, stack: ExitStack) -> None:
        self.args = args
        self.tmp = tmp
        (tmp / "redis").mkdir()
        self.redis = PrivateRedis(tmp / "redis")
        stack.callback(self.redis.close)
        # the plain tasks: bench.dispatch's echo deployment, a fresh conversation each
        self.fb = Fleetbench(tmp, args.workers, args.tasks, redis_url=self.redis.url)
        stack.callback(self.fb.close)
        agents, deployments = self.fb.config / "agents", self.fb.config / "deployments"
        (agents / f"{WAITER}.toml").write_text(
            'model = "echo"\ntools = [{ tool = "current_time", approval = "required" }]\n'
        )
        (deployments / f"{WAITER}.toml").write_text(f'agent = "{WAITER}"\n')
        (agents / f"{LISTENER}.toml").write_text(
            'model = "echo"\n'
            'tools = [{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1d" }]\n'
        )
        (deployments / f"{LISTENER}.toml").write_text(f'agent = "{LISTENER}"\n')
        self.fb.rt.close()  # built before the waiting agents were written
        self.rt = self.fb.rt = build(self.fb.settings())
        self.committed: dict[uuid.UUID, datetime] = {}
        decide = self.rt.store.decide

        def recorded(task_id: uuid.UUID, *a: Any, **kw: Any) -> Any:
            out = decide(task_id, *a, **kw)  # returns once its transaction committed
            self.committed[task_id] = datetime.now(UTC)
            return out

        self.rt.store.decide = recorded  # type: ignore[method-assign]
        self.fleet: Fleet = self.fb.fleet()
        stack.callback(self.fleet.stop)
        self.workers: list[Proc] = []
        self.beat: Proc | None = None
        #: When the last of the waiting tasks was seen waiting (Unix seconds).
        self.parked_at = 0.0

    # -- the workers ----------------------------------------------------------------------------

    def start_prefork(self) -> None:
        """``--workers`` Celery workers of ``--concurrency`` prefork processes (a run each)."""
        self.workers = [
            self.fleet.worker(f"w{i}", self.args.concurrency, ready=False)
            for i in range(self.args.workers)
        ]
        self.ready()

    def start_runs(self) -> None:
        """``--workers`` processes of ``fleet worker -c 1 --runs R`` (Celery's thread pool: R
        runs in flight a process), as ``bench.dispatch`` starts them."""
        self.workers = []
        for i in range(self.args.workers):
            argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", "1"]
            argv += ["--runs", str(self.args.runs), "--name", f"runs{i}@%h"]
            proc = Proc(f"runs{i}", argv, self.fleet.env, self.tmp / f"runs{i}.log")
            self.fleet.procs.append(proc)
            self.workers.append(proc)
        self.ready()

    def ready(self) -> None:
        for proc in self.workers:
            proc.wait_log(r"ready\.", timeout=60)
        if self.beat is None:
            self.beat = self.fleet.beat()

    def stop_workers(self) -> None:
        for proc in self.workers:
            proc.terminate()
        for proc in self.workers:
            proc.stop()
            self.fleet.procs.remove(proc)
        self.workers = []

    def load(self, after: float) -> list[Entry]:
        """The registry's entries of the worker processes once each was renewed after
        ``after`` (Unix seconds): their runs in flight and free slots."""
        pids = {pid for p in self.workers for pid in process_tree(p.pid)}
        registry = Registry(self.fb.r)

        def renewed() -> list[Entry] | None:
            mine = [e for e in registry.read() if e.role == "worker" and e.pid in pids]
            fresh = len(mine) == len(self.workers) and all(e.seen_at > after for e in mine)
            return sorted(mine, key=lambda e: e.pid) if fresh else None

        found = wait_for(renewed, 60, interval=0.2, what="the workers' registry entries")
        assert found is not None
        return found

    # -- reading the store ----------------------------------------------------------------------

    def count(self, *where: Any) -> int:
        with self.rt.store.read() as conn:
            return int(conn.execute(select(func.count()).select_from(t).where(*where)).scalar_one())

    def statuses(self, deployment: str, *where: Any) -> dict[str, int]:
        with self.rt.store.read() as conn:
            found = conn.execute(
                select(t.c.status, func.count())
                .where(t.c.deployment == deployment, *where)
                .group_by(t.c.status)
            ).all()
        return {status: int(n) for status, n in found}

    # -- throughput -----------------------------------------------------------------------------

    def round(self) -> Round:
        """``--tasks`` plain tasks on fresh conversations, released at once to the running
        workers: tasks/s from the first start to the last finish, CPU ms per task."""
        self.fb.round += 1
        n, mine = self.args.tasks, t.c.conversation_key.like(f"r{self.fb.round}-%")
        wait_for(lambda: self.fb.r.llen(WAKE_QUEUE) == 0, 60, what="an empty wake-up queue")
        for i in range(n):
            self.fb.submit(i, self.fb.holding)
        cpu = self.meter()
        self.fb.r.rename(HOLD, WAKE_QUEUE)
        wait_for(
            lambda: self.count(mine, t.c.finished_at.is_not(None)) >= n,
            300,
            interval=0.05,
            what="the round's tasks",
        )
        used = cpu()
        with self.rt.store.read() as conn:
            first, last = conn.execute(
                select(func.min(r.c.started_at), func.max(r.c.finished_at))
                .select_from(r.join(t, t.c.id == r.c.task_id))
                .where(mine)
            ).one()
        return Round(n / (last - first).total_seconds(), used * 1000 / n)

    def meter(self) -> Callable[[], float]:
        """CPU seconds the fleet's processes, PostgreSQL's backends and Redis spend from now
        until the returned function is called."""
        procs = [pid for p in self.fleet.procs for pid in process_tree(p.pid)]
        procs.append(self.redis.proc.pid)
        before = sample(procs), sample(self.fb.backends())
        return lambda: (
            spent(before[0], sample(procs)) + spent(before[1], sample(self.fb.backends()))
        )

    def quiet(self) -> None:
        """Wait until the fleet has nothing left to do: no wake-up queued (a burst of wake-ups
        leaves surplus turn tokens, each an empty turn), then 2 s for the last turns, hints and
        a sweep."""
        wait_for(lambda: self.fb.r.llen(WAKE_QUEUE) == 0, 120, interval=0.1, what="no wake-up")
        time.sleep(2.0)

    # -- idle -----------------------------------------------------------------------------------

    def idle(self) -> Idle:
        self.quiet()
        assert self.beat is not None
        groups: dict[str, list[int]] = {
            "workers": [pid for p in self.workers for pid in process_tree(p.pid)],
            "beat": process_tree(self.beat.pid),
            "postgres": self.fb.backends(),
            "redis": [self.redis.proc.pid],
        }
        before = {k: sample(v) for k, v in groups.items()}
        time.sleep(self.args.idle)
        pct_of_core = {
            k: spent(before[k], sample(v)) * 100 / self.args.idle for k, v in groups.items()
        }
        return Idle(**pct_of_core)

    # -- waiting and resuming -------------------------------------------------------------------

    def park(
        self, deployment: str = WAITER, text: Callable[[str], str] = lambda _: WAITER_INPUT
    ) -> float:
        """Submit ``--waiting`` tasks, each on its own conversation; seconds until all wait."""
        return self.park_n(self.args.waiting, deployment, text, "wait")

    def park_n(self, k: int, deployment: str, text: Callable[[str], str], prefix: str) -> float:
        """Submit ``k`` tasks of ``deployment``, each on its own conversation (key
        ``<prefix>-<i>``, also the text's argument); seconds until all wait."""
        mine = t.c.conversation_key.like(f"{prefix}-%")
        started = time.perf_counter()
        for i in range(k):
            key = f"{prefix}-{i}"
            self.rt.dispatcher.submit(deployment, text(key), key=key)

        def parked() -> bool:
            now = self.statuses(deployment, mine)
            ended = {st: n for st, n in now.items() if TaskStatus(st).terminal}
            if ended:
                raise SystemExit(f"waiting tasks ended instead of waiting: {ended}")
            return bool(now.get(TaskStatus.WAITING.value, 0) >= k)

        wait_for(parked, 600, interval=0.2, what=f"{k} tasks to wait")
        return time.perf_counter() - started

    def pending(self, kind: str = "approval") -> list[tuple[uuid.UUID, uuid.UUID, str | None]]:
        """The pending waits of ``kind``: (task id, wait id, the event key waited for)."""
        with self.rt.store.read() as conn:
            found = conn.execute(
                select(w.c.task_id, w.c.id, w.c.event_key)
                .where(w.c.status == "pending", w.c.kind == kind)
                .order_by(w.c.task_id)
            ).all()
        return [(task_id, wait_id, key) for task_id, wait_id, key in found]

    def decide(
        self, batch: list[tuple[uuid.UUID, uuid.UUID, str | None]], pace: Callable[..., None]
    ) -> Resumed:
        """Approve ``batch`` (``pace``: how the decisions are spread); wait until every task of
        it finished; commit → resumed start for each."""
        tasks = [self.rt.store.get_task(task_id) for task_id, _, _ in batch]

        def approve(i: int) -> None:
            self.rt.dispatcher.waiting.decide(tasks[i], batch[i][1], "approve", by="bench")

        return self.resumed([task.id for task in tasks], approve, pace, lambda: self.committed)

    def send(
        self,
        batch: list[tuple[uuid.UUID, uuid.UUID, str | None]],
        pace: Callable[..., None],
        resolved: list[int],
    ) -> tuple[Resumed, int]:
        """Send each task of ``batch`` its event (``pace``: how they are spread); wait until
        every task of it finished; the event's received time → resumed start for each. Each
        send's ``resolved`` count is appended to ``resolved``; returns the duplicates too."""
        duplicates = []
        waiting = self.rt.dispatcher.waiting

        def send_one(i: int) -> None:
            key = batch[i][2]
            event = waiting.new_event(
                name=EVENT,
                key=key,
                data={"order": key, "amount": i},
                event_id=f"evt-{key}",
                tenant=TENANT,
                scope=SCOPE,
                sender="bench",
            )
            sent = waiting.send_event(event)
            resolved.append(sent.resolved)
            duplicates.append(sent.duplicate)

        ids = [task_id for task_id, _, _ in batch]

        def received() -> dict[uuid.UUID, datetime]:
            """The resolved waits' ``decided_at``: the event's received time."""
            with self.rt.store.read() as conn:
                found = conn.execute(
                    select(w.c.task_id, w.c.decided_at).where(
                        w.c.task_id.in_(ids), w.c.kind == "event", w.c.status == "done"
                    )
                ).all()
            return {task_id: at for task_id, at in found}

        return self.resumed(ids, send_one, pace, received), sum(duplicates)

    def resumed(
        self,
        ids: list[uuid.UUID],
        act: Callable[[int], None],
        pace: Callable[..., None],
        moments: Callable[[], dict[uuid.UUID, datetime]],
    ) -> Resumed:
        """Do ``act`` for each of ``ids`` (``pace``: how the acts are spread); wait until every
        task finished; from each one's moment (``moments``, read after) to its resumed run's
        start."""
        self.quiet()
        cpu, own = self.meter(), time.process_time()
        begun = datetime.now(UTC)
        pace(act)
        decided = datetime.now(UTC)
        own = time.process_time() - own
        wait_for(
            lambda: self.count(t.c.id.in_(ids), t.c.finished_at.is_not(None)) >= len(ids),
            300,
            interval=0.1,
            what="the decided tasks to finish",
        )
        used = cpu()
        with self.rt.store.read() as conn:
            runs = conn.execute(
                select(r.c.task_id, func.min(r.c.started_at), func.max(r.c.finished_at))
                .where(r.c.task_id.in_(ids), r.c.status != TaskStatus.WAITING.value)
                .group_by(r.c.task_id)
            ).all()
        at = moments()
        latencies = [(start - at[tid]).total_seconds() for tid, start, _ in runs]
        return Resumed(
            latencies,
            (decided - begun).total_seconds(),
            (max(start for _, start, _ in runs) - begun).total_seconds(),
            (max(end for _, _, end in runs) - begun).total_seconds(),
            used * 1000 / len(ids),
            own * 1000 / len(ids),
        )

    def all_at_once(self, n: int) -> Callable[[Callable[[int], None]], None]:
        def pace(act: Callable[[int], None]) -> None:
            with ThreadPoolExecutor(self.args.deciders) as pool:
                list(pool.map(act, range(n)))

        return pace

    def resume(self) -> tuple[Resumed, Resumed]:
        """``--sample`` decided one at a time, spread over time, then the rest all at once."""
        todo = self.pending("approval")
        spread, burst = todo[: self.args.sample], todo[self.args.sample :]
        rate = self.args.decide_rate
        one = self.decide(spread, lambda approve: steady(len(spread), rate, approve))
        everything = self.decide(burst, self.all_at_once(len(burst)))
        return one, everything

    # -- the phases -----------------------------------------------------------------------------

    def conditions(self, park: Callable[[], float], deployment: str) -> Callable[[], Conditions]:
        """Throughput and idle with none waiting, ``park``, then with them waiting; the returned
        function runs the rounds after they resumed and gives all three."""
        self.round()  # warm-up: the workers' first connections and code paths
        idle_none = self.idle()
        before = [self.round() for _ in range(self.args.rounds)]
        park_s = park()
        self.parked_at = time.time()
        idle_waiting = self.idle()
        during = [self.round() for _ in range(self.args.rounds)]
        still = self.statuses(deployment).get(TaskStatus.WAITING.value, 0)

        def after() -> Conditions:
            rounds = [self.round() for _ in range(self.args.rounds)]
            return Conditions(park_s, idle_none, idle_waiting, before, during, rounds, still)

        return after

    def events(self) -> Events:
        """The event phase on the runs-in-flight workers (``start_runs`` first)."""
        args = self.args
        pool = f"{args.workers} x fleet worker -c 1 --runs {args.runs}"

        def park() -> float:
            return self.park_n(args.waiting, LISTENER, listener_input, "o")

        after = self.conditions(park, LISTENER)
        # the entries renewed once every wait was stored (a renewal each third of
        # FLEET_REGISTRY_TTL: the idle reading gave them the time)
        loads = self.load(self.parked_at)
        todo = self.pending("event")
        if len(todo) != args.waiting:
            raise SystemExit(f"{len(todo)} event waits pending, not {args.waiting}")
        spread, burst = todo[: args.sample], todo[args.sample :]
        resolved: list[int] = []
        one, dup_one = self.send(
            spread, lambda act: steady(len(spread), args.event_rate, act), resolved
        )
        everything, dup_all = self.send(burst, self.all_at_once(len(burst)), resolved)
        conditions = after()
        done = self.statuses(LISTENER)
        # the drain's baseline on these workers: as many approvals, decided all at once
        approvals_park_s = self.park_n(
            len(burst), WAITER, lambda _: WAITER_INPUT, "approve-on-runs"
        )
        baseline = self.pending("approval")  # (the approval phase's were all decided)
        approvals = self.decide(baseline, self.all_at_once(len(baseline)))
        approvals_done = self.statuses(WAITER, t.c.conversation_key.like("approve-on-runs-%"))
        return Events(
            pool,
            conditions,
            loads,
            min(e.seen_at for e in loads) - self.parked_at,
            one,
            everything,
            resolved,
            dup_one + dup_all,
            approvals,
            approvals_park_s,
            done,
            approvals_done,
        )


def coverage(low: float, ordered: list[float]) -> float:
    """The confidence of ``median_interval``'s order statistics (``low`` its lower end) for
    the ``ordered`` values."""
    n, k = len(ordered), ordered.index(low) + 1
    return float(1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n)


def latency_line(label: str, res: Resumed) -> str:
    ms = [x * 1000 for x in res.latencies]
    over = sum(1 for x in res.latencies if x > 1.0)
    return (
        f"  {label:<26}{len(ms):>6}{pct(ms, 50):>9.1f}{pct(ms, 95):>9.1f}{pct(ms, 99):>9.1f}"
        f"{max(ms):>9.1f}{over:>9}{res.cpu_ms:>12.2f}{res.decide_ms:>12.2f}"
    )


def print_conditions(c: Conditions, waiting_label: str) -> None:
    """The throughput table, its ratio and the idle readings."""
    print(
        f"{'':34}{'tasks/s median (min-max)':>26}{'CPU ms/task':>13}"
        "  (fleet processes, PostgreSQL, Redis)"
    )
    rows = [
        ("none waiting, before", c.before),
        (waiting_label, c.during),
        ("none waiting, after they resumed", c.after),
    ]
    for label, rounds in rows:
        tps = [x.tps for x in rounds]
        cpu = statistics.median(x.cpu_ms for x in rounds)
        print(
            f"  {label:<32}{statistics.median(tps):>10.0f} ({min(tps):.0f}-{max(tps):.0f})"
            f"{'':>5}{cpu:>11.2f}"
        )
    ratios = [
        x.tps / ((b.tps + a.tps) / 2) for x, b, a in zip(c.during, c.before, c.after, strict=True)
    ]
    low, high = median_interval(ratios)
    conf = coverage(low, sorted(ratios))
    cpu_ratio = statistics.median(x.cpu_ms for x in c.during) / statistics.median(
        x.cpu_ms for x in c.before + c.after
    )
    print(
        f"waiting/none throughput ratio (median of {len(ratios)} rounds, each against the "
        f"none-waiting rounds before and after): {statistics.median(ratios):.2f}, "
        f"{conf * 100:.0f} % interval {low:.2f}-{high:.2f}   CPU per task ratio: {cpu_ratio:.2f}"
    )


def print_idle(none: Idle, waiting: Idle, waiting_label: str, idle_s: float) -> None:
    print(f"idle CPU, % of one core over {idle_s:g} s:  workers    beat  PostgreSQL   Redis")
    for label, idle in (("none waiting", none), (waiting_label, waiting)):
        print(
            f"  {label:<36}{idle.workers:>7.2f}{idle.beat:>8.2f}{idle.postgres:>12.2f}"
            f"{idle.redis:>8.2f}"
        )


def drain(res: Resumed) -> tuple[float, float]:
    """Resumed tasks/s from the first decision (or send) to the last resumed run's start, and
    to its finish."""
    n = len(res.latencies)
    return n / res.last_start_s, n / res.last_finish_s


def print_approvals(
    args: argparse.Namespace,
    c: Conditions,
    one: Resumed,
    everything: Resumed,
    done: dict[str, int],
    started: datetime,
    load: float,
) -> None:
    print(
        f"waiting benchmark ({started:%Y-%m-%d}, load average at start {load:.1f}, {CORES} "
        f"cores): {args.workers} worker processes of concurrency {args.concurrency} and a beat; "
        f"{args.waiting} tasks waiting for an approval, each on its own conversation; "
        f"throughput: {args.rounds} rounds of {args.tasks} plain echo tasks (fresh "
        "conversations) per condition"
    )
    print(f"parked: {args.waiting} tasks waiting {c.park_s:.1f} s after their submission")
    print_conditions(c, f"{args.waiting} waiting")
    print(f"  still waiting after those rounds: {c.still} of {args.waiting}")
    print_idle(c.idle_none, c.idle_waiting, f"{args.waiting} waiting", args.idle)
    print("resume: from the decision's commit to the start of the run that resumed the task, ms")
    print(
        f"  {'decided':<26}{'tasks':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'most':>9}{'over 1 s':>9}"
        f"{'CPU ms/task':>12}{'ms/decision':>12}"
    )
    print(latency_line(f"one at a time, {args.decide_rate:g}/s", one))
    print(latency_line("all at once", everything))
    print(
        f"  all at once: {len(everything.latencies)} decided by {args.deciders} threads in "
        f"{everything.decided_s:.2f} s; "
        f"the last resumed run started {everything.last_start_s:.2f} s and finished "
        f"{everything.last_finish_s:.2f} s after the first decision "
        f"({len(everything.latencies) / everything.last_finish_s:.0f} resumed tasks/s)"
    )
    print(
        "  CPU ms/task: the fleet's processes, PostgreSQL and Redis for a decided task's wake-up "
        "and resumed run; ms/decision: the deciding process's CPU (the API's share)"
    )


def print_events(
    args: argparse.Namespace,
    ev: Events,
    prefork: Resumed | None,
    started: datetime,
    load: float,
) -> None:
    c, n = ev.conditions, args.waiting
    label = f"{n} waiting for an event"
    print(
        f"event waits ({started:%Y-%m-%d}, load average at start {load:.1f}, {CORES} cores), on "
        f"the runs-in-flight workers: {ev.pool} (Celery's thread pool, "
        f"{args.workers * args.runs} runs in flight in all) and the same beat; {n} tasks waiting "
        f"for event {EVENT}, each on its own conversation and key; throughput: {args.rounds} "
        f"rounds of {args.tasks} plain echo tasks (fresh conversations) per condition"
    )
    print(f"parked: {n} tasks waiting {c.park_s:.1f} s after their submission")
    print(
        f"  registry with the {n} parked (each entry renewed {ev.load_after_s:.1f}+ s after the "
        "last one parked): "
        + ", ".join(
            f"pid {x.pid}: {x.runs_in_flight} runs in flight, {x.free_slots} free slots"
            for x in ev.load
        )
        + f" ({sum(x.runs_in_flight for x in ev.load)} runs in flight of "
        f"{sum(x.runs_in_flight + x.free_slots for x in ev.load)} slots)"
    )
    print_conditions(c, label)
    print(f"  still waiting after those rounds: {c.still} of {n}")
    print_idle(c.idle_none, c.idle_waiting, label, args.idle)
    print(
        "resume: from the event (its received time: the resolved wait's decided_at) to the start "
        "of the run that resumed the task, ms"
    )
    print(
        f"  {'sent':<26}{'tasks':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'most':>9}{'over 1 s':>9}"
        f"{'CPU ms/task':>12}{'ms/event':>12}"
    )
    print(latency_line(f"one at a time, {args.event_rate:g}/s", ev.one))
    print(latency_line("all at once", ev.everything))
    e = ev.everything
    print(
        f"  all at once: {len(e.latencies)} events sent by {args.deciders} threads in "
        f"{e.decided_s:.2f} s; the last resumed run started {e.last_start_s:.2f} s and finished "
        f"{e.last_finish_s:.2f} s after the first send "
        f"({len(e.latencies) / e.last_finish_s:.0f} resumed tasks/s)"
    )
    once = sum(1 for x in ev.resolved if x == 1)
    print(
        f"  events that resolved exactly one wait: {once} of {len(ev.resolved)} "
        f"(duplicates: {ev.duplicates}); ms/event: the sending process's CPU (the API's share)"
    )
    print(
        f"drain of the all-at-once batch ({args.deciders} threads sending or deciding as fast as "
        "they can): resumed tasks/s from the first send (decision) to the last resumed run's "
        "start, and to its finish; the sends (decisions) a second; the last run's start after "
        "the last send (decision)"
    )
    print(f"  {'':<44}{'to start':>9}{'to finish':>10}{'sent/s':>8}{'lag s':>7}{'events/this':>13}")
    ev_start, ev_finish = drain(e)
    rows: list[tuple[str, Resumed, str]] = [
        (f"{len(e.latencies)} events, runs-in-flight workers", e, ""),
        (
            f"{len(ev.approvals.latencies)} approvals, same workers",
            ev.approvals,
            f"(parked in {ev.approvals_park_s:.1f} s after the events)",
        ),
    ]
    if prefork is not None:
        rows.append(
            (f"{len(prefork.latencies)} approvals, prefork workers", prefork, "(the phase above)")
        )
    for name, res, note in rows:
        start, finish = drain(res)
        ratio = "" if res is e else f"{ev_start / start:.2f} ({ev_finish / finish:.2f})"
        print(
            f"  {name:<44}{start:>9.0f}{finish:>10.0f}{len(res.latencies) / res.decided_s:>8.0f}"
            f"{res.last_start_s - res.decided_s:>7.2f}{ratio:>13}  {note}".rstrip()
        )
    print(
        "  (context only: 45 resumed tasks/s to the last finish for 800 approvals on 2 prefork "
        "workers of concurrency 1, 2026-12-02, docs/performance/benchmarks.md)"
    )
    p95 = pct([x * 1000 for x in ev.one.latencies], 95)
    print(
        f"goal: events at {args.event_rate:g}/s resume with p95 event → run start <= 1 s: "
        f"p95 {p95:.1f} ms ({'met' if p95 <= 1000 else 'NOT met'}); parked event waits hold "
        f"no worker: {sum(x.runs_in_flight for x in ev.load)} runs in flight with {n} waiting"
    )
    print(
        f"  the event-waiting tasks at the end: {ev.done}; the approval baseline's: "
        f"{ev.approvals_done}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=2, help="worker processes")
    ap.add_argument("--concurrency", type=int, default=1, help="pool processes a worker")
    ap.add_argument("--tasks", type=int, default=400, help="plain tasks a throughput round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per condition")
    ap.add_argument("--waiting", type=int, default=1000, help="tasks waiting at once")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of each idle reading")
    ap.add_argument("--sample", type=int, default=200, help="decided (sent) one at a time")
    ap.add_argument("--decide-rate", type=float, default=20.0, help="those decisions a second")
    ap.add_argument(
        "--deciders", type=int, default=4, help="threads deciding (sending events for) the rest"
    )
    ap.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="comma-separated: approval (prefork workers), event (runs-in-flight workers)",
    )
    ap.add_argument(
        "--runs",
        type=int,
        default=DEFAULT_RUNS,
        help="event phase: runs in flight a worker process (fleet worker -c 1 --runs)",
    )
    ap.add_argument(
        "--event-rate", type=float, default=100.0, help="event phase: the sample's events a second"
    )
    args = ap.parse_args()
    args.sample = min(args.sample, args.waiting)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not phases or any(p not in PHASES for p in phases):
        ap.error(f"--phases: a comma-separated choice of {', '.join(PHASES)}")
    started, load, t0 = datetime.now(UTC), os.getloadavg()[0], time.monotonic()
    approvals: tuple[Conditions, Resumed, Resumed, dict[str, int]] | None = None
    events: Events | None = None
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        bench = Bench(Path(d), args, stack)
        if "approval" in phases:
            bench.start_prefork()
            after = bench.conditions(bench.park, WAITER)
            one, everything = bench.resume()
            conditions = after()
            approvals = (conditions, one, everything, bench.statuses(WAITER))
        if "event" in phases:
            bench.stop_workers()
            bench.start_runs()
            events = bench.events()
    if approvals is not None:
        conditions, one, everything, done = approvals
        print_approvals(args, conditions, one, everything, done, started, load)
        if events is None:
            print(
                f"  the waiting tasks at the end: {done}; the bench took "
                f"{time.monotonic() - t0:.0f} s"
            )
        else:
            print(f"  the waiting tasks at the end: {done}")
    if events is not None:
        print_events(args, events, approvals[2] if approvals else None, started, load)
        print(f"  the bench took {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
