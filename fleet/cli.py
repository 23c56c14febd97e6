"""The ``fleet`` command: run agents, inspect tasks, operate the store and the workers.

Bad input exits 2 with one line saying what was wrong; an unreachable service exits 1 with the
reason; ``--json`` prints machine-readable records. Here: ``run`` and ``tasks``; the ``memory``,
``conversations`` and ``tenants`` groups are ``cli_memory``'s, ``cli_conversations``'s and
``cli_tenants``'s, the operations (migrate, check, worker, serve, beat) ``cli_ops``'s, and the
shared output ``cli_common``'s.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Annotated, Any

import click
import typer

from fleet import __version__, cli_ops
from fleet.cli_common import EXIT_BAD_INPUT, EXIT_FAILED, err, fail, out, print_json
from fleet.cli_conversations import conversations_app
from fleet.cli_keys import keys_app
from fleet.cli_live import printer
from fleet.cli_memory import memory_app
from fleet.cli_runs import fetch_runs, show_context, show_runs, show_trace
from fleet.cli_tasks import (
    Tasks,
    cancel_message,
    open_tasks,
    resolve_id,
    show_task,
    show_task_list,
)
from fleet.cli_tenants import tenants_app
from fleet.domain.ids import IdPrefix, parse_ref
from fleet.domain.values import TaskStatus
from fleet.errors import FleetError, InputError, Unavailable

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
app.add_typer(memory_app, name="memory")
app.add_typer(conversations_app, name="conversations")
app.add_typer(keys_app, name="keys")
app.add_typer(tenants_app, name="tenants")


def _version(value: bool) -> None:
    if value:
        out.print(f"fleet {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="FLEET_SERVER",
            help="Base URL of a `fleet serve`: run and tasks talk to its API (key from "
            "FLEET_API_KEY) instead of the store.",
        ),
    ] = None,
) -> None:
    """fleet: an LLM agent worker fleet."""
    ctx.obj = {"server": server}


def _tasks(ctx: typer.Context) -> AbstractContextManager[Tasks]:
    """The API of ``--server`` / ``FLEET_SERVER`` when given, else the store."""
    server = (ctx.find_root().obj or {}).get("server")
    return open_tasks(server, os.environ.get("FLEET_API_KEY") or None)


def _parse_id(value: str) -> uuid.UUID | IdPrefix:
    """A whole id, or a prefix of at least 6 hex digits (checked before any store or server)."""
    try:
        return parse_ref(value)
    except InputError as exc:
        fail(exc.message)


# -- run ----------------------------------------------------------------------------------------


@app.command()
def run(
    ctx: typer.Context,
    deployment: Annotated[
        str, typer.Argument(help="Deployment to run (a file in config/deployments).")
    ],
    text: Annotated[str, typer.Argument(help="The input for the agent ('-' reads stdin).")],
    *,
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
    delivery: Annotated[
        str | None,
        typer.Option(
            "--delivery",
            help="If the conversation is busy: followup, collect, steer or interrupt "
            "(instead of the deployment's queue mode).",
        ),
    ] = None,
    resource: Annotated[
        str | None,
        typer.Option("--resource", help="Who the task is about across conversations (recall)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task record as JSON.")] = False,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Print the task and exit; do not wait for it.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.0, help="Seconds to wait for the result.")
    ] = 300.0,
    live: Annotated[
        bool | None,
        typer.Option(
            "--live/--no-live",
            help="Show each step on stderr while waiting (default: when stderr is a terminal "
            "and not --json).",
        ),
    ] = None,
) -> None:
    """Submit a task and print the agent's reply."""
    from fleet.domain.labels import parse_label_args

    labels = parse_label_args(label or [])
    if conversation == "":  # not "no key": that would start a new conversation every time
        fail("--conversation '' is empty: give the key, or leave the option out for a new one")
    if text == "-":
        text = sys.stdin.read()
    with _tasks(ctx) as tasks:
        admitted = tasks.submit(
            deployment,
            text,
            key=conversation,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
            resource=resource,
        )
        if admitted.get("deliveredTo") == "run" and not as_json:
            err.print(
                f"fleet: steered into running task {admitted['id']}: your message joins its "
                "run at its next step",
                markup=False,
            )
        if admitted.get("notice") and not as_json:
            err.print(f"fleet: {admitted['notice']}", markup=False)  # fresh after a delete
        if live is None:
            live = err.is_terminal and not as_json
        on_event = printer(err) if live else None
        task = admitted if no_wait else tasks.wait(admitted["id"], timeout, err, on_event)
        late = None if no_wait or TaskStatus(task["status"]).terminal else task["status"]
        if late is not None:
            ended = tasks.give_up(task["id"])  # embedded: cancelled, as nothing else runs it
            if ended is not None:
                task = ended
    status = TaskStatus(task["status"])
    if late is not None and status == TaskStatus.CANCELLED:
        if as_json:
            print_json(admitted | task)
        else:
            err.print(
                f"fleet: task {task['id']} is still {late} after {timeout:g}s; cancelled it "
                "(embedded, nothing runs it once this command exits)",
                markup=False,
            )
        raise typer.Exit(EXIT_FAILED)
    if as_json:
        print_json(admitted | task)
    elif no_wait or not status.terminal:
        out.print(f"{task['id']} {status.value} {task['conversation']} #{task['seq']}")
    elif status == TaskStatus.SUCCEEDED:
        out.print(task["reply"] or "", markup=False)
    elif status == TaskStatus.SUPERSEDED:
        out.print(task["reply"] or "", markup=False)
        err.print(f"fleet: task {task['id']} was interrupted by a newer message", markup=False)
    if status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        if not as_json:
            err.print(f"fleet: task {task['id']} {status.value}: {task['error']}", markup=False)
        raise typer.Exit(EXIT_FAILED)
    if not no_wait and not status.terminal:
        if not as_json:
            err.print(f"fleet: task {task['id']} is still {status.value} after {timeout:g}s")
        raise typer.Exit(EXIT_FAILED)


