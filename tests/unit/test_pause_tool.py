"""``pause``: a run stops for a while holding nothing (a ``time`` wait whose deadline is the
pause's end) and, resumed from its journal, finds the pause over and goes on; an interrupt or a
cancel ends it early; a bad duration is the model's error and pauses nothing."""

from __future__ import annotations

import pytest

from fleet.agents.ports import MemoryJournal, MemoryWaits
from fleet.agents.tools import ToolContext
from fleet.agents.tools import pause as pause_tool
from fleet.agents.tools.base import Park, ToolError
from fleet.domain import waits
from fleet.domain.values import TaskStatus
from fleet.domain.waits import Decision
from fleet.errors import InputError
from tests.unit.test_approval_runner import Script, calls, journaled, reply, resumed, run

CTX = ToolContext(task_id="task-1", run_id="run-1", call_id="c1")


@pytest.mark.parametrize(
    ("seconds", "ok"),
    [(0.5, False), (1.0, True), (900.0, True), (86400.0, True), (86401.0, False)],
)
def test_a_pause_is_one_second_to_a_day(seconds: float, ok: bool) -> None:
    if ok:
        assert waits.check_pause(seconds) == seconds
    else:
        with pytest.raises(InputError, match="schedule_followup"):
            waits.check_pause(seconds)


@pytest.mark.parametrize(
    ("status", "text"),
    [
        ("expired", "paused 90s; the run goes on"),
        ("done", "paused 90s; the run goes on"),
        ("interrupted", "stopped early: a newer message interrupted the task (asked to pause 90s)"),
        ("cancelled", "stopped early: the pause was cancelled (asked to pause 90s)"),
    ],
)
def test_the_result_of_a_pause_names_how_it_ended(status: str, text: str) -> None:
    assert waits.pause_result(90.0, Decision(status)) == text  # type: ignore[arg-type]


def test_the_first_call_parks_a_time_wait_and_a_resumed_one_finds_it_over() -> None:
    port = MemoryWaits()
    tool = pause_tool.tool(port)
    with pytest.raises(Park) as parked:
        tool.fn({"duration": "15m"}, CTX)  # type: ignore[misc]
    req = parked.value.request
    assert (req.kind, req.call_id, req.tool, req.timeout_s) == ("time", "c1", "pause", 900.0)
    port.decided["c1"] = Decision("expired")
    assert tool.fn({"duration": "15m"}, CTX) == "paused 900s; the run goes on"  # type: ignore[misc]
    assert port.asked == ["c1", "c1"]


@pytest.mark.parametrize("duration", ["0s", "2d", "soon", 0.5, -1, None])
def test_a_bad_duration_is_the_models_error_and_asks_for_no_wait(duration: object) -> None:
    port = MemoryWaits()
    with pytest.raises(ToolError, match="duration"):
        pause_tool.tool(port).fn({"duration": duration}, CTX)  # type: ignore[misc]
    assert port.asked == []


def test_a_run_that_pauses_waits_then_goes_on_from_its_journal() -> None:
    tool = pause_tool.tool(MemoryWaits())
    first = MemoryJournal()
    out = run(Script(calls(("c1", "pause", {"duration": "2h"}))), {"pause": tool}, first, None)

    assert out.status == TaskStatus.WAITING
    [req] = out.waits
    assert (req.kind, req.timeout_s) == ("time", 7200.0)
    [wait_step] = [r for r in journaled(first) if r.kind == "wait"]
    assert wait_step.name == "time"
    assert wait_step.output["text"].startswith("paused for 7200s, until ")

    port = MemoryWaits({"c1": Decision("expired")})
    model = Script(reply("back"))
    out, _ = resumed(first, model, {"pause": pause_tool.tool(port)}, port)
    assert out.status == TaskStatus.SUCCEEDED
    assert out.reply == "back"
    [msg] = [m for m in model.seen[0] if m.role == "tool"]
    assert (msg.tool_call_id, msg.content) == ("c1", "paused 7200s; the run goes on")


def test_resumed_before_its_end_the_run_waits_again_for_the_same_call() -> None:
    first = MemoryJournal()
    run(
        Script(calls(("c1", "pause", {"duration": "1m"}))),
        {"pause": pause_tool.tool(MemoryWaits())},
        first,
        None,
    )
    port = MemoryWaits()  # still pending: the port has no decision yet
    out, _ = resumed(first, Script(), {"pause": pause_tool.tool(port)}, port)
    assert out.status == TaskStatus.WAITING
    assert [(r.kind, r.call_id) for r in out.waits] == [("time", "c1")]
