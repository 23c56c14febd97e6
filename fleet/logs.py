"""Log output: readable text, or one JSON object per line that carries the run it came from.

``FLEET_LOG_FORMAT=json`` makes every fleet process (``fleet worker`` with Celery's own loggers,
``fleet beat``, ``fleet serve``, the CLI) write one JSON object per line: ``time``, ``level``,
``logger``, ``message``, ``pid``, and inside a run ``task_id``, ``conversation_id``,
``run_id``, ``deployment`` and ``labels`` (a context the dispatcher sets around each run). A
traceback is one field (``exception``); messages pass the store's redaction first.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO

from fleet.domain.redaction import Redactor

if TYPE_CHECKING:
    import uuid

    from fleet.domain.values import Task

Format = Literal["text", "json"]
#: The text format of fleet's own processes (Celery's worker logs keep Celery's).
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

_context: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "fleet_log_context", default=None
)
#: Attributes every LogRecord has; anything else on a record came in through ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName", "color_message"}  # uvicorn's message with colours
)
_PATTERNS_ONLY = Redactor(())
_redactor: list[Redactor] = [_PATTERNS_ONLY]


@contextlib.contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged inside (this thread, or tasks and threads it starts
    with a copied context: asyncio tasks, ``asyncio.to_thread``)."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def run_fields(task: Task, run_id: uuid.UUID) -> dict[str, Any]:
    """What a run's records carry (labels as stored: already redacted)."""
    return {
        "task_id": str(task.id),
        "conversation_id": str(task.conversation_id),
        "run_id": str(run_id),
        "deployment": task.deployment,
        "labels": dict(task.labels),
    }


def task_ended(
    logger: logging.Logger, task: Task, status: str, error_class: str | None, now: datetime
) -> None:
    """One line for a task that reached its end: status, attempts, how long since it was
    submitted, its error class; with task, tenant and deployment fields (no message text)."""
    took = max(0.0, (now - task.created_at).total_seconds())
    logger.info(
        "task %s %s after %d attempt(s) in %.1fs%s",
        task.id,
        status,
        task.attempts,
        took,
        f" ({error_class})" if error_class else "",
        extra={
            "event": "task.finished",
            "task_id": str(task.id),
            "tenant": task.tenant,
            "deployment": task.deployment,
            "status": status,
            "attempts": task.attempts,
            "duration_s": round(took, 3),
            "error_class": error_class,
        },
    )


def current() -> Mapping[str, Any]:
    """The fields records logged here would get."""
    return _context.get() or {}


def redact_with(redactor: Redactor) -> None:
    """Use the store's redactor (patterns plus the configured secrets) on every JSON record."""
    _redactor[0] = redactor


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line; never raises on odd values (``str`` of them)."""

    def format(self, record: logging.LogRecord) -> str:
        redactor = _redactor[0]
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redactor.text(record.getMessage()),
            "pid": record.process,
        }
        entry.update(_context.get() or {})
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in entry and not key.startswith("_"):
                entry[key] = redactor.json(_plain(value))
        if record.exc_info:
            entry["exception"] = redactor.text(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = redactor.text(self.formatStack(record.stack_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def _plain(value: Any) -> Any:
    """JSON-like values as they are, anything else as its text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def log_format() -> Format:
    """``FLEET_LOG_FORMAT`` read leniently (a bad value is reported by the settings check)."""
    return "json" if os.environ.get("FLEET_LOG_FORMAT", "").strip().lower() == "json" else "text"


def formatter(fmt: Format) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: int | str, fmt: Format, stream: TextIO | None = None) -> None:
    """Send every logger's records to one handler on the root logger, in ``fmt``.

    Idempotent: a handler this function installed before is replaced, others are kept (a test
    runner's capture, say).
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_fleet", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler._fleet = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    if _redactor[0] is _PATTERNS_ONLY:  # until the store's redactor takes over: the settings'
        with contextlib.suppress(Exception):  # a bad setting is reported by the command
            from fleet.config import load_settings

            redact_with(Redactor(load_settings().secrets()))
    logging.captureWarnings(True)  # warnings.warn (Celery's running-as-root one) as records


def dict_config(level: str, fmt: Format) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn (also in the processes it spawns)."""
    formatter_spec: dict[str, Any] = (
        {"()": "fleet.logs.JsonFormatter"} if fmt == "json" else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"fleet": formatter_spec},
        "handlers": {
            "fleet": {
                "class": "logging.StreamHandler",
                "formatter": "fleet",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["fleet"], "level": level},
        # uvicorn's loggers propagate to the root handler instead of keeping their own.
        "loggers": {
            name: {"handlers": [], "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


class _RawOutput:
    """Stands in for ``sys.__stdout__`` so Celery's raw prints become records, not text lines.

    Celery prints its start banner and shutdown notices straight to the original stdout,
    bypassing logging. With this in place the banner is one record and the notices (written by
    file descriptor) are dropped; the worker logs its shutdown as a record instead.
    """

    encoding = "utf-8"

    def write(self, text: str) -> int:
        if text.strip():
            logging.getLogger("celery.worker").info(text.strip())
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def fileno(self) -> None:
        return None


def take_over_celery() -> None:
    """Make a Celery worker in this process log JSON: its loggers, its raw prints, stdout."""
    from celery import signals

    @signals.setup_logging.connect(weak=False)  # type: ignore[untyped-decorator]
    def _setup(loglevel: int | None = None, logfile: str | None = None, **_: Any) -> None:
        stream = open(logfile, "a", encoding="utf-8") if logfile else None  # noqa: SIM115
        configure(loglevel or logging.WARNING, "json", stream)

    @signals.celeryd_after_setup.connect(weak=False)  # type: ignore[untyped-decorator]
    def _after_setup(instance: Any, conf: Any, **_: Any) -> None:
        setattr(sys, "__stdout__", _RawOutput())  # noqa: B010
        if conf.worker_redirect_stdouts:  # what Celery does itself when it sets logging up
            instance.app.log.redirect_stdouts(conf.worker_redirect_stdouts_level)

    @signals.worker_shutting_down.connect(weak=False)  # type: ignore[untyped-decorator]
    def _shutting_down(sig: str = "", how: str = "", **_: Any) -> None:
        logging.getLogger("celery.worker").warning("worker: %s shutdown (%s)", how, sig)
