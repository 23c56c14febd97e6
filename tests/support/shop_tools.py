"""Python tools for the tests: typed functions, as a user would write them."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Annotated, Literal

from pydantic import Field

import fleet
from fleet import ToolContext


def lookup_order(order_id: int, verbose: bool = False) -> dict[str, object]:
    """Look up an order by its number.

    Args:
        order_id: The order number, e.g. 1234.
        verbose: Include the line items.
    """
    if order_id == 404:
        raise LookupError(f"no order {order_id}")
    order: dict[str, object] = {"order": order_id, "status": "shipped"}
    if verbose:
        order["items"] = ["book"]
    return order


@fleet.tool(retry="safe", timeout=5)
async def track(carrier: Literal["ups", "dhl"], code: Annotated[str, Field(min_length=3)]) -> str:
    """Where a parcel is now."""
    await asyncio.sleep(0)
    return f"{carrier}:{code} is in transit"


@fleet.tool(name="slow_wait")
async def slow(seconds: float) -> str:
    """Sleep (async) for a while."""
    await asyncio.sleep(seconds)
    return "slept"


def stubborn(seconds: float, ctx: ToolContext) -> str:
    """A sync tool that stops early when told to (polls its context)."""
    if ctx.sleep(seconds):
        return "stopped"
    return "finished"


def block(seconds: float) -> str:
    """A synchronous tool that blocks its thread (no context polled, nothing to stop it)."""
    time.sleep(seconds)
    return "unblocked"


def spin(seconds: float) -> str:
    """A CPU-bound tool: holds the interpreter busy for ``seconds``."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return f"spun {n}"


def count(ctx: ToolContext) -> str:
    """Append one line to $FLEET_TEST_COUNTER (a side effect the tests count)."""
    path = os.environ["FLEET_TEST_COUNTER"]
    with open(path, "a") as f:
        f.write(f"{ctx.task_id} {ctx.run_id}\n")
    return "counted"


def count_then_hang(seconds: float, ctx: ToolContext) -> str:
    """Append a line, then wait (the test kills the worker meanwhile)."""
    path = os.environ["FLEET_TEST_COUNTER"]
    with open(path, "a") as f:
        f.write(f"{ctx.task_id} {ctx.run_id}\n")
    ctx.sleep(seconds)
    return "hung up"


def report(lines: int) -> str:
    """A long report: ``lines`` numbered lines (outgrows a small token budget)."""
    return "\n".join(f"line {i}: all parcels accounted for" for i in range(1, lines + 1))


def where(ctx: ToolContext) -> str:
    """The process this call ran in, and the run it was told of."""
    return f"pid {os.getpid()} task {ctx.task_id}"
