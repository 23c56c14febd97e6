"""What every ``fleet`` command shares: its consoles, exit codes, one-line failures, JSON out,
and where it talks to (the store, or a server with ``--server``)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console

if TYPE_CHECKING:
    from fleet.runtime import Runtime
    from fleet.sdk.client import FleetClient

T = TypeVar("T")
V = TypeVar("V")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: ``--json``: print the command's JSON record(s) instead of text.
AsJson = Annotated[bool, typer.Option("--json")]

#: ``--deployment``: only what belongs to this deployment (all of them when left out).
OnlyDeployment = Annotated[str | None, typer.Option("--deployment", "-d")]

#: Exit codes: 0 ok, 1 failure (task failed, service down), 2 bad input.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"fleet: {message}", markup=False)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def server_of(ctx: typer.Context) -> str | None:
    """The server ``--server`` / ``FLEET_SERVER`` names, if any."""
    server: str | None = (ctx.find_root().obj or {}).get("server")
    return server or None


def api_key() -> str | None:
    """The key a server is called with (``FLEET_API_KEY``), if any."""
    return os.environ.get("FLEET_API_KEY") or None


def refuse_server(ctx: typer.Context, why: str) -> None:
    """Exit 2 with one line when a server is named for a command that cannot go through one
    (never a silent fallback to the store)."""
    if server_of(ctx):
        fail(
            f"`{ctx.command_path}` {why}, not through a server: leave out --server "
            "(and unset FLEET_SERVER) to run it here"
        )


@contextmanager
def talk_to(
    ctx: typer.Context,
    local: Callable[[Runtime], T],
    remote: Callable[[str, str | None], AbstractContextManager[T]],
) -> Iterator[T]:
    """``remote`` (a server's URL and ``FLEET_API_KEY``) when ``--server`` / ``FLEET_SERVER``
    names a server, else ``local`` over the store from the environment (closed on exit)."""
    server = server_of(ctx)
    if server:
        with remote(server, api_key()) as found:
            yield found
        return
    from fleet.cli.audited import recording
    from fleet.runtime import build

    rt = build()
    try:
        with recording(rt.store):
            yield local(rt)
    finally:
        rt.close()


def answer(
    opened: AbstractContextManager[T],
    ask: Callable[[T], V],
    as_json: bool,
    text: Callable[[V], None],
) -> None:
    """Ask once through ``opened`` (the store or a server, closed before printing), then print
    the answer: as JSON with ``--json``, else as ``text`` prints it."""
    with opened as api:
        found = ask(api)
    if as_json:
        print_json(found)
    else:
        text(found)


def over_client(
    wrap: Callable[[FleetClient], T],
) -> Callable[[str, str | None], AbstractContextManager[T]]:
    """A ``remote`` for :func:`talk_to`: ``wrap`` around an HTTP client of the server, which is
    closed on exit (httpx loads only when a server is named)."""

    @contextmanager
    def remote(server: str, api_key: str | None) -> Iterator[T]:
        from fleet.sdk.client import FleetClient

        with FleetClient(server, api_key) as client:
            yield wrap(client)

    return remote
