"""Python tools with ``isolation = "process"``: the call runs in a child process; a call that
times out or must stop kills its child; only sync Python function tools may ask for it."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import pytest

from fleet.agents.tools import executor, isolated
from fleet.agents.tools.base import Tool, ToolContext
from fleet.agents.tools.python import from_function, resolve
from fleet.agents.tools.toolbox import ToolLoadError
from fleet.config import load_config
from fleet.config.tools import ToolRef
from tests.conftest import write_config


def tool(ref: str) -> Tool:
    return dataclasses.replace(from_function(resolve(ref), origin=ref), isolation="process")


def ctx() -> ToolContext:
    return ToolContext(task_id="t-1", run_id="r-1")


def test_the_call_runs_in_a_child_process_with_the_runs_context() -> None:
    got = executor.call(tool("tests.support.shop_tools:where"), {}, ctx(), timeout_s=60)
    assert got.error is None, got
    pid = int(got.text.split()[1])
    assert pid != os.getpid() and got.text.endswith("task t-1")
    again = executor.call(tool("tests.support.shop_tools:where"), {}, ctx(), timeout_s=60)
    assert again.text.split()[1] == str(pid), "an idle child is reused"


def test_bad_arguments_and_failures_are_results_the_model_sees() -> None:
    got = executor.call(
        tool("tests.support.shop_tools:spin"), {"seconds": "x"}, ctx(), timeout_s=60
    )
    assert got.error is not None and "invalid arguments for spin" in got.text


def test_a_call_that_times_out_kills_its_child() -> None:
    killed = isolated.POOL.killed
    got = executor.call(tool("tests.support.shop_tools:block"), {"seconds": 60}, ctx(), timeout_s=1)
    assert got.error == "timed out after 1s"
    assert isolated.POOL.killed == killed + 1


def test_a_stop_kills_the_child_at_once() -> None:
    stop = threading.Event()
    killed = isolated.POOL.killed
    threading.Timer(0.5, stop.set).start()
    got = executor.call(
        tool("tests.support.shop_tools:spin"),
        {"seconds": 60},
        ctx(),
        timeout_s=60,
        watch=stop.is_set,
    )
    assert got.stopped and isolated.POOL.killed == killed + 1


def test_only_sync_function_tools_may_ask_for_a_process(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is for Python function tools"):
        ToolRef(tool="current_time", isolation="process")
    config = write_config(
        tmp_path / "config",
        {"a": '[[tools]]\ntool = "tests.support.shop_tools:slow"\nisolation = "process"\n'},
        {"d": 'agent = "a"\n'},
    )
    from fleet.agents.tools.toolbox import build as build_tools

    agent = load_config(config).agents["a"]
    with pytest.raises(ToolLoadError, match="is async"):
        build_tools(agent, config)
