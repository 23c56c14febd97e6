"""A release rolls out over the one before it while tasks flow (issue 40's acceptance): the
previous release's serve, workers and beat on a fresh database take 60 conversations of three
tasks each, whose agent calls a tool with a counted side effect between two slow model steps;
mid-load this release migrates (expand steps), starts its own serve, workers and beat, and the old
processes are stopped with SIGTERM. Every task succeeds, each conversation in order, every side
effect once, and runs name both releases. Then a run handed back by either release resumes on
the other from its journal, its steps replayed.

Marked ``upgrade``: ``make test-upgrade`` runs these (``make test`` at its end), the rest of the
suite does not."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleet.domain.values import Task, TaskStatus
from fleet.store import Store, TaskFilter
from fleet.store import schema as s
from fleet.version import __version__
from tests.support.fleet import Proc, wait_for
from tests.support.upgrade import Previous, Side
from tests.upgrade.conftest import CLIENT_KEY, OPS_KEY

pytestmark = [
    pytest.mark.upgrade,
    pytest.mark.fleet,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.timeout(600),  # the first run sets the previous release up (pip)
]

CONVERSATIONS, TASKS = 60, 3


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _submit(api: str, deployment: str, text: str, key: str) -> uuid.UUID:
    answer = httpx.post(
        f"{api}/v1/tasks",
        json={"deployment": deployment, "input": text, "conversationKey": key},
        headers=_headers(CLIENT_KEY),
        timeout=30,
    )
    assert answer.status_code in (200, 201, 202), answer.text
    return uuid.UUID(answer.json()["id"])


def _counted(counter: Path) -> list[str]:
    """The task id of each side effect so far, one per tool call made."""
    return (
        [line.split()[0] for line in counter.read_text().splitlines()] if counter.exists() else []
    )


def _tasks(reader: Store) -> list[Task]:
    return reader.list_tasks(TaskFilter(limit=10_000))


def _releases(api: str) -> list[str]:
    listing = httpx.get(f"{api}/v1/workers", headers=_headers(OPS_KEY), timeout=10)
    assert listing.status_code == 200, listing.text
    return sorted(r["release"] for r in listing.json()["releases"])


def _explain(reader: Store, task_ids: list[uuid.UUID], made: Counter[str]) -> str:
    """What became of each task's side effect: its runs, their tool steps."""
    lines = []
    for task_id in task_ids:
        lines.append(f"task {task_id}: side effect made {made[str(task_id)]} time(s)")
        for run in reader.runs_of(task_id):
            lines.append(f"  run {run.attempt} by {run.release}: {run.status} {run.error or ''}")
            for step in reader.get_run(run.id).steps:
                if step.kind == "tool":
                    lines.append(f"    tool {step.name}: {step.status} -> {step.output!r}")
    return "\n".join(lines)


def _in_first_step(reader: Store, version: str) -> int:
    """Runs in flight on processes of ``version`` that have journaled no step yet (in their
    first model step: a SIGTERM now hands them back before their tool call)."""
    r, tr = s.runs, s.traces
    journaled = select(tr.c.id).where(tr.c.run_id == r.c.id).exists()
    with reader.read() as conn:
        found = conn.execute(select(r.c.release).where(r.c.finished_at.is_(None), ~journaled))
        return sum(1 for (release,) in found if _version(release) == version)


def _version(release: str | None) -> str:
    return (release or "").split("+", 1)[0]


