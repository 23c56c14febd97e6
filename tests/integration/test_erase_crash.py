"""An erasure killed half-way (SIGKILL to ``fleet erase`` on PostgreSQL) has already refused new
tasks naming the resource, and leaves every conversation either whole or gone; run again, it
finishes what is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from fleet.config import Settings
from fleet.errors import Conflict
from fleet.runtime import Runtime, build
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import wait_for

WHO = "ada@example.com"
MANY = 150


@pytest.fixture
def home(tmp_path: Path, pg_url: str) -> Iterator[tuple[Runtime, dict[str, str]]]:
    config = write_config(tmp_path / "config")
    settings = Settings(home=tmp_path / "home", database_url=pg_url, config_dir=config)
    runtime = build(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(
        FLEET_HOME=str(tmp_path / "home"),
        FLEET_DATABASE_URL=pg_url,
        FLEET_CONFIG_DIR=str(config),
    )
    yield runtime, env
    runtime.close()


def erase(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "erase", "--resource", WHO, "--yes", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def left(rt: Runtime) -> tuple[int, int]:
    """The resource's conversations, and messages of conversations that are gone (0 when
    every conversation is whole or gone)."""
    with rt.store.read() as conn:
        convs = conn.execute(
            select(func.count(func.distinct(s.tasks.c.conversation_id))).where(
                s.tasks.c.resource_id == WHO
            )
        ).scalar_one()
        orphans = conn.execute(
            select(func.count())
            .select_from(s.messages)
            .where(~s.messages.c.conversation_id.in_(select(s.conversations.c.id)))
        ).scalar_one()
    return int(convs), int(orphans)


def test_an_erasure_killed_half_way_refuses_at_once_and_finishes_when_run_again(
    home: tuple[Runtime, dict[str, str]],
) -> None:
    rt, env = home
    for n in range(MANY):
        adm = rt.dispatcher.submit("chat", f"canary {n}", key=f"k{n}", resource_id=WHO)
        rt.dispatcher.drain(adm.task.conversation_id)
    assert left(rt) == (MANY, 0)
    first = erase(env)
    wait_for(lambda: 0 < left(rt)[0] < MANY - 10, 60, interval=0.01, what="half the erasure")
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)  # gone; its pipes closed
    convs, orphans = left(rt)
    assert 0 < convs < MANY, "killed before or after its work: nothing half-way to prove"
    assert orphans == 0, "a conversation half-erased"
    with pytest.raises(Conflict, match="erased"):
        rt.dispatcher.submit("chat", "again", key="new", resource_id=WHO)
    second = erase(env)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    done = json.loads(out)
    assert done["counts"]["conversations"] == convs  # what the first left, no more, no less
    assert left(rt) == (0, 0)
