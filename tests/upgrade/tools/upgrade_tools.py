"""The tools of the upgrade tests, which processes of both releases import: this folder alone
is put on their PYTHONPATH (the previous release's processes must not see this tree)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fleet import ToolContext


def count(ctx: ToolContext) -> str:
    """Append one line to $FLEET_TEST_COUNTER (a side effect the tests count)."""
    with open(os.environ["FLEET_TEST_COUNTER"], "a") as f:
        f.write(f"{ctx.task_id} {ctx.run_id} {os.getpid()}\n")
    return "counted"


def count_then_hold(ctx: ToolContext) -> str:
    """Count, then wait (at most 120 s) for the test to let go: a file named after the task
    beside the counter (the test stops the worker meanwhile)."""
    count(ctx)
    go = Path(f"{os.environ['FLEET_TEST_COUNTER']}.{ctx.task_id}.go")
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "counted, held"
