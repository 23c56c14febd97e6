"""The ``fleet`` command: run agents, inspect tasks, operate the store and the workers.

Bad input exits 2 with one line saying what was wrong; an unreachable service exits 1 with the
reason; ``--json`` prints machine-readable records.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import click
import typer
from rich.console import Console
from rich.table import Table

from fleet import __version__
from fleet.domain.values import Task, TaskStatus
from fleet.errors import FleetError, Unavailable

app = typer.Typer(
    name="fleet",
    help="Run LLM agents as a fleet: conversations run one task at a time, in order.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
tasks_app = typer.Typer(help="Inspect and cancel tasks.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: Exit codes: 0 ok, 1 failure (task failed, service down), 2 bad input.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"fleet: {message}", markup=False)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        out.print(f"fleet {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """fleet: an LLM agent worker fleet."""


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _parse_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"task id {value!r} is not a UUID (see `fleet tasks ls` for ids)")


@contextmanager
def _runtime(*, check_schema: bool = True) -> Iterator[Any]:
    from fleet.runtime import build

    rt = build(check_schema=check_schema)
    try:
        yield rt
    finally:
        rt.close()


def _show_task(task: Task) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    rows: list[tuple[str, Any]] = [
        ("id", task.id),
        ("deployment", task.deployment),
        ("conversation", task.conversation),
        ("seq", task.seq),
        ("status", task.status.value),
        ("attempts", f"{task.attempts}/{task.max_attempts}"),
        ("created", task.created_at.isoformat(timespec="seconds")),
        ("started", task.started_at.isoformat(timespec="seconds") if task.started_at else "-"),
        ("finished", task.finished_at.isoformat(timespec="seconds") if task.finished_at else "-"),
        ("labels", ", ".join(f"{k}={v}" for k, v in task.labels.items()) or "-"),
        (
            "input",
            "\n".join(p.text if p.type == "text" else json.dumps(p.data) for p in task.input),
        ),
    ]
    if task.reply is not None:
        rows.append(("reply", task.reply))
    if task.error:
        rows.append(("error", task.error))
    for k, v in rows:
        table.add_row(k, str(v))
    out.print(table)


# -- run ----------------------------------------------------------------------------------------


@app.command()
def run(
    deployment: Annotated[
        str, typer.Argument(help="Deployment to run (a file in config/deployments).")
    ],
    text: Annotated[str, typer.Argument(help="The input for the agent ('-' reads stdin).")],
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", "-c", help="Conversation key: the same key continues it."),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="A label key=value (repeatable).")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Repeats with this key create nothing.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task record as JSON.")] = False,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Print the task and exit; do not wait for it.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.0, help="Seconds to wait for the result.")
    ] = 300.0,
) -> None:
    """Submit a task and print the agent's reply."""
    from fleet.domain.labels import parse_label_args

    labels = parse_label_args(label or [])
    if text == "-":
        text = sys.stdin.read()
    with _runtime() as rt:
        adm = rt.dispatcher.submit(
            deployment, text, key=conversation, labels=labels, idempotency_key=idempotency_key
        )
        task = adm.task
        if not no_wait:
            if rt.local_waker is not None:
                from fleet.dispatch.embedded import run_until_done

                task = run_until_done(rt.dispatcher, rt.local_waker, task.id, timeout)
            else:
                with err.status(f"waiting for task {task.id} ({task.conversation} #{task.seq})"):
                    task = rt.dispatcher.wait(task.id, timeout)
    if as_json:
        from fleet.views import admission_json, task_json

        _print_json(admission_json(adm) | task_json(task))
    elif no_wait or not task.status.terminal:
        out.print(f"{task.id} {task.status.value} {task.conversation} #{task.seq}")
    elif task.status == TaskStatus.SUCCEEDED:
        out.print(task.reply or "", markup=False)
    if task.status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        if not as_json:
            err.print(f"fleet: task {task.id} {task.status.value}: {task.error}", markup=False)
        raise typer.Exit(EXIT_FAILED)
    if not no_wait and not task.status.terminal:
        if not as_json:
            err.print(f"fleet: task {task.id} is still {task.status.value} after {timeout:g}s")
        raise typer.Exit(EXIT_FAILED)


# -- tasks --------------------------------------------------------------------------------------


