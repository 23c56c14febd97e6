"""``fleet worker -c N --runs M`` on real PostgreSQL and Redis: N worker processes of M runs each
under one ``fleet worker`` process, which serves their summed load on ``/metrics``
(``fleet_worker_runs_in_flight``, ``fleet_worker_free_slots``), stops them all on SIGTERM, and
stops them all, failing, when one of them dies."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.dispatch.pids import pid_alive
from fleet.dispatch.registry import Registry
from fleet.domain.registry import Entry
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, redis_client
from tests.conftest import write_config
from tests.support.fleet import Fleet, Proc, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.pg, pytest.mark.redis, pytest.mark.timeout(180)]

PROCESSES, RUNS = 2, 5
AGENTS = {"slow": '[model]\nprovider = "echo"\ndelay_ms = 3000\n'}
DEPLOYMENTS = {"desk": 'agent = "slow"\n'}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    return fleet_settings(
        tmp_path, pg_url, redis_url, config, lease_ttl=3.0, sweep_interval=1.0, registry_ttl=3.0
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _group(fleet: Fleet, tmp_path: Path, name: str, port: int | None = None) -> Proc:
    """``fleet worker -c 2 --runs 5``, once both of its processes are ready."""
    argv = [sys.executable, "-m", "fleet.cli", "worker", "-c", str(PROCESSES)]
    argv += ["--runs", str(RUNS), "--name", f"{name}@%h"]
    if port is not None:
        argv += ["--metrics-port", str(port)]
    env = {k: v for k, v in fleet.env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = Proc(name, argv, env, tmp_path / f"{name}.log")
    fleet.procs.append(proc)
    wait_for(
        lambda: proc.popen.poll() is None and proc.log().count(" ready.") >= PROCESSES,
        60,
        what=f"both processes of {name} to be ready",
    )
    return proc


def _workers(rt: Runtime) -> list[Entry]:
    return [e for e in Registry(redis_client(rt.settings)).read() if e.role == "worker"]


def _load(port: int) -> tuple[float, float]:
    """(runs in flight, free slots) on the worker's /metrics."""
    found: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("fleet_worker_runs_in_flight", "fleet_worker_free_slots"):
            found[name] = float(value)
    return found.get("fleet_worker_runs_in_flight", -1), found.get("fleet_worker_free_slots", -1)


def test_two_processes_of_five_runs_run_tasks_show_their_load_and_stop_on_sigterm(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    port = _free_port()
    group = _group(fleet, tmp_path, "grp", port)
    entries = wait_for(
        lambda: (found := _workers(rt)) and len(found) == PROCESSES and found,
        20,
        what="two worker processes in the registry",
    )
    pids = {e.pid for e in entries}
    assert len(pids) == PROCESSES and group.pid not in pids
    assert all(os.getpgid(pid) == group.pid for pid in pids), "children of the group"
    assert all(e.runs_in_flight + e.free_slots == RUNS for e in entries), entries
    assert wait_for(lambda: _load(port) == (0, PROCESSES * RUNS), 10, what="idle gauges")

    tasks = [rt.dispatcher.submit("desk", f"t{i}", key=f"g{i}").task for i in range(6)]
    # the 3 s model calls hold six runs at once, spread over the two processes' ten slots
    wait_for(lambda: _load(port) == (6, 4), 20, interval=0.1, what="six runs in flight")
    held = wait_for(
        lambda: (found := _workers(rt)) and sum(e.runs_in_flight for e in found) == 6 and found,
        10,
        what="the registry to show the six runs",
    )
    assert all(e.runs_in_flight + e.free_slots == RUNS for e in held)
    wait_for(
        lambda: all(rt.store.get_task(t.id).status == TaskStatus.SUCCEEDED for t in tasks),
        30,
        what="every task to succeed",
    )
    assert wait_for(lambda: _load(port) == (0, PROCESSES * RUNS), 10, what="the gauges back")

    os.kill(group.pid, signal.SIGTERM)  # the group's own process only: it tells its children
    assert group.popen.wait(30) == 0, group.log()[-3000:]
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, what="every child to end")
    assert not _workers(rt), "each child removes its registry entry as it stops"


def test_a_child_that_dies_stops_the_others_and_the_group_fails(
    rt: Runtime, fleet: Fleet, tmp_path: Path
) -> None:
    group = _group(fleet, tmp_path, "frail")
    entries = wait_for(
        lambda: (found := _workers(rt)) and len(found) == PROCESSES and found,
        20,
        what="two worker processes in the registry",
    )
    victim, other = (e.pid for e in entries)
    os.kill(victim, signal.SIGKILL)  # out of memory, say
    assert group.popen.wait(30) == 1
    assert not pid_alive(other)
    assert "ended (status -9) while no stop was asked: stopping the others" in group.log()
