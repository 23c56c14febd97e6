"""``fleet run``'s text as the model writes it: deltas to stdout, the live view's lines on lines
of their own, a reset or a new model step on a new line, the reply not printed twice."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from fleet.cli.live import TextPrinter


def delta(text: str, step: int = 1, *, reset: bool = False, attempt: int = 1) -> dict[str, Any]:
    return {"text": text, "step": step, "attempt": attempt, "reset": reset}


def test_text_is_written_as_it_comes_and_the_reply_is_not_repeated() -> None:
    out, err = io.StringIO(), io.StringIO()
    p = TextPrinter(out, Console(file=err), None)
    p("delta", delta("echo: "))
    assert out.getvalue() == "echo: ", "written at once"
    p("delta", delta("hi"))
    p("status", {"status": "succeeded"})  # no live view: nothing shown
    assert p.finish("echo: hi") is True
    assert out.getvalue() == "echo: hi\n"


def test_live_lines_start_on_a_line_of_their_own() -> None:
    out = io.StringIO()
    shown: list[str] = []
    p = TextPrinter(out, Console(file=io.StringIO()), lambda k, d: shown.append(out.getvalue()))
    p("delta", delta("Let me look"))
    p("step", {"step": 1, "kind": "model", "name": "m", "durationMs": 1.0})
    assert shown == ["Let me look\n"], "the text's line ended before the step's line"


def test_a_new_step_or_a_reset_starts_a_new_line_and_a_differing_reply_is_printed() -> None:
    out, err = io.StringIO(), io.StringIO()
    p = TextPrinter(out, Console(file=err), None)
    p("delta", delta("Let me look"))
    p("delta", delta("It is ", step=3))
    p("delta", delta("wrong", step=3))
    p("delta", delta("It is 4", step=3, reset=True))
    assert out.getvalue() == "Let me look\nIt is wrong\nIt is 4"
    assert "starts its text again" in err.getvalue()
    assert p.finish("It is 4") is True
    assert p.finish("something else") is False