@tasks_app.command("show")
def tasks_show(
    task_id: Annotated[str, typer.Argument(help="Task id.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one task."""
    tid = _parse_id(task_id)
    with _runtime() as rt:
        task = rt.store.get_task(tid)
    if as_json:
        from fleet.views import task_json

        _print_json(task_json(task))
    else:
        _show_task(task)


@tasks_app.command("ls")
def tasks_ls(
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Only this conversation key.")
    ] = None,
    deployment: Annotated[str | None, typer.Option("--deployment", "-d")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only tasks in this status.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List tasks, oldest first (the newest LIMIT)."""
    from fleet.domain.keys import split_scoped
    from fleet.store import TaskFilter

    scope, key = (None, None)
    if conversation is not None:
        scope, key = split_scoped(conversation)
    st: TaskStatus | None = None
    if status is not None:
        try:
            st = TaskStatus(status)
        except ValueError:
            fail(f"--status {status!r} is not one of {', '.join(s.value for s in TaskStatus)}")
    with _runtime() as rt:
        found = rt.store.list_tasks(
            TaskFilter(
                deployment=deployment, scope=scope, conversation_key=key, status=st, limit=limit
            )
        )
    if as_json:
        from fleet.views import task_json

        _print_json([task_json(t) for t in found])
        return
    table = Table("id", "deployment", "conversation", "seq", "status", "created", "reply/error")
    for t in found:
        summary = (t.reply if t.reply is not None else t.error or "")[:60]
        table.add_row(
            str(t.id),
            t.deployment,
            t.conversation,
            str(t.seq),
            t.status.value,
            t.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            summary,
        )
    out.print(table)


@tasks_app.command("cancel")
def tasks_cancel(
    task_id: Annotated[str, typer.Argument(help="Task id.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Cancel a task: a queued one at once, a running one at its next step boundary."""
    tid = _parse_id(task_id)
    with _runtime() as rt:
        result = rt.dispatcher.cancel(tid)
    if as_json:
        from fleet.views import task_json

        _print_json({"effect": result.effect, "task": task_json(result.task)})
        return
    messages = {
        "cancelled": "cancelled",
        "requested": "cancel requested: it stops at its next step boundary",
        "finished": f"already {result.task.status.value}; nothing to cancel",
    }
    out.print(f"{result.task.id}: {messages[result.effect]}")


# -- operations ---------------------------------------------------------------------------------


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema to the newest revision."""
    from fleet.config import load_settings
    from fleet.runtime import open_store
    from fleet.store import db
    from fleet.store import migrate as migrations

    settings = load_settings()
    store = open_store(settings)
    try:
        with db.unavailable_on_outage():
            before = migrations.current(store.engine)
            migrations.upgrade(store.engine)
            after = migrations.current(store.engine)
    finally:
        store.dispose()
    where = db.sqlite_path(settings.resolved_database_url) or "the database"
    if before == after:
        out.print(f"{where} is at {after} (newest); nothing to do")
    else:
        out.print(f"{where} migrated from {before or 'empty'} to {after}")


@app.command()
def check(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Validate settings and config/, and connect read-only; creates nothing, migrates nothing."""
    from fleet.checks import run_checks

    results = run_checks()
    if as_json:
        _print_json([r._asdict() for r in results])
    else:
        for r in results:
            mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[r.state]
            out.print(f"{mark}  {r.name}: {r.detail}", markup=False)
    failed = [r for r in results if r.state == "fail"]
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT if failed[0].name == "config" else EXIT_FAILED)


@app.command()
def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Worker processes.")
    ] = 2,
    beat: Annotated[
        bool, typer.Option("--beat", help="Also run the sweeper schedule here.")
    ] = False,
    loglevel: Annotated[str, typer.Option("--loglevel")] = "INFO",
) -> None:
    """Run a Celery worker that drains conversations (needs FLEET_REDIS_URL)."""
    _celery_argv(
        [
            "worker",
            "-c",
            str(concurrency),
            "-Q",
            "fleet",
            "--loglevel",
            loglevel,
            "--without-gossip",
            "--without-mingle",
            *(["-B"] if beat else []),
        ]
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8080,
    workers: Annotated[int, typer.Option("--workers", min=1, help="uvicorn processes.")] = 1,
    loglevel: Annotated[str, typer.Option("--loglevel")] = "info",
) -> None:
    """Serve the HTTP API (SubmitTask, triggers, A2A, /healthz, /readyz, /metrics)."""
    import uvicorn

    from fleet.runtime import build

    build().close()  # fail fast on bad config or an unmigrated database
    uvicorn.run(
        "fleet.api.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=loglevel.lower(),
        access_log=False,
    )


@app.command("beat")
def beat_cmd(loglevel: Annotated[str, typer.Option("--loglevel")] = "INFO") -> None:
    """Run Celery beat: schedules the sweeper (run exactly one per fleet)."""
    _celery_argv(["beat", "--loglevel", loglevel])


def _celery_argv(argv: list[str]) -> None:
    from fleet.config import load_settings

    settings = load_settings()
    if settings.embedded:
        fail("this command needs FLEET_REDIS_URL (embedded mode runs tasks inside `fleet run`)")
    from fleet.runtime import build

    build().close()  # fail fast on bad config or an unmigrated database
    from fleet.dispatch.celery_app import app as celery_app

    celery_app.start(argv)


# -- entry point --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Console entry: maps errors to one line and an exit code (never a traceback)."""
    import logging
    import os

    level = os.environ.get("FLEET_LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.WARNING), format="%(levelname)s %(name)s: %(message)s"
    )
    command: Callable[..., Any] = typer.main.get_command(app)
    try:
        command(args=argv, prog_name="fleet", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        err.print("fleet: aborted")
        return 130
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        err.print(f"fleet: {exc.format_message()}{hint}", markup=False)
        return EXIT_BAD_INPUT
    except Unavailable as exc:
        err.print(f"fleet: {exc.message}", markup=False)
        return EXIT_FAILED
    except FleetError as exc:
        err.print(f"fleet: {exc.message}", markup=False)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        err.print("fleet: interrupted")
        return 130
    except Exception as exc:  # never a traceback for users; DEBUG logging shows it
        logging.getLogger("fleet").debug("unexpected error", exc_info=True)
        err.print(
            f"fleet: internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            " (set FLEET_LOG_LEVEL=DEBUG for the trace)",
            markup=False,
        )
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
