"""``fleet memory``: people manage memory blocks directly (set replaces outright, bumps version)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from fleet.cli.common import AsJson
from fleet.cli.tables import Col, fit
from fleet.constants import DEFAULT_TENANT
from fleet.domain.blocks import Edit
from fleet.domain.tenancy import tenant_name
from fleet.errors import InputError, NotFound

if TYPE_CHECKING:
    from fleet.store import Store

memory_app = typer.Typer(help="Manage memory blocks (durable named text).", no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

Namespace = Annotated[str, typer.Option("--namespace", "-n", help="The block's namespace.")]


def _tenant(value: str) -> str:
    try:
        return tenant_name(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} {exc}") from None


Tenant = Annotated[
    str,
    typer.Option(
        "--tenant",
        "-t",
        callback=_tenant,
        help="Whose namespace: each tenant has its own blocks (default: 'default').",
    ),
]


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


@memory_app.command("set")
def set_block(
    block: Annotated[str, typer.Argument(help="Block name.")],
    title: Annotated[str | None, typer.Option("--title", help="Shown to the agent.")] = None,
    namespace: Namespace = "default",
    tenant: Tenant = DEFAULT_TENANT,
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
    with _store() as store:
        found = store.edit_block(
            namespace,
            block,
            Edit("replace", value),
            tenant=tenant,
            author="user",
            now=datetime.now(UTC),
            title=title,
        )
    if as_json:
        print(
            json.dumps(
                {"namespace": found.namespace, "block": found.name, "version": found.version}
            )
        )
    else:
        _out.print(f"{found.namespace}/{found.name} is at version {found.version}")


@memory_app.command("ls")
def list_blocks(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    tenant: Tenant = DEFAULT_TENANT,
    as_json: AsJson = False,
) -> None:
    """List a tenant's memory blocks."""
    with _store() as store:
        found = store.list_blocks(namespace, tenant=tenant)
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "namespace": b.namespace,
                        "block": b.name,
                        "title": b.title,
                        "version": b.version,
                        "bytes": len(b.value.encode()),
                        "updatedAt": b.updated_at.isoformat(),
                    }
                    for b in found
                ],
                indent=2,
            )
        )
        return
    rows = [
        (
            b.namespace,
            b.name,
            b.title,
            str(b.version),
            str(len(b.value.encode())),
            b.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
        for b in found
    ]
    _out.print(fit(_LS_COLUMNS, rows, _out.width).table())


def _undated_year(when: str) -> str:
    return when[5:]


#: ``memory ls``: names fold, the title first; version, size and time whole on one line.
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
    block: str, namespace: Namespace = "default", tenant: Tenant = DEFAULT_TENANT
) -> None:
    """Print a block's current value (ending in a newline, as a shell prompt expects)."""
    with _store() as store:
        found = store.get_block(namespace, block, tenant=tenant)
    if found is None:
        raise NotFound(f"no memory block {block!r} in namespace {namespace!r}", field="block")
    sys.stdout.write(found.value if found.value.endswith("\n") else found.value + "\n")


@memory_app.command("history")
def history(
    block: str,
    namespace: Namespace = "default",
    tenant: Tenant = DEFAULT_TENANT,
    as_json: AsJson = False,
) -> None:
    """Every version of a block: who wrote it and when."""
    with _store() as store:
        versions = store.block_history(namespace, block, tenant=tenant)
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "version": v.version,
                        "author": v.author,
                        "createdAt": v.created_at.isoformat(),
                        "value": v.value,
                    }
                    for v in versions
                ],
                indent=2,
            )
        )
        return
    rows = []
    for v in versions:
        preview = " ".join(v.value.split())  # one line
        preview = preview if len(preview) <= 60 else preview[:60] + "…"
        rows.append((str(v.version), v.author, v.created_at.strftime("%Y-%m-%d %H:%M:%S"), preview))
    _out.print(fit(_HISTORY_COLUMNS, rows, _out.width).table())
