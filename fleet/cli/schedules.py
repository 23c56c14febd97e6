"""``fleet schedules ls|add|rm``: crons and intervals that submit tasks.

Against the store (embedded or fleet; ``ls`` shows every tenant's, ``add`` and ``rm`` act in
the scope of ``--caller``, else the open API's) or, with ``--server``, through ListSchedules,
CreateSchedule and DeleteSchedule (the schedules of ``FLEET_API_KEY``'s caller). A bad value
exits 2 with one line naming the option.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any, NoReturn, Protocol

import typer

from fleet.cli.audited import audited
from fleet.cli.common import AsJson, answer, fail, out, over_client, print_json, talk_to
from fleet.cli.tables import Col, print_table
from fleet.errors import InputError

View = dict[str, Any]

schedules_app = typer.Typer(
    help="Schedules: a cron or an interval that submits a task at each tick.",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="The schedule's name.")]
CallerOpt = Annotated[
    str | None,
    typer.Option(
        "--caller",
        help="The configured caller whose tenant and scope it takes (against the store; "
        "with --server the key's caller owns it).",
    ),
]

#: The API's field → the option that sets it (for one-line errors).
_OPTIONS = {
    "name": "NAME",
    "deployment": "--deployment",
    "conversation": "--conversation",
    "cron": "--cron",
    "every": "--every",
    "timezone": "--timezone",
    "input": "--input",
    "overlap": "--overlap",
    "catch_up": "--catch-up",
    "catchUp": "--catch-up",
    "end_at": "--end-at",
    "endAt": "--end-at",
}


class Schedules(Protocol):
    def ls(self) -> list[View]: ...
    def add(self, body: View, caller: str | None) -> View: ...
    def rm(self, name: str, caller: str | None) -> None: ...


class LocalSchedules:
    """Straight on the store, every tenant's: it writes only what is asked (``ls`` shows the
    files' schedules a beat has not stored yet as such)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt

    def _scope(self, caller: str | None) -> tuple[str, str]:
        from fleet.dispatch.schedules import identity

        callers = self.rt.config.callers
        if caller is not None and caller not in callers:
            known = ", ".join(sorted(callers)) or "none configured"
            fail(f"--caller: no caller named {caller!r} (known: {known})")
        if caller is None and callers:
            fail("--caller: required once callers are configured (whose tenant and scope)")
        tenant, scope = identity(self.rt.config, caller)
        return tenant, scope

    def ls(self) -> list[View]:
        from fleet.dispatch.schedules import with_files
        from fleet.views.schedules import schedule_json

        stored = self.rt.store.list_schedules()
        found = with_files(self.rt.config, stored, self.rt.dispatcher.clock())
        return [schedule_json(r) for r in found]

    def add(self, body: View, caller: str | None) -> View:
        from pydantic import ValidationError

        from fleet.config.schedules import ScheduleConfig
        from fleet.dispatch import schedules as manager
        from fleet.views.schedules import schedule_json

        tenant, scope = self._scope(caller)
        try:
            checked = ScheduleConfig.model_validate(
                {_SNAKE.get(k, k): v for k, v in body.items() if v is not None}
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else ""
            reason = str(err["msg"]).removeprefix("Value error, ")
            fail(f"{_OPTIONS.get(field, 'give --cron or --every')}: {reason}")
        if caller is not None:
            allowed = self.rt.config.callers[caller].deployments
            if "*" not in allowed and checked.deployment not in allowed:
                fail(f"--caller: {caller!r} may not use deployment {checked.deployment!r}")
        rec = manager.create(
            self.rt.dispatcher,
            checked.name,
            checked.spec,
            tenant=tenant,
            scope=scope,
            caller=caller,
        )
        return schedule_json(rec)

    def rm(self, name: str, caller: str | None) -> None:
        from fleet.dispatch import schedules as manager

        tenant, scope = self._scope(caller)
        manager.delete(self.rt.dispatcher, name, tenant=tenant, scope=scope)


_SNAKE = {"catchUp": "catch_up", "endAt": "end_at"}


def _refuse_naming_the_option(exc: InputError) -> NoReturn:
    """A refused value (from the store or a server) named as the command line sent it: the
    option instead of the API's field (``--end-at``, not ``endAt``)."""
    option = _OPTIONS.get(exc.field or "")
    if option is None or not exc.message.startswith(f"{exc.field} "):
        raise exc
    fail(f"{option}: {exc.message.removeprefix(f'{exc.field} ')}")


class RemoteSchedules:
    """Through ``fleet serve``'s API: the key's caller's schedules."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def ls(self) -> list[View]:
        found: list[View] = self.client.list_schedules()
        return found

    def add(self, body: View, caller: str | None) -> View:
        if caller is not None:
            fail("--caller: with --server the schedule is the API key's caller's; leave it out")
        found: View = self.client.create_schedule({k: v for k, v in body.items() if v is not None})
        return found

    def rm(self, name: str, caller: str | None) -> None:
        if caller is not None:
            fail("--caller: with --server the schedule is the API key's caller's; leave it out")
        self.client.delete_schedule(name)


def _open(ctx: typer.Context) -> AbstractContextManager[Schedules]:
    return talk_to(ctx, LocalSchedules, over_client(RemoteSchedules))


@schedules_app.command("ls")
def ls(ctx: typer.Context, *, as_json: AsJson = False) -> None:
    """List schedules with their next tick and what their last tick became."""
    answer(_open(ctx), lambda schedules: schedules.ls(), as_json, _print_ls)


def _print_ls(found: list[View]) -> None:
    from fleet.views.schedules import when_text

    if not found:
        out.print("no schedules")
        return
    rows = []
    for v in found:
        last = "-" if v["lastTick"] is None else f"{v['state']} {v['lastTick']}"
        if v["state"] == "unsynced":
            last = "not stored yet (a beat stores it)"
        rows.append(
            (v["name"], v["scope"], v["deployment"], when_text(v), v["nextTick"] or "ended", last)
        )
    print_table(
        out, [Col(h) for h in ("name", "scope", "deployment", "when", "next tick", "last")], rows
    )


@schedules_app.command("add")
@audited("schedule.add", names="name")
def add(
    ctx: typer.Context,
    name: Name,
    *,
    deployment: Annotated[str, typer.Option("--deployment", "-d", help="Its tasks' deployment.")],
    input: Annotated[str, typer.Option("--input", "-i", help="Each task's input text.")],
    cron: Annotated[
        str | None, typer.Option("--cron", help="5 fields, e.g. '0 8 * * 1-5'.")
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="An interval, e.g. 15m (at least 1s).")
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="The cron's time zone (default UTC).")
    ] = None,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", "-c", help="One conversation for every tick's task."),
    ] = None,
    overlap: Annotated[
        str | None,
        typer.Option("--overlap", help="skip (default) or queue: while the last tick's task runs."),
    ] = None,
    catch_up: Annotated[
        str | None, typer.Option("--catch-up", help="latest (default) or none: after downtime.")
    ] = None,
    end_at: Annotated[
        str | None, typer.Option("--end-at", help="No tick at or after this ISO 8601 time.")
    ] = None,
    caller: CallerOpt = None,
    as_json: AsJson = False,
) -> None:
    """Add a schedule: one task at each tick of --cron or --every."""
    body: View = {
        "name": name,
        "deployment": deployment,
        "input": input,
        "cron": cron,
        "every": every,
        "timezone": timezone,
        "conversation": conversation,
        "overlap": overlap,
        "catchUp": catch_up,
        "endAt": end_at,
    }
    with _open(ctx) as schedules:
        try:
            made = schedules.add(body, caller)
        except InputError as exc:
            _refuse_naming_the_option(exc)
    if as_json:
        print_json(made)
        return
    out.print(f"schedule {made['name']} ({made['scope']}): next tick {made['nextTick']}")


@schedules_app.command("rm")
@audited("schedule.remove", names="name")
def rm(ctx: typer.Context, name: Name, *, caller: CallerOpt = None) -> None:
    """Delete a schedule (one from config/schedules: delete its file instead)."""
    with _open(ctx) as schedules:
        schedules.rm(name, caller)
    out.print(f"schedule {name} deleted")
