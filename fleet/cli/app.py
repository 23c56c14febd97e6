"""The ``fleet`` command: run agents, inspect tasks, operate the store and the workers.

Bad input exits 2 with one line saying what was wrong; an unreachable service exits 1 with the
reason; ``--json`` prints machine-readable records. Here: the root command, its options and the
entry point; each command group is a module of its own beside this one (``run``, ``tasks``,
``approvals``, ``memory``, ``conversations``, ``keys``, ``tenants``, ``schedules``, and the
operations: migrate, check, worker, serve, beat in ``ops``), the shared output ``common``'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import click
import typer

from fleet.cli import ops
from fleet.cli.approvals import approvals_app
from fleet.cli.audit import audit_app
from fleet.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, err, out
from fleet.cli.conversations import conversations_app
from fleet.cli.events import events_app
from fleet.cli.keys import keys_app
from fleet.cli.memory import memory_app
from fleet.cli.rights import erase, export
from fleet.cli.run import run
from fleet.cli.schedules import schedules_app
from fleet.cli.tasks import tasks_app
from fleet.cli.tenants import tenants_app
from fleet.cli.workers import workers_app
from fleet.errors import FleetError, Unavailable
from fleet.version import __version__

#: The commands and groups that go through ``--server`` (every call of theirs), and those that
#: refuse it (they work on this machine's store, config or processes): never a silent fallback.
THROUGH_SERVER = (
    "run",
    "tasks",
    "approvals",
    "events",
    "memory",
    "conversations",
    "tenants",
    "schedules",
    "workers",
    "export",
    "erase",
    "audit",
)
HERE_ONLY = ("migrate", "check", "worker", "serve", "beat")

app = typer.Typer(
    name="fleet",
    help="Run LLM agents as a fleet: conversations run one task at a time, in order.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command()(run)
app.command()(export)
app.command()(erase)
app.add_typer(tasks_app, name="tasks")
app.add_typer(approvals_app, name="approvals")
app.add_typer(events_app, name="events")
app.add_typer(audit_app, name="audit")
app.add_typer(memory_app, name="memory")
app.add_typer(conversations_app, name="conversations")
app.add_typer(keys_app, name="keys")
app.add_typer(tenants_app, name="tenants")
app.add_typer(schedules_app, name="schedules")
app.add_typer(workers_app, name="workers")


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
            help=f"Base URL of a `fleet serve`: {', '.join(THROUGH_SERVER)} talk to its API "
            "(key from FLEET_API_KEY) instead of the store; "
            f"{', '.join(HERE_ONLY)} refuse it; keys needs neither.",
        ),
    ] = None,
) -> None:
    """fleet: an LLM agent worker fleet."""
    ctx.obj = {"server": server}


# -- operations (fleet.cli.ops) -----------------------------------------------------------------

app.command()(ops.migrate)
app.command()(ops.check)
app.command()(ops.worker)
app.command()(ops.serve)
app.command("beat")(ops.beat_cmd)


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
        for line in exc.message.splitlines() or [""]:  # (every config error a load found)
            err.print(f"fleet: {line}", markup=False)
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
