"""``fleet memory``: people manage memory blocks directly (set replaces outright, bumps version).

Against the store (embedded or fleet: the operator's own CLI, versions authored ``user``) or,
with ``--server``, through the memory API (an operator key in FLEET_API_KEY: the tenants it
reaches, versions authored ``operator:<caller>``); both answer with ``fleet.views.memory``'s
JSON shapes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer
from rich.console import Console

from fleet.cli.audited import audited
from fleet.cli.common import AsJson, api_key, over_client, print_json, server_of
from fleet.cli.tables import Col, print_table
from fleet.constants import DEFAULT_TENANT
from fleet.domain.blocks import Edit
from fleet.domain.tenancy import tenant_name
from fleet.errors import InputError, NotFound

if TYPE_CHECKING:
    from fleet.store import Store

View = dict[str, Any]

memory_app = typer.Typer(help="Manage memory blocks (durable named text).", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

Namespace = Annotated[str, typer.Option("--namespace", "-n", help="The block's namespace.")]


def _tenant(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return tenant_name(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} {exc}") from None


Tenant = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        callback=_tenant,
        help="Whose namespace: each tenant has its own blocks (default: 'default'; with "
        "--server, the key's own tenant).",
    ),
]


class Memory(Protocol):
    def set(
        self, block: str, value: str, *, namespace: str, tenant: str | None, title: str | None
    ) -> View: ...
    def ls(self, namespace: str | None, tenant: str | None) -> list[View]: ...
    def get(self, block: str, namespace: str, tenant: str | None) -> View: ...
    def history(self, block: str, namespace: str, tenant: str | None) -> list[View]: ...


class LocalMemory:
    """Straight on the store (its schema ensured): every tenant, versions authored ``user``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def set(
        self, block: str, value: str, *, namespace: str, tenant: str | None, title: str | None
    ) -> View:
        from fleet.views.memory import block_json

        found = self.store.edit_block(
            namespace,
            block,
            Edit("replace", value),
            tenant=tenant or DEFAULT_TENANT,
            author="user",
            now=datetime.now(UTC),
            title=title,
        )
        return block_json(found)

    def ls(self, namespace: str | None, tenant: str | None) -> list[View]:
        from fleet.views.memory import block_json

        found = self.store.list_blocks(namespace, tenant=tenant or DEFAULT_TENANT)
        return [block_json(b, value=False) for b in found]

    def get(self, block: str, namespace: str, tenant: str | None) -> View:
        from fleet.views.memory import block_json

        found = self.store.get_block(namespace, block, tenant=tenant or DEFAULT_TENANT)
        if found is None:
            raise NotFound(f"no memory block {block!r} in namespace {namespace!r}", field="block")
        return block_json(found)

    def history(self, block: str, namespace: str, tenant: str | None) -> list[View]:
        from fleet.views.memory import history_json

        versions = self.store.block_history(namespace, block, tenant=tenant or DEFAULT_TENANT)
        found: list[View] = history_json(namespace, block, versions)["versions"]
        return found


class RemoteMemory:
    """Through ``fleet serve``'s memory API (an operator key: the tenants it reaches)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def set(
        self, block: str, value: str, *, namespace: str, tenant: str | None, title: str | None
    ) -> View:
        found: View = self.client.set_memory_block(
            block, value, namespace=namespace, tenant=tenant, title=title
        )
        return found

    def ls(self, namespace: str | None, tenant: str | None) -> list[View]:
        found: list[View] = self.client.list_memory_blocks(namespace=namespace, tenant=tenant)
        return found

    def get(self, block: str, namespace: str, tenant: str | None) -> View:
        found: View = self.client.get_memory_block(block, namespace=namespace, tenant=tenant)
        return found

    def history(self, block: str, namespace: str, tenant: str | None) -> list[View]:
        found: list[View] = self.client.memory_block_versions(
            block, namespace=namespace, tenant=tenant
        )
        return found


@contextmanager
def _store() -> Iterator[Store]:
    """The settings' store with its schema ensured, disposed of on exit."""
    from fleet.config import load_settings
    from fleet.runtime import ensure_schema, open_store

    store = open_store(load_settings())
    try:
        ensure_schema(store)
        yield store
    finally:
        store.dispose()


