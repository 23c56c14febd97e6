"""``fleet run``'s live view: the task's events (status changes, each finished step) as lines on
stderr while it waits, read from the store (embedded or fleet) or a server's event stream."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from fleet.domain.events import Position
from fleet.domain.values import Task

#: Called with each event's kind and data (``fleet.views.event_json``).
OnEvent = Callable[[str, dict[str, Any]], None]
#: ``fleet run`` shows this many characters of a tool's arguments or result.
SHOWN_CHARS = 70
#: Store polls while following start this often and back off to the second value (seconds).
POLL_MIN_S, POLL_MAX_S = 0.05, 0.5


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(str(text).split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def describe(kind: str, data: dict[str, Any]) -> str | None:
    """One line for an event (None: nothing to show, the reply is printed on its own)."""
    if kind == "status":
        status = data["status"]
        if status == "running":
            where = f" on {data['worker']}" if data.get("worker") else ""
            return f"running: attempt {data['attempt']}{where} ({data.get('model')})"
        if status == "interrupted":
            return f"interrupted: {data.get('error') or 'its worker was lost'}; it will be retried"
        error = data.get("error")
        return f"{status}: {error}" if error and status != "succeeded" else status
    if kind in ("step", "inbox"):
        ms = data.get("durationMs") or 0.0
        head = f"step {data['step']}  {data['kind']} {data['name']}"
        if data.get("replayed"):
            head += " (replayed)"
        if kind == "inbox":
            delivered = (data.get("tool") or {}).get("result")
            return f"{head}  {_cut(delivered)}"
        if data["kind"] == "wait" and data.get("wait"):
            from fleet.domain.model_limits import wait_line

            return f"{head}  {wait_line(data['wait']['text'], data['wait'].get('reason'))}"
        if data["kind"] not in ("model", "tool"):
            return f"{head}  {ms:.1f} ms"
        if data["kind"] == "model" and data.get("model"):
            m = data["model"]
            calls = ", ".join(str(c["name"]) for c in m.get("toolCalls") or ())
            said = f"→ {calls}" if calls else _cut(m.get("content") or "")
            tokens = f"{m['tokens']['prompt']}→{m['tokens']['completion']} tokens"
            return f"{head}  {tokens}  {ms:.1f} ms  {said}"
        tool = data.get("tool") or {}
        out = f"error: {data['error']}" if data.get("error") else _cut(tool.get("result"))
        return f"{head}  {_cut(tool.get('arguments'))} → {out}  {ms:.1f} ms"
    return None


def printer(console: Console) -> OnEvent:
    """An ``OnEvent`` that prints each event's line (user text is never read as markup)."""

    def show(kind: str, data: dict[str, Any]) -> None:
        line = describe(kind, data)
        if line is not None:
            console.print(Text(f"· {line}"), highlight=False)

    return show


class TextPrinter:
    """``fleet run``'s reply as the model writes it: each ``delta`` event's text to ``out``
    as it comes; the live view's lines (``line``) start on a line of their own. A reset or a
    new model step starts the text on a new line (the text before was a retried call, or a
    step that went on to call tools)."""

    def __init__(self, out: IO[str], console: Console, live: OnEvent | None = None) -> None:
        self.out, self.console, self.live = out, console, live
        self._lock = threading.Lock()
        self._step: tuple[int, int] | None = None
        #: The text of the step shown last, from its last reset.
        self.text = ""
        self._open = False  # the last thing written is text without its line's end

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        with self._lock:
            if kind == "delta":
                self._delta(data)
            elif self.live is not None and describe(kind, data) is not None:
                self._end_line()
                self.live(kind, data)

    def _delta(self, data: dict[str, Any]) -> None:
        step = (data["attempt"], data["step"])
        if data.get("reset") or step != self._step:
            self._end_line()
            if data.get("reset") and self.text:
                self.console.print(Text("· the model starts its text again"), highlight=False)
            self._step, self.text = step, ""
        text: str = data["text"]
        self.text += text
        if text:
            self.out.write(text)
            self.out.flush()
            self._open = not text.endswith("\n")

    def _end_line(self) -> None:
        if self._open:
            self.out.write("\n")
            self.out.flush()
            self._open = False

    def finish(self, reply: str) -> bool:
        """The text shown ends the command's output if it was ``reply`` (True), else the
        line is ended and the reply is printed as usual (False)."""
        with self._lock:
            shown = self._step is not None and self.text == reply
            if (shown and self._open) or not shown:
                self._end_line()
            return shown


class StoreFollower:
    """Reads a task's new events from the store and hands them on."""

    def __init__(self, store: Any, task_id: uuid.UUID, on_event: OnEvent) -> None:
        self.store, self.task_id, self.on_event = store, task_id, on_event
        self.after: Position | None = None

    def poll(self) -> Task:
        from fleet.views import event_json

        task, events = self.store.task_events(self.task_id, self.after)
        for ev in events:
            self.on_event(ev.kind, event_json(ev))
            self.after = ev.position
        return task  # type: ignore[no-any-return]

    def alongside(self, work: Callable[[], Task]) -> Task:
        """Run ``work`` (embedded: this process runs the task) while following in a thread."""
        stop = threading.Event()

        def loop() -> None:
            pause = POLL_MIN_S
            while not stop.wait(pause):
                try:
                    self.poll()
                except Exception:  # the waiting work reports what went wrong
                    return
                pause = min(pause * 2, POLL_MAX_S)

        thread = threading.Thread(target=loop, name="fleet-run-follow", daemon=True)
        thread.start()
        try:
            task = work()
        finally:
            stop.set()
            thread.join()
        self.poll()  # what the last step boundary and the settle stored
        return task
