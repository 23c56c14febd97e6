"""`fleet tasks show ID --context --trace` with the real console script, embedded (SQLite).

The conversation is long enough for the context to drop whole turns (an oversized one, then the
byte budget), and the last task makes the echo model call a tool with markup in its arguments.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fleet import release
from tests.conftest import write_config
from tests.e2e.test_cli import Cli

MARKUP = "[bold]x[/bold]"
AGENT = """
model = "echo"
tools = ["current_time", "wait"]
[history]
max_items = 5
max_bytes = 200
"""


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    config = write_config(tmp_path / "config", {"inspect": AGENT}, {"inspect": 'agent = "inspect"'})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home)})


def conversation(cli: Cli) -> dict[str, Any]:
    """Four turns; the last one's context injects the second turn (two of the six messages
    before it): the third is larger than max_bytes, and the first no longer fits."""
    for text in (MARKUP, "z" * 70, "y" * 300):
        cli.ok("run", "inspect", text, "-c", "p")
    task: dict[str, Any] = cli.json(
        "run", "inspect", '/tool wait {"seconds": "' + MARKUP + '"}', "-c", "p"
    )
    assert task["status"] == "succeeded", task
    return task


def line_with(text: str, needle: str) -> str:
    found = [line for line in text.splitlines() if needle in line]
    assert found, f"no line with {needle!r} in:\n{text}"
    return found[0]


def test_tasks_show_prints_runs_context_and_trace(cli: Cli) -> None:
    task = conversation(cli)
    # wide enough that no cell of the tables wraps
    shown = cli.ok("tasks", "show", task["id"], "--context", "--trace", COLUMNS="300")

    runs = shown[shown.index("\nruns (tokens: prompt/completion) · release ") :]
    assert line_with(runs, "succeeded").split()[0] == "1"  # attempt 1, no error, none replayed

    context = shown[shown.index("· context") : shown.rindex("\nrun ", 0, shown.index("· steps"))]
    assert "limits: max_items 5, max_bytes 200" in context
    question, answer = [line.split() for line in context.splitlines() if "zzz" in line]
    assert (question[0], question[2:4]) == ("2", ["user", "70"])  # the turn whole, in order
    assert (answer[0], answer[2:4]) == ("2", ["assistant", "89"])  # echo: z…z [history: 2]
    reply_y = line_with(context, "yyy").split()
    assert (reply_y[0], reply_y[2], reply_y[4]) == ("3", "assistant", "oversized")
    assert line_with(context, "300").split()[2:5] == ["user", "300", "oversized"]
    # the first exchange was read too, and dropped whole: the byte budget was full
    assert line_with(context, f"echo: {MARKUP} [history: 0]").split()[4] == "byte_limit"
    first_input = context.rstrip().splitlines()[-1].split()
    assert first_input[0] == "1"  # the seq of its task
    assert first_input[2:] == ["user", str(len(MARKUP)), "byte_limit", MARKUP]  # literally
    assert "older messages not examined" not in context  # all six were read

    steps = shown[shown.index("· steps") :]
    asked = line_with(steps, "→ wait")
    assert asked.split()[:3] == ["1", "model", "echo"] and "tool_calls" in asked
    called = line_with(steps, "seconds")
    assert called.split()[:3] == ["2", "tool", "wait"]
    assert '{"seconds": "[bold]x[/bold]"}' in called  # markup in arguments prints as typed
    assert f"got '{MARKUP}'" in called  # the tool's error, literally
    answered = line_with(steps, "stop")
    assert answered.split()[:3] == ["3", "model", "echo"]
    assert "[history: 2]" in answered  # the reply keeps its brackets


def test_tasks_show_json_adds_the_runs(cli: Cli) -> None:
    task = conversation(cli)
    plain = cli.json("tasks", "show", task["id"])
    assert "runs" not in plain  # --json alone is the task record, as before
    shown = cli.json("tasks", "show", task["id"], "--context", "--trace")
    assert {k: v for k, v in shown.items() if k != "runs"} == plain
    (run,) = shown["runs"]
    assert (run["taskId"], run["attempt"], run["status"]) == (task["id"], 1, "succeeded")
    ctx = run["context"]
    assert [(m["role"], m["reason"]) for m in ctx["dropped"]] == [
        ("assistant", "oversized"),
        ("user", "oversized"),
        ("assistant", "byte_limit"),
        ("user", "byte_limit"),
    ]
    assert ctx["olderUnseen"] is False
    assert ctx["messages"][-1]["content"] == '/tool wait {"seconds": "' + MARKUP + '"}'
    model, tool, reply = run["steps"]
    assert tool["tool"]["arguments"] == {"seconds": MARKUP}
    assert tool["error"] and MARKUP in tool["error"] and tool["tool"]["result"]
    assert model["model"]["toolCalls"][0]["id"] == tool["tool"]["callId"]
    assert reply["model"]["content"] == task["reply"]

    trace_only = cli.json("tasks", "show", task["id"], "--trace")["runs"][0]
    assert "messages" not in trace_only["context"] and trace_only["steps"] == run["steps"]
    context_only = cli.json("tasks", "show", task["id"], "--context")["runs"][0]
    assert "steps" not in context_only and context_only["context"] == ctx


def test_a_queued_task_has_no_runs_yet(cli: Cli) -> None:
    cli.ok("run", "inspect", "first", "-c", "q")
    queued = cli.json("run", "inspect", "later", "-c", "q", "--no-wait")
    shown = cli.ok("tasks", "show", queued["id"], "--context", "--trace")
    assert "no runs yet" in shown and "\nruns (" not in shown
    assert cli.json("tasks", "show", queued["id"], "--trace")["runs"] == []


LATE = re.compile(
    r"fleet: task (?P<id>[0-9a-f-]{36}) is still (running|leased|queued) after 1s; cancelled it "
    r"\(embedded, nothing runs it once this command exits\)"
)


def test_embedded_timeout_holds_while_the_run_executes_and_cancels_it(cli: Cli) -> None:
    """Before, the command waited out the 60 s tool (longer than Cli allows) and exited 0."""
    r = cli("run", "inspect", '/tool wait {"seconds": 60}', "--timeout", "1")
    assert r.code == 1, r
    said = LATE.fullmatch(r.one_error_line())
    assert said, r
    shown = cli.json("tasks", "show", said["id"], "--trace")
    assert (shown["status"], shown["error"]) == ("cancelled", "cancelled by request")
    assert [run["status"] for run in shown["runs"]] == ["cancelled"]

    r = cli("run", "inspect", '/tool wait {"seconds": 60}', "--timeout", "1", "--json")
    assert r.code == 1, r
    task = json.loads(r.out)
    assert (task["status"], task["error"]) == ("cancelled", "cancelled by request")


LIST_HEADERS = ["id", "deployment", "conversation", "seq", "status", "created", "reply/error"]
RUNS_HEADERS = ["attempt", "worker", "started", "finished", "status", "tokens", "steps"]


@pytest.mark.parametrize("columns", ["", "80"], ids=["pipe", "80 columns"])
def test_in_a_pipe_each_row_is_one_line_with_every_value_whole(
    cli: Cli, tmp_path: Path, columns: str
) -> None:
    """Issue 33: headers split mid-word; issue 45: values split mid-word in a pipe (``api:ac``
    / ``me:secret-a``), so ``fleet tasks ls | grep KEY`` found nothing. In a pipe (Cli's
    stdout), whatever COLUMNS says, each row is one line and each value whole."""
    config = write_config(
        tmp_path / "strict",
        {"strict": 'model = "echo"\ntools = ["wait"]\nmax_steps = 1\n'},
        {"strict": 'agent = "strict"\nmax_attempts = 1\n'},
    )
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    key = "a-conversation-key-long-enough-to-fold-0123456789"
    failed = cli("run", "strict", '/tool wait {"seconds": 0}', "-c", key, "--json")
    task = json.loads(failed.out)
    assert task["status"] == "failed" and "step limit" in task["error"], failed
    again = cli.json("run", "strict", "hello", "-c", key)

    listing = cli.ok("tasks", "ls", COLUMNS=columns).splitlines()
    assert listing[0].split() == LIST_HEADERS  # each header whole
    assert [line for line in listing if f"api:{key}" in line] == listing[1:]  # `| grep -c` 2
    assert len(listing) == 3, listing
    row = listing[1].split()
    assert row[:5] == [task["id"][:8], "strict", f"api:{key}", "1", "failed"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", row[5]) and re.fullmatch(r"\d\d:\d\d:\d\d", row[6])
    assert listing[2].split()[0] == again["id"][:8]

    shown = cli.ok("tasks", "show", task["id"], COLUMNS=columns).splitlines()
    (runs,) = [i for i, line in enumerate(shown) if line.startswith("runs (tokens: prompt/")]
    assert shown[runs].endswith(f" · release {release.current()}")  # one release ran it
    assert shown[runs + 1].split()[: len(RUNS_HEADERS)] == RUNS_HEADERS
    assert shown[runs + 2].split()[0] == "1" and shown[runs + 2].endswith(task["error"])
