"""How ``fleet tasks show`` reads and prints a task's runs: outcome, context provenance, steps.

Runs come in the API's JSON shape (:func:`fleet.views.run_json`) from the store or from
``fleet serve``. Every cell that holds user, model or tool text is a Rich ``Text``, so markup in
it (``[bold]x[/bold]``, an echo reply's ``[history: 2]``) prints literally.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.cli.backends import LocalTasks, Tasks
from fleet.cli.tables import Col, Fitted, print_table

View = dict[str, Any]

#: Short identifying cells of the context tables: kept whole, on one line.
_IDS = ("seq", "id", "role", "bytes", "tokens", "score")
#: Characters of a tool's arguments or result, a model's reply or an error in the trace table
#: (``--json`` has them whole).
TRACE_CELL_CHARS = 60


def fetch_runs(tasks: Tasks, task_id: str, *, steps: bool, messages: bool) -> list[View]:
    """The task's runs, first attempt first; with their steps and the prompt's messages if asked."""
    if isinstance(tasks, LocalTasks):
        from fleet.views import run_json

        store = tasks.rt.store
        out = []
        for run in store.list_runs(uuid.UUID(task_id)):
            found = store.get_run(run.id).steps if steps else None
            out.append(run_json(run, found, messages=messages))
        return out
    from fleet.cli.remote import RemoteTasks

    if isinstance(tasks, RemoteTasks):
        runs: list[View] = tasks.list_runs(task_id)
        if steps or messages:
            runs = [tasks.get_run(r["id"], messages=messages) for r in runs]
            if not steps:
                for view in runs:
                    view.pop("steps", None)
        return runs
    raise TypeError(f"cannot read runs through {type(tasks).__name__}")


# -- printing ----------------------------------------------------------------------------------


def _when(value: str | None) -> str:
    """``2024-05-01T10:00:00.123456Z`` → ``2024-05-01 10:00:00``."""
    return value[:19].replace("T", " ") if value else "-"


def _cut(value: Any, limit: int | None = TRACE_CELL_CHARS) -> str:
    """One line (JSON for anything but text), of at most ``limit`` characters when given."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


class _Rows:
    """A table's rows, printed to fit the width (``fleet.cli.tables``): no header is split, and
    the ``whole`` columns keep each cell on one line."""

    def __init__(self, *columns: str | Col, whole: tuple[str, ...] = ()) -> None:
        self.cols = [
            c if isinstance(c, Col) else Col(c, "whole" if c in whole else "fold") for c in columns
        ]
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: Any) -> None:
        self.rows.append(tuple(str(c) for c in cells))  # printed as Text: never Rich markup

    def print(self, out: Console) -> Fitted:
        return print_table(out, self.cols, self.rows)


def _heading(out: Console, run: View, what: str) -> None:
    out.print()
    out.print(Text(f"run {run['id']} · attempt {run['attempt']} · {what}", style="bold"))


def show_runs(out: Console, runs: list[View]) -> None:
    """The runs table under a task: who ran each attempt, when, how it ended, what it cost.

    ``replayed`` and ``error`` columns appear when a run has one, ``release`` when runs of
    several releases ran it (else the heading names the one). Narrow, an error too long for
    its column goes under the table, whole (a column would wrap it into a sliver), then the
    start loses its year and ``replayed`` goes.
    """
    if not runs:
        return
    replays = any(r["replayedSteps"] for r in runs)
    errors = any(r["error"] for r in runs)
    priced = any(r["usage"].get("cost") is not None for r in runs)
    answered = any(m["fallback"] for r in runs for m in r.get("models") or ())
    named = {r.get("release") or "-" for r in runs}
    releases = len(named) > 1  # a rolling upgrade: a column; one release: the heading says it
    table = _Rows(
        Col("attempt", "whole"),
        Col("worker"),
        *([Col("release", "whole")] if releases else []),
        Col("started", "whole", short=lambda when: when[5:], shorten=1),  # without its year
        *(Col(name, "whole") for name in ("finished", "status", "tokens", "steps")),
        *([Col("cost", "whole")] if priced else []),
        *([Col("answered by")] if answered else []),
        *([Col("replayed", "whole", drop=2)] if replays else []),  # (--trace marks them too)
        *([Col("error", "whole", drop=0)] if errors else []),
    )
    for r in runs:
        usage = r["usage"]
        started, finished = _when(r["startedAt"]), _when(r["finishedAt"])
        if finished[:10] == started[:10]:
            finished = finished[11:]  # the same day: the time says it
        cells = [
            r["attempt"],
            r["worker"] or "-",
            *([r.get("release") or "-"] if releases else []),
            started,
            finished,
            r["status"],
            f"{usage['promptTokens']}/{usage['completionTokens']}",
            usage["steps"],
        ]
        if priced:
            cost = usage.get("cost")
            cells.append("-" if cost is None else f"{cost:.6f}".rstrip("0").rstrip("."))
        if answered:
            cells.append(", ".join(m["model"] for m in r.get("models") or ()) or "-")
        if replays:
            cells.append(", ".join(str(n) for n in r["replayedSteps"]) or "-")
        if errors:
            cells.append(_cut(r["error"], None))
        table.add(*cells)
    out.print()
    one = "" if releases or named == {"-"} else f" · release {named.pop()}"
    out.print(Text(f"runs (tokens: prompt/completion){one}", style="bold"))
    if "error" in table.print(out).left_out:  # each whole, folded at its spaces
        below = Table(show_header=False, box=None, pad_edge=False)
        below.add_column(no_wrap=True)
        below.add_column(overflow="fold")
        for r in runs:
            if r["error"]:
                below.add_row(Text(f"attempt {r['attempt']} error"), Text(r["error"]))
        out.print(below)


