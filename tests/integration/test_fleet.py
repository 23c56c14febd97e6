"""Fleet invariants with real PostgreSQL, Redis and Celery workers that the tests start and kill."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from fleet.constants import SWEEP_TICK_KEY
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from fleet.store import schema as s
from fleet.streaming.redis import key as deltas_key
from tests.conftest import redis_client
from tests.support.fleet import Fleet, Proc, fleet_settings, running_fleet, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(240), pytest.mark.serial]

TTL, SWEEP = 2.0, 1.0


@pytest.fixture
def shared_settings(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(
        tmp_path, pg_url, redis_url, config_dir, lease_ttl=TTL, sweep_interval=SWEEP
    )


def all_done(rt: Runtime, n: int) -> list[Task] | None:
    tasks = rt.store.list_tasks(TaskFilter(limit=10_000))
    if len(tasks) == n and all(t.status.terminal for t in tasks):
        return tasks
    return None


def runs_by_conversation(rt: Runtime) -> dict[uuid.UUID, list[tuple[int, object, object, str]]]:
    with rt.store.read() as conn:
        rows = conn.execute(
            select(
                s.tasks.c.conversation_id,
                s.tasks.c.seq,
                s.runs.c.started_at,
                s.runs.c.finished_at,
                s.runs.c.status,
            ).join(s.runs, s.runs.c.task_id == s.tasks.c.id)
        ).all()
    out: dict[uuid.UUID, list[tuple[int, object, object, str]]] = defaultdict(list)
    for r in rows:
        out[r.conversation_id].append((r.seq, r.started_at, r.finished_at, r.status))
    for runs in out.values():
        runs.sort(key=lambda x: x[1])  # by start time
    return out


@pytest.mark.core
def test_conversations_run_one_at_a_time_in_order_and_in_parallel_with_each_other(
    rt: Runtime, fleet: Fleet
) -> None:
    for i in range(3):
        fleet.worker(f"w{i}")
    conversations, per = 50, 10

    def submit_all(conv: int) -> None:
        for n in range(per):
            rt.dispatcher.submit("slowchat", f"c{conv} m{n}", key=f"conv-{conv}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(submit_all, range(conversations)))
    tasks = wait_for(
        lambda: all_done(rt, conversations * per), 180, interval=0.2, what="all 500 tasks to finish"
    )
    assert {t.status for t in tasks} == {TaskStatus.SUCCEEDED}
    # Each reply shows the history it saw: strictly the earlier tasks of its conversation.
    for t in tasks:
        assert t.reply == f"echo: {t.input[0].text} [history: {min(2 * (t.seq - 1), 20)}]"  # type: ignore[union-attr]
    by_conv = runs_by_conversation(rt)
    assert len(by_conv) == conversations
    for runs in by_conv.values():
        assert [seq for seq, *_ in runs] == list(range(1, per + 1)), "runs started out of seq order"
        for (_, _, end, _), (_, start, _, _) in itertools.pairwise(runs):
            assert end <= start, "two runs of one conversation overlapped"
    intervals = sorted((start, end) for runs in by_conv.values() for _, start, end, _ in runs)
    overlaps = sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])
    assert overlaps > 0, "runs of different conversations never overlapped"


def holder_pid(rt: Runtime, task_id: uuid.UUID) -> int | None:
    with rt.store.read() as conn:
        worker = conn.execute(select(s.tasks.c.worker).where(s.tasks.c.id == task_id)).scalar()
    return int(worker.rpartition(":")[2]) if worker else None


def status(rt: Runtime, task_id: uuid.UUID) -> TaskStatus:
    return rt.store.get_task(task_id).status


@pytest.mark.core
def test_a_killed_worker_frees_its_conversation_and_the_task_is_retried(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.beat()
    fleet.worker("a")
    fleet.worker("b")
    first = rt.dispatcher.submit("sleepy", "first", key="k").task
    second = rt.dispatcher.submit("sleepy", "second", key="k").task
    wait_for(lambda: status(rt, first.id) == TaskStatus.RUNNING, 20, what="first to run")
    victim = holder_pid(rt, first.id)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    # free again within lease TTL + sweep interval (plus process start-up slack)
    wait_for(
        lambda: rt.store.get_task(first.id).attempts == 2,
        TTL + SWEEP + 5,
        what="the killed task to be claimed again",
    )
    done = wait_for(lambda: all_done(rt, 2), 30, what="both tasks to finish")
    assert [t.status for t in done] == [TaskStatus.SUCCEEDED, TaskStatus.SUCCEEDED]
    runs = rt.store.runs_of(first.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    assert runs[1].context == runs[0].context, "the retry must reuse the frozen snapshot"
    later = rt.store.runs_of(second.id)
    assert later[0].started_at >= runs[1].finished_at  # type: ignore[operator]


@pytest.mark.core
def test_a_stalled_holder_cannot_write_after_another_worker_took_over(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.beat()
    a = fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit("sleepy", "stall me", key="s").task
    wait_for(lambda: status(rt, task.id) == TaskStatus.RUNNING, 20, what="the task to run")
    stalled = holder_pid(rt, task.id)
    assert stalled is not None
    os.kill(stalled, signal.SIGSTOP)
    try:
        wait_for(
            lambda: rt.store.get_task(task.id).attempts == 2,
            TTL + SWEEP + 5,
            what="another worker to take the task over",
        )
        wait_for(
            lambda: status(rt, task.id) == TaskStatus.SUCCEEDED, 20, what="the retry to finish"
        )
    finally:
        os.kill(stalled, signal.SIGCONT)
    # The stalled run wakes up, finds its fence stale and gives up without writing.
    logs = [p for p in fleet.procs if p.name in ("a", "b")]
    wait_for(
        lambda: any(f"abandoning task {task.id}" in p.log() for p in logs),
        20,
        what="the stalled worker to abandon its run",
    )
    done = rt.store.get_task(task.id)
    runs = rt.store.runs_of(task.id)
    assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]
    assert [m.role for m in rt.store.messages(done.conversation_id)] == ["user", "assistant"]
    with rt.store.read() as conn:
        steps = conn.execute(select(s.traces.c.run_id).where(s.traces.c.task_id == task.id)).all()
    assert {r.run_id for r in steps} == {runs[1].id}, "the stalled run wrote a trace"
    assert done.reply == "echo: stall me [history: 0]"
    del a


def test_collect_turns_a_burst_into_one_run(rt: Runtime, fleet: Fleet) -> None:
    fleet.worker("a")
    answers = [rt.dispatcher.submit("burst", f"part {i}", key="b") for i in range(5)]
    ids = {a.task.id for a in answers}
    assert len(ids) == 1 and [a.merged for a in answers] == [False, True, True, True, True]
    task_id = ids.pop()
    wait_for(lambda: status(rt, task_id) != TaskStatus.QUEUED, 20, what="the burst to be leased")
    after = rt.dispatcher.submit("burst", "late", key="b")
    assert not after.merged and after.task.id != task_id and after.task.seq == 2
    done = wait_for(lambda: all_done(rt, 2), 20, what="both tasks")
    assert done[0].submissions == 5
    assert done[0].reply == "echo: part 0\npart 1\npart 2\npart 3\npart 4 [history: 0]"
    assert len(rt.store.runs_of(task_id)) == 1
    assert done[1].reply == "echo: late [history: 2]"


@pytest.mark.core
def test_one_idempotency_key_makes_one_task_under_concurrent_repeats(
    rt: Runtime, fleet: Fleet
) -> None:
    barrier = threading.Barrier(8)

    def submit(deployment: str, key: str, text: str) -> uuid.UUID:
        barrier.wait()
        return rt.dispatcher.submit(deployment, text, key="c", idempotency_key=key).task.id

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = set(pool.map(lambda i: submit("chat", "same", f"try {i}"), range(8)))
    assert len(ids) == 1
    # across a collect merge: the merged submission's key names the task it merged into
    first = rt.dispatcher.submit("burst", "a", key="m", idempotency_key="m-1").task
    merged = rt.dispatcher.submit("burst", "b", key="m", idempotency_key="m-2")
    assert merged.merged and merged.task.id == first.id
    barrier.reset()
    with ThreadPoolExecutor(max_workers=8) as pool:
        again = set(pool.map(lambda i: submit("burst", "m-2", "b"), range(8)))
    assert again == {first.id}
    assert len(rt.store.list_tasks(TaskFilter())) == 2
    fleet.worker("a")
    done = wait_for(lambda: all_done(rt, 2), 20, what="both tasks")
    assert {t.submissions for t in done} == {1, 2}


@pytest.mark.core
def test_the_sweeper_runs_every_task_in_order_when_the_broker_lost_the_wakeups(
    rt: Runtime, fleet: Fleet, redis_url: str
) -> None:

    for c in range(5):
        for n in range(4):
            rt.dispatcher.submit("chat", f"m{n}", key=f"p{c}")
    client = redis_client(redis_url)
    # The first wake-up marks "on its way"; the rest are de-duplicated: one per conversation.
    assert client.llen("fleet") == 5
    client.delete("fleet")  # purge the broker queue: every wake-up is gone
    client.close()
    fleet.beat()
    fleet.worker("a")
    done = wait_for(lambda: all_done(rt, 20), 30, what="the sweeper to run every task")
    assert {t.status for t in done} == {TaskStatus.SUCCEEDED}
    for runs in runs_by_conversation(rt).values():
        assert [seq for seq, *_ in runs] == [1, 2, 3, 4]


def test_cancel_and_failure_close_the_run_and_the_conversation_moves_on(
    rt: Runtime, fleet: Fleet
) -> None:
    fleet.worker("a")
    long = rt.dispatcher.submit("tooly", '/tool wait {"seconds": 30}', key="x").task
    failing = rt.dispatcher.submit("tooly", "/loop current_time", key="x").task
    last = rt.dispatcher.submit("tooly", "after", key="x").task
    wait_for(lambda: status(rt, long.id) == TaskStatus.RUNNING, 20, what="the long task to run")
    assert rt.dispatcher.cancel(long.id).effect == "requested"
    done = wait_for(lambda: all_done(rt, 3), 60, what="all three tasks")
    assert [t.id for t in done] == [long.id, failing.id, last.id]
    assert [t.status for t in done] == [
        TaskStatus.CANCELLED,
        TaskStatus.FAILED,
        TaskStatus.SUCCEEDED,
    ]
    assert "step limit" in (done[1].error or "")
    assert [r.status for r in rt.store.runs_of(long.id)] == ["cancelled"]
    assert [r.status for r in rt.store.runs_of(failing.id)] == ["failed"]
    assert done[2].reply == "echo: after [history: 1]"


def test_a_run_stopped_by_its_cancel_leaves_no_trace_in_the_next_prompt(
    rt: Runtime, fleet: Fleet
) -> None:
    # Short enough for the drain to go on to the next task in the same settle statement.
    fleet.worker("a")
    first = rt.dispatcher.submit("tooly", '/tool wait {"seconds": 1}', key="c").task
    second = rt.dispatcher.submit("tooly", "second", key="c").task
    wait_for(lambda: status(rt, first.id) == TaskStatus.RUNNING, 20, what="the first task to run")
    assert rt.dispatcher.cancel(first.id).effect == "requested"
    done = wait_for(lambda: all_done(rt, 2), 30, what="both tasks")
    assert [t.status for t in done] == [TaskStatus.CANCELLED, TaskStatus.SUCCEEDED]
    assert [t.id for t in done] == [first.id, second.id]
    assert done[1].reply == "echo: second [history: 0]"


def test_warm_shutdown_finishes_the_current_run(rt: Runtime, fleet: Fleet, redis_url: str) -> None:
    a = fleet.worker("a")
    task = rt.dispatcher.submit("paced", "finish me", key="w").task
    nxt = rt.dispatcher.submit("paced", "next", key="w").task
    # its model step is under way (its first words are out); a task only claimed as the stop
    # begins would rightly be handed back before its first step instead
    with redis_client(redis_url) as r:
        wait_for(lambda: r.exists(deltas_key(task.id)), 20, what="the model step to begin")
    a.popen.send_signal(signal.SIGTERM)  # to the main process only: Celery's warm shutdown
    a.popen.wait(30)
    assert status(rt, task.id) == TaskStatus.SUCCEEDED
    assert rt.store.runs_of(task.id)[0].attempt == 1
    fleet.worker("b")
    wait_for(lambda: status(rt, nxt.id) == TaskStatus.SUCCEEDED, 20, what="the next task")


# -- the sweeper (`fleet beat`) -------------------------------------------------------------------

SWEEP_LINE = re.compile(r"sweep: recovered \d+, woke [1-9]")


def sweeps(*procs: Proc) -> int:
    return sum(len(SWEEP_LINE.findall(p.log())) for p in procs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def recovered_metric(port: int) -> float:
    """``fleet_tasks_recovered_total{status="interrupted"}`` as served on ``port``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    line = 'fleet_tasks_recovered_total{status="interrupted"} '
    found = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(line)]
    return found[0] if found else 0.0


