"""``fleet workers``: the fleet's live processes and the releases they run (operators).

Straight from the fleet's registry in Redis (``FLEET_REDIS_URL``; embedded there is none) or,
with ``--server``, through ListWorkers (an operator key in FLEET_API_KEY); both answer with
``fleet.views.workers``' JSON shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Annotated, Any, Protocol

import typer

from fleet.cli.common import answer, out, over_client
from fleet.cli.tables import Col, print_table

View = dict[str, Any]

workers_app = typer.Typer(
    help="The fleet's live processes and their releases (operators).", no_args_is_help=True
)

AsJson = Annotated[bool, typer.Option("--json", help="Print the JSON record.")]


class Workers(Protocol):
    def ls(self) -> View: ...


class LocalWorkers:
    """The registry in the fleet's Redis (embedded: no processes but the CLI's own)."""

    def __init__(self, settings: Any, redis: Any | None) -> None:
        self.settings = settings
        self.redis = redis

    def ls(self) -> View:
        from fleet.views.workers import read_workers

        return read_workers(self.settings, self.redis)


class RemoteWorkers:
    """Through ``fleet serve``'s API (an operator key)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def ls(self) -> View:
        found: View = self.client.list_workers()
        return found


@contextmanager
def _local() -> Iterator[Workers]:
    from fleet.config import load_settings

    settings = load_settings()
    redis = None
    if not settings.embedded:
        from fleet.runtime import redis_client

        redis = redis_client(settings)
    try:
        yield LocalWorkers(settings, redis)
    finally:
        if redis is not None:
            redis.close()


def _open(ctx: typer.Context) -> AbstractContextManager[Workers]:
    server = (ctx.find_root().obj or {}).get("server")
    if server:
        import os

        return over_client(RemoteWorkers)(server, os.environ.get("FLEET_API_KEY") or None)
    return _local()


@workers_app.command("ls")
def ls(ctx: typer.Context, *, as_json: AsJson = False) -> None:
    """List the live processes (workers, API servers, beats): release, runs in flight, free
    slots, how long up and when last seen; then the releases among them."""
    answer(_open(ctx), lambda workers: workers.ls(), as_json, _print_ls)


def _print_ls(found: View) -> None:
    if found["mode"] == "embedded" and not found["workers"]:
        out.print("embedded mode: one process runs everything; no fleet registry", markup=False)
        return
    cols = [Col("role", "whole"), Col("host:pid", "cut"), Col("release", "whole")]
    cols += [Col(h, "whole", justify="right") for h in ("in flight", "free", "up", "seen")]
    rows = [
        (
            w["role"],
            f"{w['host']}:{w['pid']}",
            w["release"],
            str(w["runsInFlight"]),
            str(w["freeSlots"]),
            _age(w["upSeconds"]),
            f"{_age(w['seenSecondsAgo'])} ago",
        )
        for w in found["workers"]
    ]
    print_table(out, cols, rows)
    releases = ", ".join(f"{r['release']} ({r['processes']})" for r in found["releases"])
    out.print(f"{len(found['workers'])} process(es); releases: {releases or 'none'}", markup=False)


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"