def _count(found: list[Any]) -> str:
    return f"{len(found)} message" + ("" if len(found) == 1 else "s")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _seq(m: View) -> str:
    """A message's turn (task seq), ``-`` when unknown (its task gone, or an older record)."""
    return "-" if m.get("seq") is None else str(m["seq"])


def show_context(out: Console, runs: list[View]) -> None:
    """Each run's frozen context: every message injected, every one dropped and why."""
    if not runs:
        out.print(Text("no runs yet: the context is built when the task starts"))
    for run in runs:
        ctx = run["context"]
        _heading(out, run, "context")
        limits = ", ".join(f"{_snake(k)} {v}" for k, v in ctx["limits"].items())
        out.print(Text(f"limits: {limits or '-'}"))
        injected, dropped = ctx["injected"], ctx["dropped"]
        recent = ctx.get("recent") or {"count": len(injected), "items": injected}
        size = f"injected: {_count(injected)}, {ctx['injectedBytes']} bytes"
        if ctx.get("injectedTokens") is not None:
            size += f", {ctx['injectedTokens']} tokens ({ctx.get('tokenizer') or 'counted'})"
        out.print(Text(size))
        priced = any("tokens" in m for m in (*injected, *dropped))
        tokens = ["tokens"] if priced else []
        shown = recent["items"]
        listed = "" if len(shown) == recent["count"] else f", the newest {len(shown)} listed"
        out.print(Text(f"recent: {_count([None] * recent['count'])}{listed}"))
        if shown:
            table = _Rows("seq", "id", "role", "bytes", *tokens, "preview", whole=_IDS)
            for m in shown:
                cost = [m.get("tokens", "-")] if priced else []
                cells = [_seq(m), m["id"], m["role"], m["bytes"], *cost]
                table.add(*cells, _cut(m["preview"], None))
            table.print(out)
        out.print(Text(f"dropped: {_count(dropped)}"))
        if dropped:
            table = _Rows(
                "seq", "id", "role", "bytes", *tokens, "reason", "preview", whole=(*_IDS, "reason")
            )
            for m in dropped:
                cost = [m.get("tokens", "-")] if priced else []
                cells = [_seq(m), m["id"], m["role"], m["bytes"], *cost, m["reason"]]
                table.add(*cells, _cut(m["preview"], None))
            table.print(out)
        if ctx["olderUnseen"]:
            out.print(Text("older messages not examined: the history read stops at the item limit"))
        _show_memory(out, ctx.get("memory") or {}, ctx.get("recall"))


