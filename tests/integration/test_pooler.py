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
        assert "FLEET_DATABASE_POOLER=transaction" in refused[0].json()["detail"]
