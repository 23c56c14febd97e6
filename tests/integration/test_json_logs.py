"""FLEET_LOG_FORMAT=json: every line a fleet process logs is one JSON object, runs carry their ids.

Real processes: ``fleet worker`` (Celery's own loggers included), ``fleet beat`` and
``fleet serve``, each started the way an operator starts them.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.conftest import write_config
from tests.support.fleet import Proc, running_fleet, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(120)]

#: A configured secret (an API key setting): it must never reach the log, whoever logs it.
KEY = "sk-logs-test-0123456789abcdefghijkl"
TOOLS = '''
"""A tool that logs: a warning with secrets in it, an exception, a print."""
import logging
import os

log = logging.getLogger("logtools")


def shout(text: str) -> str:
    """Log ``text`` and a few things a careless tool might log."""
    log.warning("tool got %s with key %s", text, os.environ["FLEET_OPENAI_API_KEY"])
    log.warning("connecting with password=hunter2-hunter2")
    try:
        raise ValueError("first line\\nsecond line")
    except ValueError:
        log.exception("tool failed on purpose")
    print("printed by the tool")
    return "logged"
'''


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    root = write_config(
        tmp_path / "config",
        agents={"loud": 'model = "echo"\ntools = ["logtools:shout"]\nmax_steps = 4\n'},
        deployments={"loud": 'agent = "loud"\n'},
    )
    (root / "logtools.py").write_text(textwrap.dedent(TOOLS))
    return root


@pytest.fixture
def rt(tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path) -> Iterator[Runtime]:
    runtime = build(
        Settings(
            home=tmp_path / "home", database_url=pg_url, redis_url=redis_url, config_dir=config_dir
        )
    )
    yield runtime
    runtime.close()


def _records(proc: Proc) -> list[dict[str, Any]]:
    """Every line of the process's output, each parsed as one JSON object (or the test fails)."""
    records = []
    for number, line in enumerate(proc.log().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"{proc.name} line {number} is not JSON: {line!r}")
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    return records


def test_a_worker_logs_json_lines_and_a_runs_lines_carry_its_ids_and_labels(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path, rt: Runtime
) -> None:
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config_dir
    ) as fleet:
        fleet.env.update(FLEET_LOG_FORMAT="json", FLEET_OPENAI_API_KEY=KEY)
        argv = [sys.executable, "-m", "fleet.cli", "worker", "--concurrency", "1"]
        worker = Proc("worker", argv, fleet.env, tmp_path / "worker.log")
        fleet.procs.append(worker)
        worker.wait_log(r"ready\.")
        labels = {"team": "search", "ticket": "4711"}
        task = rt.dispatcher.submit(
            "loud", '/tool shout {"text": "hello"}', key="t-1", labels=labels
        ).task
        wait_for(lambda: rt.store.get_task(task.id).status.terminal, 60, what="the task")
        assert rt.store.get_task(task.id).status == TaskStatus.SUCCEEDED
        (run,) = rt.store.runs_of(task.id)
        worker.signal(signal.SIGTERM)  # warm shutdown: its notices must be JSON too
        worker.popen.wait(30)

    text = worker.log()
    assert KEY not in text and "hunter2-hunter2" not in text
    records = _records(worker)
    loggers = {r["logger"] for r in records}
    assert any(name.startswith("celery.") for name in loggers), loggers  # Celery's own
    assert any("ready." in r["message"] for r in records)
    assert any("shutdown" in r["message"] for r in records), "the warm shutdown notice"

    ours = [r for r in records if r.get("task_id") == str(task.id)]
    expected = {
        "task_id": str(task.id),
        "conversation_id": str(task.conversation_id),
        "run_id": str(run.id),
        "deployment": "loud",
        "labels": labels,
    }
    for record in ours:
        assert {k: record.get(k) for k in expected} == expected, record
    by_message = {r["message"]: r for r in ours}
    assert "tool got hello with key [REDACTED]" in by_message, sorted(by_message)
    assert any("password=" in m and "hunter2" not in m for m in by_message)
    assert "printed by the tool" in by_message  # stdout, redirected into the log
    failed = by_message["tool failed on purpose"]
    assert failed["level"] == "ERROR"
    assert "ValueError: first line\nsecond line" in failed["exception"]  # one field, one line
    # Records outside any run carry no run fields.
    assert not [r for r in records if "run_id" in r and r.get("task_id") != str(task.id)]


def test_beat_and_serve_log_json_lines(
    tmp_path: Path, pg_url: str, redis_url: str, config_dir: Path
) -> None:
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config_dir
    ) as fleet:
        fleet.env.update(FLEET_LOG_FORMAT="json")
        beat = fleet.beat()
        argv = [sys.executable, "-m", "fleet.cli", "serve", "--port", "0", "--loglevel", "info"]
        api = Proc("api", argv, fleet.env, tmp_path / "api.log")
        fleet.procs.append(api)
        api.wait_log("Application startup complete")  # uvicorn's own record
        beat.signal(signal.SIGTERM)
        beat.popen.wait(30)

    assert any(r["message"].startswith("fleet sweeper started") for r in _records(beat))
    assert any(r["message"] == "fleet sweeper stopped" for r in _records(beat))
    loggers = {r["logger"] for r in _records(api)}
    # uvicorn's records and the app's own (with no callers configured it warns the API is open)
    assert {"uvicorn.error", "fleet.api.auth"} <= loggers, loggers
