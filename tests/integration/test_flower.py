"""Flower, unmodified, against a fleet's broker: it lists the workers and sees their tasks.

Real worker processes and a real Flower process. Flower is started with ``enable_events=False``
so it does not switch task events on by itself (its default does, every 5 s): the tasks it shows
prove that fleet's workers send events of their own accord (``FLEET_CELERY_EVENTS``).
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.support.fleet import Proc, running_fleet, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120)]
PASSWORD = secrets.token_urlsafe(12)


@pytest.fixture
def rt(tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path) -> Iterator[Runtime]:
    runtime = build(
        Settings(
            home=tmp_path / "home", database_url=pg_url, redis_url=redis_url, config_dir=config_dir
        )
    )
    yield runtime
    runtime.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_flower_lists_the_workers_and_their_tasks(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path, rt: Runtime
) -> None:
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config_dir
    ) as fleet:
        fleet.worker("w1")
        fleet.worker("w2")
        port = _free_port()
        argv = [
            *(sys.executable, "-m", "celery", "--broker", redis_url),
            *("-A", "fleet.dispatch.celery_app", "flower"),
            *(f"--port={port}", "--address=127.0.0.1", "--enable_events=False"),
            f"--basic_auth=fleet:{PASSWORD}",  # Flower's API answers no one without auth
        ]
        flower = Proc("flower", argv, fleet.env, tmp_path / "flower.log")
        fleet.procs.append(flower)
        api = f"http://127.0.0.1:{port}/api"

        def get(path: str) -> Any:
            if flower.popen.poll() is not None:
                raise AssertionError(f"flower exited:\n{flower.log()[-3000:]}")
            try:
                answer = httpx.get(f"{api}/{path}", auth=("fleet", PASSWORD), timeout=5)
            except httpx.HTTPError:
                return None  # not listening yet
            assert answer.status_code in (200, 503), f"{answer.status_code}: {answer.text}"
            return answer.json() if answer.status_code == 200 else None

        def workers() -> set[str]:
            listed = get("workers?refresh=1") or {}
            return {name.split("@")[0] for name in listed}

        wait_for(lambda: workers() >= {"w1", "w2"}, 60, interval=0.5, what="Flower's workers")

        task = rt.dispatcher.submit("chat", "hello flower", key="f-1").task
        wait_for(lambda: rt.store.get_task(task.id).status.terminal, 60, what="the task")
        assert rt.store.get_task(task.id).status == TaskStatus.SUCCEEDED

        def took_turns() -> list[dict[str, Any]]:
            tasks = (get("tasks") or {}).values()
            return [  # a turn of the fair queue that ran the task (its result: tasks run)
                t
                for t in tasks
                if t.get("name") == "fleet.turn"
                and t.get("state") == "SUCCESS"
                and str(t.get("result")) == "1"
            ]

        (seen,) = wait_for(took_turns, 30, interval=0.5, what="Flower to see the turn succeed")
        assert seen["worker"].split("@")[0] in {"w1", "w2"}