# -- tasks --------------------------------------------------------------------------------------


@tasks_app.command("show")
def tasks_show(
    ctx: typer.Context,
    task_id: Annotated[
        str, typer.Argument(help="Task id, or a unique prefix of it (at least 6 hex characters).")
    ],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    context: Annotated[
        bool, typer.Option("--context", help="Each run's context: injected and dropped messages.")
    ] = False,
    trace: Annotated[
        bool, typer.Option("--trace", help="Each run's model and tool calls.")
    ] = False,
) -> None:
    """Show one task and its runs."""
    ref = _parse_id(task_id)
    with _tasks(ctx) as tasks:
        task = tasks.get(resolve_id(tasks, ref))
        runs = None
        if context or trace or not as_json:
            runs = fetch_runs(tasks, task["id"], steps=trace, messages=context and as_json)
    if as_json:
        print_json(task if runs is None else {**task, "runs": runs})
    else:
        show_task(out, task)
        show_runs(out, runs or [])
        if context:
            show_context(out, runs or [])
        if trace:
            show_trace(out, runs or [])


@tasks_app.command("ls")
def tasks_ls(
    ctx: typer.Context,
    *,
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
    st: TaskStatus | None = None
    if status is not None:
        try:
            st = TaskStatus(status)
        except ValueError:
            fail(f"--status {status!r} is not one of {', '.join(s.value for s in TaskStatus)}")
    with _tasks(ctx) as tasks:
        found = tasks.list(conversation=conversation, deployment=deployment, status=st, limit=limit)
    if as_json:
        print_json(found)
    else:
        show_task_list(out, found)


@tasks_app.command("cancel")
def tasks_cancel(
    ctx: typer.Context,
    task_id: Annotated[
        str, typer.Argument(help="Task id, or a unique prefix of it (at least 6 hex characters).")
    ],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Cancel a task: a queued one at once, a running one at its next step boundary."""
    ref = _parse_id(task_id)
    with _tasks(ctx) as tasks:
        result = tasks.cancel(resolve_id(tasks, ref))
    if as_json:
        print_json(result)
    else:
        out.print(cancel_message(result), markup=False)


# -- operations (fleet.cli_ops) -----------------------------------------------------------------

app.command()(cli_ops.migrate)
app.command()(cli_ops.check)
app.command()(cli_ops.worker)
app.command()(cli_ops.serve)
app.command("beat")(cli_ops.beat_cmd)


# -- entry point --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Console entry: maps errors to one line and an exit code (never a traceback)."""
    import logging

    from fleet import logs

    level = getattr(logging, os.environ.get("FLEET_LOG_LEVEL", "WARNING").upper(), logging.WARNING)
    if logs.log_format() == "json":
        logs.configure(level, "json")
    else:
        logging.basicConfig(level=level, format=logs.TEXT_FORMAT)
    command: Callable[..., Any] = typer.main.get_command(app)
    try:
        code = command(args=argv, prog_name="fleet", standalone_mode=False)
        if isinstance(code, int):  # click returns an Exit's code instead of raising it here
            return code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (click.exceptions.Abort, typer.Abort):
        err.print("fleet: aborted")
        return 130
    except (click.ClickException, typer.TyperException) as exc:
        # typer >= 0.20 raises its own (vendored) click's exceptions, not click's
        ctx = getattr(exc, "ctx", None)
        code = int(getattr(exc, "exit_code", EXIT_BAD_INPUT))
        if code == 0 or not hasattr(exc, "format_message"):
            return code
        if type(exc).__name__ == "NoArgsIsHelpError":  # `fleet` or `fleet tasks` alone: help
            out.print(exc.format_message(), markup=False)
            return code
        hint = f" (see `{ctx.command_path} --help`)" if ctx else ""
        err.print(f"fleet: {exc.format_message()}{hint}", markup=False)
        return code
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
        first = str(exc).splitlines()[0] if str(exc) else ""
        err.print(
            f"fleet: internal error: {type(exc).__name__}: {first}"
            " (set FLEET_LOG_LEVEL=DEBUG for the trace)",
            markup=False,
        )
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
