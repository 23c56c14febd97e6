"""``fleet worker``'s runs in flight: its default, bad ``--runs`` and pool sizes refused in one
line with exit 2, the processes ``-c N --runs M`` starts, and the load gauges of /metrics."""

from __future__ import annotations

import sys
import types
import uuid

import pytest
from prometheus_client import REGISTRY

from fleet import metrics
from fleet.cli import group, main, ops
from fleet.constants import DEFAULT_RUNS, MAX_RUNS
from fleet.dispatch.shutdown import InFlight


def test_a_worker_process_holds_a_hundred_runs_by_default() -> None:
    import inspect

    assert inspect.signature(ops.worker).parameters["runs"].default == DEFAULT_RUNS == 100


@pytest.mark.parametrize("runs", ["0", "-1", "-250", str(MAX_RUNS + 1), "1000000"])
def test_runs_out_of_range_is_one_line_and_exit_2(
    runs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", "--runs", runs]) == 2
    assert capsys.readouterr().err == (
        f"fleet: --runs {runs}: a worker process holds 1 to 10,000 runs in flight; e.g. 100\n"
    )


def test_runs_from_the_environment_are_checked_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEET_WORKER_RUNS", "0")
    assert main(["worker"]) == 2
    assert capsys.readouterr().err.startswith("fleet: --runs 0: a worker process holds 1 to")
    monkeypatch.setenv("FLEET_WORKER_RUNS", "many")
    assert main(["worker"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs" in err and "FLEET_WORKER_RUNS" in err


@pytest.mark.parametrize("args", [[], ["-c", "1"], ["-c", "2", "--runs", "1"]])
def test_a_pool_too_small_for_a_drain_is_refused_at_start_naming_the_setting(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A drain keeps one connection and opens each transaction on a second: a pool of one
    would leave it waiting on itself, so the worker does not start."""
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("FLEET_DATABASE_POOL_SIZE", "1")
    assert main(["worker", *args]) == 2
    assert capsys.readouterr().err == (
        "fleet: environment: FLEET_DATABASE_POOL_SIZE: must be at least 2: a worker's drain "
        "keeps one connection and opens each transaction on a second; set "
        "FLEET_DATABASE_POOL_SIZE=2 or more (default 10) (got '1')\n"
    )


def test_each_process_of_a_group_is_a_worker_of_its_own_name() -> None:
    assert group.child_argv(2, 50, "INFO", None, python="py") == [
        *("py", "-m", "fleet.cli", "worker", "-c", "1", "--runs", "50"),
        *("--loglevel", "INFO", "--name", "fleet-2@%h"),
    ]
    assert group.child_argv(1, 5, "DEBUG", "desk@box")[-2:] == ["--name", "desk-1@box"]
    assert group.child_argv(1, 5, "DEBUG", "desk")[-1] == "desk-1@%h"
    assert group.child_argv(1, 5, "DEBUG", "desk")[0] == sys.executable


def test_the_load_gauges_follow_the_runs_in_flight() -> None:
    def sample(name: str) -> float | None:
        return REGISTRY.get_sample_value(name)

    inflight = InFlight()
    inflight.watch(lambda held: metrics.worker_load(held, 5))
    assert (sample("fleet_worker_runs_in_flight"), sample("fleet_worker_free_slots")) == (0, 5)
    runs = [types.SimpleNamespace(run_id=uuid.uuid4()) for _ in range(3)]
    for run in runs:
        inflight.add(run, handle=None)  # type: ignore[arg-type]
    assert (sample("fleet_worker_runs_in_flight"), sample("fleet_worker_free_slots")) == (3, 2)
    inflight.remove(runs[0].run_id)
    inflight.remove(runs[0].run_id)  # (once gone, a second remove changes nothing)
    assert (sample("fleet_worker_runs_in_flight"), sample("fleet_worker_free_slots")) == (2, 3)
    for run in runs[1:]:
        inflight.remove(run.run_id)
    assert (sample("fleet_worker_runs_in_flight"), sample("fleet_worker_free_slots")) == (0, 5)