def _show_memory(out: Console, memory: View, recall: View | None) -> None:
    """What the context held besides the history: blocks, notes, working memory,
    observations and recalled messages."""
    for block in memory.get("blocks") or ():
        out.print(
            Text(
                f"memory block {block['block']}: version {block['version']}, "
                f"{block['bytes']} bytes ({block['mode']})"
            )
        )
    notes = memory.get("notes")
    if notes:
        out.print(
            Text(
                f"notes: {len(notes['injected'])} shown ({notes['bytes']} bytes), "
                f"{len(notes['dropped'])} left out (notes_bytes {notes['limitBytes']})"
            )
        )
    wm = memory.get("workingMemory")
    if wm:
        out.print(
            Text(
                f"working memory ({wm['scope']}): version {wm['version']}, "
                f"{wm['chars']} characters" + (" (cut)" if wm["cut"] else "")
            )
        )
    observed = memory.get("observations")
    if observed is not None:
        out.print(Text(f"observations: {len(observed)}"))
        if observed:
            table = _Rows("level", "seqs", "messages", "tokens", "model", whole=("level", "tokens"))
            for o in observed:
                seqs = f"{_seq({'seq': o.get('fromSeq')})} to {_seq({'seq': o.get('toSeq')})}"
                span = f"#{o['fromMessageId']} to #{o['toMessageId']}"
                table.add(
                    "reflection" if o["level"] else "observation",
                    seqs,
                    span,
                    o["tokens"],
                    o["model"],
                )
            table.print(out)
    if recall is not None:
        head = (
            f"recall ({recall['scope']}, {recall['method']}, {recall['embedder']}): "
            f"searched {recall.get('searched', 0)}, "
            f"{recall.get('notEmbeddedYet', 0)} not embedded yet"
        )
        out.print(Text(head))
        shown = recall.get("recalled") or []
        if not all("preview" in h for h in shown):  # recorded before previews were
            shown = recall.get("hits") or []
        out.print(Text(f"recalled: {_count(shown)}"))
        if shown:
            table = _Rows("conversation", "seq", "id", "role", "score", "preview", whole=_IDS)
            for h in shown:
                score = h.get("score")
                table.add(
                    h["conversation"],
                    _seq(h),
                    h["id"],
                    h["role"],
                    "neighbour" if score is None else score,
                    _cut(h["preview"], None),
                )
            table.print(out)


def _marks(step: View, shortened: dict[Any, Any]) -> str:
    marks = ["replayed"] if step["replayed"] else []
    if step["status"] == "started":
        marks.append("in flight")
    call = (step.get("tool") or {}).get("callId")
    if call is not None and call in shortened:
        marks.append(f"sent shortened from step {shortened[call]}")
    return ", ".join(marks)


def _call(step: View) -> tuple[str, str, str]:
    """What went in and came out of a step, as table cells (call, in, out). Arguments, results
    and replies are cut to ``TRACE_CELL_CHARS``; an error is shown whole."""
    error = _cut(step["error"], None)
    model, tool, wait = step.get("model"), step.get("tool"), step.get("wait")
    if wait is not None:
        from fleet.domain.model_limits import wait_line

        return f"wait {step['name']}", f"{wait['model']}", wait_line(wait["text"], wait["reason"])
    if model is not None:
        tokens = model["tokens"]
        calls = ", ".join(str(c["name"]) for c in model["toolCalls"])
        said = f"→ {calls}" if calls else _cut(model["content"])
        finish = model["finishReason"] or "no finish reason"
        out = f"error: {error}" if error else f"{tokens['completion']} tokens, {finish}: {said}"
        return f"model {step['name']}", f"{tokens['prompt']} tokens", out
    tool = tool or {}
    arguments, result = tool.get("arguments"), tool.get("result")
    out = _cut(result)
    if error:  # the result usually restates it ("error: …"); if not, both are shown
        restated = isinstance(result, str) and error in _cut(result, None)
        out = f"error: {error}" + ("" if restated or result is None else f"; {out}")
    return f"tool {step['name']}", _cut(arguments), out


def show_trace(out: Console, runs: list[View]) -> None:
    """Each run's steps: model calls (tokens, latency, finish reason) and tool calls
    (arguments, result or error, duration), marked when replayed from the journal, left in
    flight, or sent shortened to fit the token budget."""
    if not runs:
        out.print(Text("no runs yet"))
    for run in runs:
        _heading(out, run, "steps")
        steps = run.get("steps") or []
        if not steps:
            out.print(Text("no steps recorded"))
            continue
        shortened = {r["callId"]: r["step"] for r in run.get("shortened") or ()}
        marks = [_marks(st, shortened) for st in steps]
        columns = ["step", "call", "in", "out", "ms", *(["mark"] if any(marks) else [])]
        table = _Rows(*columns, whole=("step", "ms"))
        for st, mark in zip(steps, marks, strict=True):
            cells = [st["step"], *_call(st), f"{st['durationMs']:.1f}"]
            table.add(*cells, *([mark] if any(marks) else []))
        table.print(out)