def test_a_release_rolls_out_over_the_previous_one_under_load(
    previous: Previous, old: Side, new: Side, reader: Store, counter: Path
) -> None:
    began = time.monotonic()
    times: dict[str, float] = {}

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    assert previous.release.version != __version__
    migrated = old.cli("migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    old_api = old.api(wait=False)
    old_workers = [old.worker("w1", wait=False), old.worker("w2", wait=False)]
    old_beat = old.beat(wait=False)
    old.serving(old_api)
    for proc in (*old_workers, old_beat):
        old.ready(proc)
    assert [_version(r) for r in _releases(old_api)] == [previous.release.version]
    mark("old up")

    keys = [f"c{i}" for i in range(CONVERSATIONS)]
    submitted: dict[str, list[uuid.UUID]] = {key: [] for key in keys}
    submitter = ThreadPoolExecutor(8)

    def submit_round(j: int) -> None:
        """Task ``j`` of every conversation, through the old release's API."""

        def one(key: str) -> uuid.UUID:
            return _submit(old_api, "counter", f"{key} t{j}\n/tool count {{}}", key)

        for key, task_id in zip(keys, submitter.map(one, keys), strict=True):
            submitted[key].append(task_id)

    for j in range(TASKS - 1):
        submit_round(j)
    mark("submitted")

    def succeeded() -> int:
        return reader.count_tasks(TaskFilter(status=TaskStatus.SUCCEEDED))

    wait_for(lambda: succeeded() >= 10, 120, interval=0.1, what="the old release's work")
    mark("upgrade")

    # Mid-load: this release's migrate (expand steps only); the old release stays ready on it.
    migrated = new.cli("migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert httpx.get(f"{old_api}/readyz", timeout=10).status_code == 200
    new_api = new.api(wait=False)
    new_procs = [new.worker("w1", wait=False), new.worker("w2", wait=False), new.beat(wait=False)]
    new.serving(new_api)
    for proc in new_procs:
        new.ready(proc)
    mark("new up")
    live = _releases(new_api)
    assert {_version(r) for r in live} == {previous.release.version, __version__}, live
    first = submitted["c0"][0]  # admitted by the old release, read through the new one
    assert httpx.get(f"{new_api}/v1/tasks/{first}", headers=_headers(CLIENT_KEY)).status_code == 200
    # The last round while both releases run (so the old one has work left, however fast it was).
    submit_round(TASKS - 1)
    submitter.shutdown()
    total = CONVERSATIONS * TASKS
    wait_for(
        lambda: _in_first_step(reader, previous.release.version),
        30,
        interval=0.02,
        what="a run of the old release in its first step",
    )
    mark("last round")

    # The old release goes: its workers hand their runs back at a step boundary.
    running = reader.count_tasks(TaskFilter(status=TaskStatus.RUNNING))
    left = total - succeeded()
    assert left > 0, f"the old release finished everything before the new one was up: {times}"
    codes = Side.terminate(*old_workers)
    assert set(codes.values()) == {0}, {p.name: p.log()[-3000:] for p in old_workers}
    codes = Side.terminate(old_beat, old.api_proc)  # uvicorn ends by the signal it handled
    assert set(codes.values()) <= {0, -signal.SIGTERM}, codes
    mark("old gone")

    def finished() -> bool:
        return all(t.status.terminal for t in _tasks(reader))

    wait_for(finished, 180, interval=0.2, what="every task to finish")
    mark("done")
    tasks = {t.id: t for t in _tasks(reader)}
    assert len(tasks) == total
    failed = [t for t in tasks.values() if t.status != TaskStatus.SUCCEEDED]
    assert not failed, [(t.key, t.status, t.error) for t in failed[:5]]
    runs = {task_id: reader.runs_of(task_id) for task_id in tasks}

    # Each conversation in order: its tasks in the order sent, no run before the last one ended.
    for key, ids in submitted.items():
        seqs = [tasks[i].seq for i in ids]
        assert seqs == sorted(seqs) and len(set(seqs)) == TASKS, (key, seqs)
        assert len({tasks[i].conversation_id for i in ids}) == 1
        ended = None
        for j, task_id in enumerate(ids):
            assert runs[task_id], (key, j)
            for run in runs[task_id]:
                assert run.finished_at is not None, f"{key} t{j}: a run left running"
                assert ended is None or run.started_at >= ended, f"{key} t{j}: runs overlap"
                ended = run.finished_at
            reply = tasks[task_id].result and tasks[task_id].result.get("reply")
            assert f"[history: {2 * j}]" in str(reply), (key, j, reply)

    # Every side effect exactly once, made by one of the task's runs.
    made = Counter(_counted(counter))
    wrong = [i for i in tasks if made[str(i)] != 1]
    assert not wrong, _explain(reader, wrong[:3], made)
    run_ids = {str(r.id) for rs in runs.values() for r in rs}
    assert {line.split()[1] for line in counter.read_text().splitlines()} <= run_ids

    # Runs name both releases, and no other.
    by_version = Counter(_version(r.release) for rs in runs.values() for r in rs)
    assert set(by_version) == {previous.release.version, __version__}, by_version
    handed = [r for rs in runs.values() for r in rs if r.error and "handed back" in r.error]
    both = [i for i, rs in runs.items() if len({_version(r.release) for r in rs}) == 2]

    # Nothing of the old release is left registered.
    wait_for(
        lambda: {_version(r) for r in _releases(new_api)} == {__version__},
        30,
        interval=0.2,
        what="the old release's processes to leave the registry",
    )
    print(
        f"\n{previous.release.version} ({previous.release.short}) -> {__version__}: {total} tasks,"
        f" {left} left and {running} running at the old release's SIGTERM, {len(handed)} run(s)"
        f" handed back, {len(both)} task(s) run by both; runs by version: {dict(by_version)};"
        f" seconds: {times}"
    )


def _hand_back(
    stopping: Proc, heir: Side, heir_name: str, task_id: uuid.UUID, reader: Store, counter: Path
) -> Proc:
    """With the task's tool holding its run on ``stopping``'s release: start a worker of the
    other release (both live), SIGTERM ``stopping``, let the tool end; the run is handed back at
    that step boundary and the other worker resumes it. Returns the heir."""
    heir_worker = heir.worker(heir_name, concurrency=1)
    stopping.popen.send_signal(signal.SIGTERM)
    # Said once it stops taking steps (0.5.0 on, whatever its pool); before, a prefork pool
    # process said it, and a worker with runs on threads said only Celery's warm shutdown line
    # (its stop flag is set on a thread right after: microseconds, against the tool's polling).
    stopping.wait_log(
        r"stopping: finishing the current step|Warm shutdown \(MainProcess\)", timeout=30
    )
    Path(f"{counter}.{task_id}.go").touch()
    assert stopping.popen.wait(60) == 0, stopping.log()[-3000:]
    try:
        wait_for(
            lambda: reader.get_task(task_id).status.terminal,
            60,
            interval=0.1,
            what="the handed-back task to finish on the other release",
        )
    except AssertionError as exc:
        task, runs = reader.get_task(task_id), reader.runs_of(task_id)
        said = {p.name: p.log()[-3000:] for p in (stopping, heir_worker)}
        runs_said = [(r.status, r.error) for r in runs]
        raise AssertionError(f"{exc}: {task.status} {runs_said} {said}") from exc
    return heir_worker


def _check_resumed(reader: Store, counter: Path, task_id: uuid.UUID, order: list[str]) -> None:
    task = reader.get_task(task_id)
    assert task.status == TaskStatus.SUCCEEDED, task.error
    first, second = reader.runs_of(task_id)
    assert [_version(first.release), _version(second.release)] == order
    assert first.error is not None and "handed back" in first.error, first.error
    # The first run's model step and tool call come from its journal; only the reply is new.
    steps = [(st.step, st.kind, st.replayed) for st in reader.get_run(second.id).steps]
    assert steps == [(1, "model", True), (2, "tool", True), (3, "model", False)], steps
    assert second.details.get("replayed") == [1, 2], second.details
    assert _counted(counter).count(str(task_id)) == 1, "the tool ran again"


def test_a_run_handed_back_by_either_release_resumes_on_the_other_from_its_journal(
    previous: Previous, old: Side, new: Side, reader: Store, counter: Path
) -> None:
    for side in (old, new):  # the database as it is once the new release has migrated
        migrated = side.cli("migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    old_api, new_api = old.api(wait=False), new.api(wait=False)
    a = old.worker("a", concurrency=1, wait=False)
    # A fleet's beat: its sweeps push a turn where none waits (a 0.4.0 worker with runs on
    # threads takes a turn while it stops, and drops it)
    beat = new.beat(wait=False)
    old.serving(old_api)
    new.serving(new_api)
    old.ready(a)
    new.ready(beat)
    before, after = previous.release.version, __version__

    # old → new: a run of the old release, handed back, resumes on the new one
    t1 = _submit(new_api, "holder", "/tool count_then_hold {}", "k1")
    wait_for(
        lambda: str(t1) in _counted(counter), 60, what="the old release's run to call the tool"
    )
    assert [_version(r.release) for r in reader.runs_of(t1)] == [before]
    b = _hand_back(a, new, "b", t1, reader, counter)
    _check_resumed(reader, counter, t1, [before, after])

    # new → old: a run of the new release, handed back, resumes on the old one
    t2 = _submit(old_api, "holder", "/tool count_then_hold {}", "k2")
    wait_for(
        lambda: str(t2) in _counted(counter), 60, what="the new release's run to call the tool"
    )
    assert [_version(r.release) for r in reader.runs_of(t2)] == [after]
    _hand_back(b, old, "a2", t2, reader, counter)
    _check_resumed(reader, counter, t2, [after, before])