def gone(pid: int) -> bool:
    """Exited (a zombie counts: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_two_sweepers_sweep_once_per_interval_and_either_recovers_alone(
    rt: Runtime, fleet: Fleet, redis_url: str
) -> None:

    ports = {name: free_port() for name in ("beat-a", "beat-b")}
    pair = [fleet.beat(name, "--metrics-port", str(port)) for name, port in ports.items()]
    # No worker yet: the conversation stays due, so every sweep wakes it and logs a line.
    rt.dispatcher.submit("chat", "due", key="d")
    wait_for(lambda: sweeps(*pair) >= 1, 20, what="a first sweep")
    first = time.monotonic()
    wait_for(lambda: sweeps(*pair) >= 12, 60, interval=0.02, what="twelve sweeps")
    # Each tick holds the Redis key 0.9 intervals: 11 gaps take >= 9.9 s (two unkeyed: ~5.5 s).
    assert time.monotonic() - first >= 8.0, "two sweepers swept in the same interval"

    client = redis_client(redis_url)
    holder = wait_for(lambda: client.get(SWEEP_TICK_KEY), 10, what="a sweeper to hold the tick")
    client.close()
    pid = int(holder.decode().rpartition(":")[2])
    (winner,) = [p for p in pair if p.pid == pid]
    winner.signal(signal.SIGKILL)
    fleet.worker("a")
    fleet.worker("b")
    task = rt.dispatcher.submit("sleepy", "after the sweeper died", key="k").task
    wait_for(lambda: status(rt, task.id) == TaskStatus.RUNNING, 20, what="the task to run")
    victim = holder_pid(rt, task.id)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: rt.store.get_task(task.id).attempts == 2,
        TTL + SWEEP + 5,
        what="the other sweeper to recover the task",
    )
    wait_for(lambda: status(rt, task.id) == TaskStatus.SUCCEEDED, 30, what="the retry to finish")
    (survivor,) = [p for p in pair if p is not winner]
    assert recovered_metric(ports[survivor.name]) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_sweeper_at_once(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path, sig: signal.Signals
) -> None:
    with running_fleet(
        tmp_path,
        database_url=pg_url,
        redis_url=redis_url,
        config_dir=config_dir,
        sweep_interval="1h",
    ) as f:
        beat = f.beat()
        beat.popen.send_signal(sig)
        assert beat.popen.wait(10) == 0  # an hour-long interval: only the signal ends its wait
        assert "fleet sweeper stopped" in beat.log()


def test_the_sweeper_logs_an_outage_and_goes_on(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> None:
    from sqlalchemy.engine import make_url

    from tests.support.proxy import proxy

    pg, rd = make_url(pg_url), make_url(redis_url)
    with (
        proxy(pg.host or "127.0.0.1", pg.port or 5432) as db_proxy,
        proxy(rd.host or "127.0.0.1", rd.port or 6379) as redis_proxy,
        running_fleet(
            tmp_path,
            database_url=pg.set(host="127.0.0.1", port=db_proxy.port).render_as_string(
                hide_password=False
            ),
            redis_url=f"redis://127.0.0.1:{redis_proxy.port}/{rd.database or 0}",
            config_dir=config_dir,
            sweep_interval=0.2,
        ) as f,
    ):
        beat = f.beat()
        db_proxy.cut()
        wait_for(
            lambda: beat.log().count("sweep skipped: database unavailable") >= 2,
            30,
            what="two sweeps to report the database down",
        )
        redis_proxy.cut()
        wait_for(
            lambda: beat.log().count("sweep skipped: Redis unavailable") >= 2,
            30,
            what="two ticks to report Redis down",
        )
        assert beat.popen.poll() is None
        assert "Traceback" not in beat.log()
        beat.popen.send_signal(signal.SIGTERM)
        assert beat.popen.wait(10) == 0


def test_worker_beat_runs_the_sweeper_as_a_child_and_stops_it(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    def worker_with_beat(name: str) -> tuple[Proc, int]:
        argv = [
            sys.executable,
            "-m",
            "fleet.cli",
            "worker",
            "-c",
            "1",
            "--runs",
            "1",  # a prefork pool: the test kills the pool process that runs the task
            "--beat",
            "-n",
            f"{name}@%h",
        ]
        env = {k: v for k, v in fleet.env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        proc = Proc(name, argv, {**env, "FLEET_METRICS_PORT": str(port)}, tmp_path / f"{name}.log")
        fleet.procs.append(proc)
        started = proc.wait_log(r"fleet sweeper started: every \S+ as \S+:(\d+)")
        proc.wait_log(rf"{name}@\S+ ready\.")  # the node name given with -n
        sweeper = int(started.group(1))
        assert sweeper != proc.pid and os.getpgid(sweeper) == proc.pid
        return proc, sweeper

    port = free_port()
    one, sweeper = worker_with_beat("wb1")
    task = rt.dispatcher.submit("sleepy", "recovered by the child", key="k").task
    wait_for(lambda: status(rt, task.id) == TaskStatus.RUNNING, 20, what="the task to run")
    victim = holder_pid(rt, task.id)
    assert victim is not None and victim not in (one.pid, sweeper)
    os.kill(victim, signal.SIGKILL)  # the pool process only; Celery starts another
    wait_for(
        lambda: rt.store.get_task(task.id).attempts == 2,
        TTL + SWEEP + 5,
        what="the worker's sweeper to recover the task",
    )
    wait_for(lambda: status(rt, task.id) == TaskStatus.SUCCEEDED, 30, what="the retry to finish")
    assert recovered_metric(port) == 1, "the worker's metrics include its sweeper's"
    one.popen.send_signal(signal.SIGTERM)  # the main process: warm shutdown, then the child
    assert one.popen.wait(30) == 0
    assert gone(sweeper)

    two, orphan = worker_with_beat("wb2")
    two.popen.send_signal(signal.SIGKILL)  # no shutdown at all: the child notices by itself
    two.popen.wait(10)
    wait_for(lambda: gone(orphan), TTL + SWEEP + 10, what="the orphaned sweeper to exit")
