"""How `fleet tasks show` prints runs: every text literally, marks for replayed and in-flight
steps, long tool results cut in the table."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from fleet.cli.runs import TRACE_CELL_CHARS, show_context, show_runs, show_trace

MARKUP = "[bold]x[/bold]"


def printed(show: Any, runs: list[dict[str, Any]]) -> str:
    out = Console(record=True, width=250, highlight=False, soft_wrap=True)
    show(out, runs)
    return out.export_text()


def run(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "11111111-2222-3333-4444-555555555555",
        "taskId": "99999999-2222-3333-4444-555555555555",
        "attempt": 2,
        "worker": "host-a:4242",
        "status": "succeeded",
        "model": "echo",
        "startedAt": "2026-01-01T12:00:00.123456Z",
        "finishedAt": "2026-01-01T12:00:01.5Z",
        "error": None,
        "usage": {"promptTokens": 30, "completionTokens": 7, "totalTokens": 37, "steps": 3},
        "replayedSteps": [1, 2],
        "shortened": [],
        "context": {
            "limits": {"maxItems": 5, "maxBytes": 200},
            "injected": [{"id": 7, "role": "user", "bytes": 14, "preview": MARKUP}],
            "injectedBytes": 14,
            "injectedTokens": None,
            "tokenizer": None,
            "dropped": [
                {
                    "id": 6,
                    "role": "assistant",
                    "bytes": 320,
                    "preview": "y…",
                    "reason": "oversized",
                },
                {"id": 5, "role": "user", "bytes": 190, "preview": "z…", "reason": "byte_limit"},
            ],
            "olderUnseen": True,
        },
        "steps": [
            step(1, "model", replayed=True, model=model_call(calls=("wait",))),
            step(
                2,
                "tool",
                name="wait",
                replayed=True,
                tool={"callId": "c1", "arguments": {"seconds": MARKUP}, "result": "r" * 500},
                error=f"seconds must be a number, got {MARKUP!r}",
            ),
            step(
                3,
                "tool",
                name="wait",
                status="started",
                tool={"callId": "c2", "arguments": {}, "result": None},
            ),
            step(4, "model", model=model_call(content="echo: hi [history: 2]")),
        ],
    }
    return base | changes


def step(n: int, kind: str, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "step": n,
        "kind": kind,
        "name": "echo",
        "status": "finished",
        "replayed": False,
        "startedAt": "2026-01-01T12:00:00Z",
        "durationMs": 12.345,
        "error": None,
        "model": None,
        "tool": None,
    }
    return base | changes


def model_call(*, content: str = "", calls: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "tokens": {"prompt": 30, "completion": 7},
        "finishReason": "tool_calls" if calls else "stop",
        "messages": 3,
        "content": content,
        "toolCalls": [{"id": f"c{i}", "name": c, "arguments": {}} for i, c in enumerate(calls)],
    }


def line_with(text: str, needle: str) -> str:
    return next(line for line in text.splitlines() if needle in line)


def test_the_runs_table_shows_each_attempt() -> None:
    text = printed(show_runs, [run(attempt=1, status="interrupted", error="worker lost"), run()])
    first, second = line_with(text, "interrupted"), line_with(text, "succeeded")
    assert second.split()[:8] == [
        "2",
        "host-a:4242",
        "2026-01-01",
        "12:00:00",
        "12:00:01",  # finished the same day: the time only
        "succeeded",
        "30/7",
        "3",
    ]
    assert "1, 2" in second and "worker lost" in first
    assert printed(show_runs, []) == ""
    # no replayed or error column when no run has one
    plain = printed(show_runs, [run(replayedSteps=[])]).splitlines()[2].split()
    assert plain == ["attempt", "worker", "started", "finished", "status", "tokens", "steps"]


LONG_ERROR = (
    "step limit reached: 8 model steps without a final reply (raise max_steps in the agent's "
    "config if the task needs more)"
)


@pytest.mark.parametrize(
    ("width", "started", "replayed"),
    [(100, "2026-01-01", ["replayed"]), (80, "01-01", ["replayed"]), (70, "01-01", [])],
)
def test_no_header_splits_and_a_long_error_goes_under_the_table(width, started, replayed) -> None:
    """Issue 33: at 80 columns "wor/ker" and "erro/r" split, the error a sliver of a column."""
    runs = [
        run(attempt=1, status="interrupted", error="worker lost", worker="w" * 30 + ":4242"),
        run(attempt=2, status="failed", error=LONG_ERROR, replayedSteps=[1]),
    ]
    out = Console(
        record=True,
        width=width,
        highlight=False,
        soft_wrap=True,
        force_terminal=True,
        color_system=None,
    )
    show_runs(out, runs)
    lines = out.export_text().splitlines()
    assert max(len(line) for line in lines) <= width
    columns = ["attempt", "worker", "started", "finished", "status", "tokens", "steps"]
    assert lines[2].split() == columns + replayed
    second = line_with("\n".join(lines), "failed").split()
    assert second[0] == "2" and second[2:8] == [
        started,
        "12:00:00",
        "12:00:01",
        "failed",
        "30/7",
        "3",
    ]
    # each error whole under the table, folded at its spaces
    below = lines[next(i for i, x in enumerate(lines) if x.startswith("attempt 1 error")) :]
    assert " ".join(" ".join(below).split()) == (
        f"attempt 1 error worker lost attempt 2 error {LONG_ERROR}"
    )


def test_an_error_that_fits_stays_in_its_column() -> None:
    out = Console(record=True, width=120, highlight=False, soft_wrap=True)
    show_runs(out, [run(status="interrupted", error="worker lost")])
    lines = out.export_text().splitlines()
    assert lines[2].split()[-2:] == ["replayed", "error"]
    assert lines[3].rstrip().endswith("1, 2      worker lost")
    assert len(lines) == 4


def test_context_lists_injected_and_dropped_messages_with_reasons() -> None:
    text = printed(show_context, [run()])
    assert "limits: max_items 5, max_bytes 200" in text
    assert "injected: 1 message, 14 bytes" in text
    assert "recent: 1 message\n" in text  # a record without `recent` (older): from `injected`
    assert line_with(text, MARKUP).split() == [
        "-",  # no seq recorded
        "7",
        "user",
        "14",
        MARKUP,
    ]  # markup in a preview prints as typed
    assert "oversized" in line_with(text, "320") and "byte_limit" in line_with(text, "190")
    assert "older messages not examined" in text
    quiet = run(context={**run()["context"], "olderUnseen": False, "dropped": []})
    assert "dropped: 0 messages" in printed(show_context, [quiet])
    assert "older messages" not in printed(show_context, [quiet])


def test_trace_shows_calls_marks_and_literal_text() -> None:
    text = printed(show_trace, [run()])
    asked = line_with(text, "→ wait")
    assert asked.split()[:5] == ["1", "model", "echo", "30", "tokens"]
    assert "7 tokens, tool_calls: → wait" in asked and "12.3" in asked and "replayed" in asked
    called = line_with(text, "seconds")
    assert called.split()[:3] == ["2", "tool", "wait"]
    assert '{"seconds": "[bold]x[/bold]"}' in called  # arguments, as typed
    assert f"error: seconds must be a number, got '{MARKUP}'; " in called  # literally, whole
    assert "r" * (TRACE_CELL_CHARS - 1) + "…" in called and "r" * TRACE_CELL_CHARS not in called
    flight = line_with(text, "in flight")
    assert flight.split()[:4] == ["3", "tool", "wait", "{}"] and "replayed" not in flight
    answered = line_with(text, "stop")
    assert "7 tokens, stop: echo: hi [history: 2]" in answered  # the reply keeps its brackets
    assert "no steps recorded" in printed(show_trace, [run(steps=[])])
    # a result that restates its error is shown once
    restated = step(
        1,
        "tool",
        name="wait",
        tool={"callId": "c", "arguments": {}, "result": "error: too slow"},
        error="too slow",
    )
    cells = line_with(printed(show_trace, [run(steps=[restated])]), "slow").split()
    assert cells[3:] == ["{}", "error:", "too", "slow", "12.3"]  # no mark column either


def test_a_token_budget_adds_tokens_and_marks_shortened_results() -> None:
    priced = {
        "limits": {"maxItems": 5, "maxBytes": 200, "contextTokens": 256, "historyTokens": 200},
        "injected": [{"id": 7, "role": "user", "bytes": 14, "preview": "greeting", "tokens": 5}],
        "injectedBytes": 14,
        "injectedTokens": 5,
        "tokenizer": "cl100k_base",
        "dropped": [
            {
                "id": 6,
                "role": "user",
                "bytes": 99,
                "preview": "z",
                "tokens": 300,
                "reason": "oversized",
            }
        ],
        "olderUnseen": False,
    }
    text = printed(show_context, [run(context=priced)])
    assert "limits: max_items 5, max_bytes 200, context_tokens 256, history_tokens 200" in text
    assert "injected: 1 message, 14 bytes, 5 tokens (cl100k_base)" in text
    assert line_with(text, "greeting").split() == ["-", "7", "user", "14", "5", "greeting"]
    assert line_with(text, "oversized").split() == ["-", "6", "user", "99", "300", "oversized", "z"]
    cut = {"callId": "c1", "tool": "wait", "step": 4, "tokens": 900, "kept": 64}
    trace = printed(show_trace, [run(shortened=[cut])])
    assert "sent shortened from step 4" in line_with(trace, "seconds")
    assert "shortened" not in line_with(trace, "in flight")  # another call


def test_context_lists_the_recent_window_recall_observations_and_working_memory() -> None:
    items = [{"id": 9, "seq": 4, "role": "user", "bytes": 3, "preview": "newest turn"}]
    context = {
        **run()["context"],
        "recent": {"count": 60, "items": items},
        "memory": {
            "workingMemory": {"scope": "conversation", "version": 2, "chars": 41, "cut": False},
            "observations": [
                {
                    "level": 0,
                    "fromSeq": 1,
                    "toSeq": 3,
                    "fromMessageId": 1,
                    "toMessageId": 6,
                    "tokens": 50,
                    "model": "echo",
                }
            ],
        },
        "recall": {
            "scope": "conversation",
            "method": "exact",
            "embedder": "local:wordllama",
            "searched": 12,
            "notEmbeddedYet": 0,
            "hits": [],
            "recalled": [
                {
                    "id": 2,
                    "conversation": "api:k",
                    "seq": 1,
                    "role": "user",
                    "preview": "fact",
                    "score": 0.71,
                    "hit": True,
                },
                {
                    "id": 3,
                    "conversation": "api:k",
                    "seq": 1,
                    "role": "assistant",
                    "preview": "echo: fact",
                    "hit": False,
                },
            ],
        },
    }
    text = printed(show_context, [run(context=context)])
    assert "recent: 60 messages, the newest 1 listed" in text
    assert line_with(text, "newest turn").split() == ["4", "9", "user", "3", "newest", "turn"]
    assert "working memory (conversation): version 2, 41 characters" in text
    assert line_with(text, "#1 to #6").split()[:6] == ["observation", "1", "to", "3", "#1", "to"]
    assert "recalled: 2 messages" in text
    assert line_with(text, "fact").split() == ["api:k", "1", "2", "user", "0.71", "fact"]
    assert line_with(text, "echo: fact").split()[:5] == [
        "api:k",
        "1",
        "3",
        "assistant",
        "neighbour",
    ]
