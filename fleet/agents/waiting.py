"""How a run stops to wait (pure loop logic, no store): a tool call needing a person's approval
that is not decided yet, or a tool that must wait for something outside (``Park``: a delegate,
a pause's time). The run
records a ``wait`` step for each thing it waits for and ends ``waiting`` with the requests
(``fleet.agents.runner``); resumed, it asks the ``Waits`` port how each wait ended."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from fleet.agents.models.base import ToolCall
from fleet.agents.steps import Steps
from fleet.agents.tools.base import Tool
from fleet.domain import event_waits, waits

#: The result of a call needing an approval in a run that cannot wait for one.
NO_APPROVALS = "error: this tool needs a person's approval, and this run cannot ask for one"


class Undecided(Exception):
    """A tool call needs a person's approval that is not decided yet."""


class Parking(Exception):
    """A tool call waits for something outside (``call_agent``'s delegate)."""

    def __init__(self, request: waits.Request) -> None:
        super().__init__(request.kind)
        self.request = request


def decision(call: ToolCall, steps: Steps) -> waits.Decision:
    """The decision on this call's approval; raises Undecided while there is none."""
    port = steps.ports.waits
    assert port is not None
    decided = port.decision(call.id)
    if decided is None:
        raise Undecided(call.id)
    return decided


def approvals(
    tools: Mapping[str, Tool], calls: Sequence[ToolCall], steps: Steps
) -> list[waits.Request]:
    """An approval for each of ``calls`` whose tool needs one (each its own), recorded as
    ``wait`` steps."""
    port = steps.ports.waits
    assert port is not None
    requests = [
        waits.Request("approval", c.id, c.name, dict(c.arguments), port.approval_timeout_s)
        for c in calls
        if (tool := tools.get(c.name)) is not None and tool.approval
    ]
    record(requests, steps)
    return requests


def record(requests: Sequence[waits.Request], steps: Steps) -> None:
    """A ``wait`` step for each request (the trace and the task's events show what waits)."""
    for r in requests:
        if r.kind == "approval":
            text = f"waiting for a person's approval of {r.tool}"
        elif r.kind == "time":
            until = waits.deadline(datetime.now(UTC), r.timeout_s)
            text = f"paused for {r.timeout_s:g}s, until {until.isoformat(timespec='seconds')}"
        elif r.kind == "event":
            until = waits.deadline(datetime.now(UTC), r.timeout_s)
            text = event_waits.waiting_text(r.event or "", r.key or "", until)
        else:
            text = f"waiting for task {r.target_task_id}"
        steps.record(
            "wait",
            r.kind,
            datetime.now(UTC),
            time.perf_counter(),
            input={"tool": r.tool, "call_id": r.call_id},
            output={"text": text},
        )