@contextmanager
def _local() -> Iterator[Memory]:
    from fleet.cli.audited import recording

    with _store() as store, recording(store):
        yield LocalMemory(store)


def _open(ctx: typer.Context) -> AbstractContextManager[Memory]:
    """The server's memory API with ``--server`` / ``FLEET_SERVER``, else the store."""
    server = server_of(ctx)
    if server:
        return over_client(RemoteMemory)(server, api_key())
    return _local()


@memory_app.command("set")
@audited("memory.set", names="block")
def set_block(
    ctx: typer.Context,
    block: Annotated[str, typer.Argument(help="Block name.")],
    *,
    title: Annotated[str | None, typer.Option("--title", help="Shown to the agent.")] = None,
    namespace: Namespace = "default",
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """Replace a block's value with stdin (creating it); bumps its version."""
    try:
        value = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"stdin is not UTF-8 text (byte {exc.start}); give the block's value as UTF-8",
            field="stdin",
        ) from None
    with _open(ctx) as memory:
        found = memory.set(block, value, namespace=namespace, tenant=tenant, title=title)
    if as_json:
        print(
            json.dumps(
                {
                    "namespace": found["namespace"],
                    "block": found["block"],
                    "version": found["version"],
                }
            )
        )
    else:
        _out.print(f"{found['namespace']}/{found['block']} is at version {found['version']}")


@memory_app.command("ls")
def list_blocks(
    ctx: typer.Context,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """List a tenant's memory blocks."""
    with _open(ctx) as memory:
        found = memory.ls(namespace, tenant)
    if as_json:
        print_json(found)
        return
    rows = [
        (
            b["namespace"],
            b["block"],
            b["title"],
            str(b["version"]),
            str(b["bytes"]),
            _when(b["updatedAt"]),
        )
        for b in found
    ]
    print_table(_out, _LS_COLUMNS, rows)


def _when(value: str | None) -> str:
    """``2024-05-01T10:00:00.123456Z`` → ``2024-05-01 10:00:00``."""
    return value[:19].replace("T", " ") if value else "-"


def _undated_year(when: str) -> str:
    return when[5:]


#: ``memory ls``: names give way (cut), the title first; version, size and time whole on one line.
_LS_COLUMNS = (
    Col("namespace", shrink=1),
    Col("block", shrink=1),
    Col("title"),
    Col("version", "whole", justify="right"),
    Col("bytes", "whole", justify="right"),
    Col("updated", "whole", short=_undated_year),
)
#: ``memory history``: who wrote each version and when, whole; the value's start, cut.
_HISTORY_COLUMNS = (
    Col("version", "whole", justify="right"),
    Col("author", shrink=1),
    Col("written", "whole", short=_undated_year),
    Col("value", "cut", floor=10),
)


@memory_app.command("get")
def get_block(
    ctx: typer.Context, block: str, namespace: Namespace = "default", tenant: Tenant = None
) -> None:
    """Print a block's current value (ending in a newline, as a shell prompt expects)."""
    with _open(ctx) as memory:
        value: str = memory.get(block, namespace, tenant)["value"]
    sys.stdout.write(value if value.endswith("\n") else value + "\n")


@memory_app.command("history")
def history(
    ctx: typer.Context,
    block: str,
    namespace: Namespace = "default",
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """Every version of a block: who wrote it and when."""
    with _open(ctx) as memory:
        versions = memory.history(block, namespace, tenant)
    if as_json:
        print_json(versions)
        return
    rows = []
    for v in versions:
        preview = " ".join(v["value"].split())  # one line
        preview = preview if len(preview) <= 60 else preview[:60] + "…"
        rows.append((str(v["version"]), v["author"], _when(v["createdAt"]), preview))
    print_table(_out, _HISTORY_COLUMNS, rows)
