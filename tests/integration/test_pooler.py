"""Fleet behind a real PgBouncer in transaction mode: `fleet migrate` directly, then the API and a
worker through the bouncer with FLEET_DATABASE_POOLER=transaction."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from fleet.store import schema as s
from tests.support.fleet import Fleet, fleet_settings, running_fleet, runtime_for, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120)]

CONVERSATIONS, PER = 10, 6


def migrate(tmp: Path, bounced: str, direct: str) -> None:
    """`fleet migrate` with the normal URL through the bouncer and the migrations' URL direct."""
    env = {
        **os.environ,
        "FLEET_DATABASE_URL": bounced,
        "FLEET_MIGRATE_DATABASE_URL": direct,
        "FLEET_HOME": str(tmp / "home"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli", "migrate"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "migrated from empty" in done.stdout


def submit_all(url: str) -> list[httpx.Response]:
    """``PER`` tasks on each of ``CONVERSATIONS`` conversations, the conversations at once."""

    def one_conversation(conv: int) -> list[httpx.Response]:
        with httpx.Client(base_url=url, timeout=30) as http:
            return [
                http.post(
                    "/v1/tasks",
                    json={"deployment": "chat", "input": f"m{n}", "conversationKey": f"c{conv}"},
                )
                for n in range(PER)
            ]

    with ThreadPoolExecutor(CONVERSATIONS) as pool:
        return [r for rs in pool.map(one_conversation, range(CONVERSATIONS)) for r in rs]


def prepared_statement_errors(fleet: Fleet) -> list[str]:
    return [
        line
        for proc in fleet.procs
        for line in proc.log().splitlines()
        if "prepared statement" in line.lower()
    ]


@pytest.mark.core
def test_api_and_worker_through_pgbouncer_in_transaction_mode(
    tmp_path: Path, pgbouncer_url: tuple[str, str], redis_url: str, config_dir: Path
) -> None:
    direct, bounced = pgbouncer_url
    migrate(tmp_path, bounced, direct)
    settings = fleet_settings(
        tmp_path, bounced, redis_url, config_dir, database_pooler="transaction"
    )
    with running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1", concurrency=2)
        url = fleet.serve()
        answers = submit_all(url)
        assert [r.status_code for r in answers] == [202] * (CONVERSATIONS * PER), [
            r.text for r in answers if r.status_code != 202
        ][:3]
        with runtime_for({**settings, "database_url": direct}) as rt:

            def finished() -> list[tuple[str, int, object, object, str]] | None:
                with rt.store.read() as conn:
                    rows = conn.execute(
                        select(
                            s.tasks.c.conversation_key,
                            s.tasks.c.seq,
                            s.tasks.c.started_at,
                            s.tasks.c.finished_at,
                            s.tasks.c.status,
                        )
                    ).all()
                done = [tuple(r) for r in rows if r.finished_at is not None]
                return done if len(done) == CONVERSATIONS * PER else None

            rows = wait_for(finished, 60, interval=0.2, what="all tasks to finish")
        assert {r[4] for r in rows} == {"succeeded"}
        by_conversation: dict[str, list[tuple[str, int, object, object, str]]] = defaultdict(list)
        for r in rows:
            by_conversation[r[0]].append(r)
        assert len(by_conversation) == CONVERSATIONS
        for tasks in by_conversation.values():
            tasks.sort(key=lambda r: r[1])
            assert [r[1] for r in tasks] == list(range(1, PER + 1))
            for before, after in itertools.pairwise(tasks):
                assert before[3] <= after[2], tasks  # one at a time, in order
        assert prepared_statement_errors(fleet) == []


#: One server connection for every client: the API's connections meet the names another
#: prepared on it at once, however the load spreads the submissions.
@pytest.mark.pgbouncer_pool_size(1)
def test_without_the_setting_the_bouncer_breaks_prepared_statements_and_says_what_to_set(
    tmp_path: Path, pgbouncer_url: tuple[str, str], redis_url: str, config_dir: Path
) -> None:
    direct, bounced = pgbouncer_url
    migrate(tmp_path, bounced, direct)
    settings = fleet_settings(tmp_path, bounced, redis_url, config_dir, database_pooler="none")
    with running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1", concurrency=2)
        url = fleet.serve()
        answers = submit_all(url)
        refused = [r for r in answers if r.status_code >= 500]
        assert refused, "every submission succeeded through the bouncer without the setting"
        assert all(r.status_code == 503 for r in refused), [r.text for r in refused][:3]
        unnamed = [r.text for r in refused if "FLEET_DATABASE_POOLER" not in r.json()["detail"]]
        assert unnamed == [], unnamed[:3]


def _check(bounced: str, redis_url: str, config_dir: Path) -> subprocess.CompletedProcess[str]:
    """`fleet check` through the bouncer, FLEET_DATABASE_POOLER unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(
        FLEET_DATABASE_URL=bounced, FLEET_REDIS_URL=redis_url, FLEET_CONFIG_DIR=str(config_dir)
    )
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", "check"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.pgbouncer_pool_size(1)
def test_every_path_that_meets_the_bouncer_without_the_setting_names_it(
    tmp_path: Path, pgbouncer_url: tuple[str, str], redis_url: str, config_dir: Path
) -> None:
    """`fleet check`, a worker's wake-up tasks and the beat's sweeps and schedule passes: each
    says to set FLEET_DATABASE_POOLER, in one line, never a traceback."""
    direct, bounced = pgbouncer_url
    migrate(tmp_path, bounced, direct)
    checked = _check(bounced, redis_url, config_dir)
    assert checked.returncode == 1, checked
    [database] = [line for line in checked.stdout.splitlines() if line.startswith("FAIL")]
    assert "unsupported startup parameter: options" in database
    assert "set FLEET_DATABASE_POOLER=transaction" in database
    settings = fleet_settings(
        tmp_path, bounced, redis_url, config_dir, database_pooler="none", sweep_interval=0.5
    )
    with running_fleet(tmp_path, **settings) as fleet:
        worker = fleet.worker("w1", concurrency=2)
        beat = fleet.beat()
        url = fleet.serve(FLEET_DATABASE_POOLER="transaction")  # the API admits: work to do
        answers = submit_all(url)
        assert {r.status_code for r in answers} == {202}
        worker.wait_log("FLEET_DATABASE_POOLER", timeout=60)
        beat.wait_log("FLEET_DATABASE_POOLER", timeout=60)
        logs = {proc.name: proc.log() for proc in (worker, beat)}
    for name, text in logs.items():
        assert "Traceback" not in text, f"{name}:\n{text[-3000:]}"
        mistakes = [
            line
            for line in text.splitlines()
            if "prepared statement" in line and "FLEET_DATABASE_POOLER" not in line
        ]
        assert mistakes == [], f"{name}: {mistakes[:3]}"
