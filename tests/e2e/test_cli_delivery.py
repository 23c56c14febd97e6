"""``fleet run --delivery``: the queue mode of one submission, over the deployment's own
(embedded, the real console script in subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import Cli, _command
from tests.support.fleet import wait_for

pytestmark = pytest.mark.serial  # timing-bound (a run still running when the steer comes): alone


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    config = write_config(
        tmp_path / "config",
        agents={"sleeper": 'model = "echo"\ntools = ["wait"]\n'},
        deployments={"plain": 'agent = "sleeper"\n'},  # queue mode: followup (the default)
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)})


def test_delivery_collect_merges_one_submission_into_the_queued_task(cli: Cli) -> None:
    first = cli.json("run", "plain", "a", "-c", "k", "--no-wait")
    merged = cli.json("run", "plain", "b", "-c", "k", "--no-wait", "--delivery", "collect")
    assert (merged["id"], merged["submissions"], merged["deliveredTo"]) == (
        first["id"],
        2,
        "queued",
    )
    after = cli.json("run", "plain", "c", "-c", "k", "--no-wait")  # the deployment's followup
    assert after["id"] != first["id"] and after["seq"] == 2


def test_delivery_steer_puts_one_submission_into_the_running_run(cli: Cli) -> None:
    """A ``fleet run`` process runs a waiting task; ``--delivery steer`` from another one puts
    its message into that run, which answers it after the wait (followup would queue it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")} | cli.env
    busy = subprocess.Popen(
        [*_command(), "run", "plain", '/tool wait {"seconds": 8}', "-c", "k", "--no-live"],
        cwd=cli.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: [t["status"] for t in cli.json("tasks", "ls", "-c", "k")] == ["running"],
            30,
            interval=0.2,
            what="the first task to run",
        )
        steered = cli.json("run", "plain", "btw", "-c", "k", "--no-wait", "--delivery", "steer")
        out, err = busy.communicate(timeout=60)
    finally:
        busy.kill()
    assert steered["deliveredTo"] == "run" and steered["seq"] == 1, steered
    assert busy.returncode == 0, err
    assert out.startswith("echo: btw"), out  # the running run read it at its next boundary
    tasks = cli.json("tasks", "ls", "-c", "k")
    assert [(t["seq"], t["status"]) for t in tasks] == [(1, "succeeded")], json.dumps(tasks)
