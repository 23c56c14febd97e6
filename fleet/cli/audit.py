"""``fleet audit ls``: who did what (the audit log), newest first. Against the store as the
operator (every tenant, and the entries of no tenant: refused keys), or a server with
``--server`` as the key's operator (the tenants it reaches)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from fleet.cli import bulk
from fleet.cli.bulk import when
from fleet.cli.common import AsJson, answer, out, over_client, talk_to
from fleet.domain.audit import MAX_LISTED

if TYPE_CHECKING:
    from fleet.runtime import Runtime
    from fleet.sdk.client import FleetClient

audit_app = typer.Typer(help="The audit log: who did what, when, from where.", no_args_is_help=True)


class Audit(Protocol):
    def ls(self, **filters: Any) -> list[dict[str, Any]]: ...


class LocalAudit:
    def __init__(self, rt: Runtime) -> None:
        self.store = rt.store

    def ls(self, **filters: Any) -> list[dict[str, Any]]:
        from fleet.api.audit import entry_json
        from fleet.domain.bulk import moment
        from fleet.store.audit import AuditFilter

        flt = AuditFilter(
            tenant=filters.get("tenant"),
            action=filters.get("action"),
            actor=filters.get("actor"),
            since=moment(filters.get("since"), "--since", field="since"),
            until=moment(filters.get("until"), "--until", field="until"),
            limit=filters.get("limit") or 100,
        )
        return [entry_json(e) for e in self.store.audit_entries(flt)]


class RemoteAudit:
    def __init__(self, client: FleetClient) -> None:
        self.client = client

    def ls(self, **filters: Any) -> list[dict[str, Any]]:
        return self.client.audit_entries(**filters)


def _print(found: list[dict[str, Any]]) -> None:
    if not found:
        out.print("no audit entries", markup=False)
    for e in found:
        at = str(e["at"])[:19].replace("T", " ")
        where = f"  from {e['address']}" if e.get("address") else ""
        detail = f"  {e['detail']}" if e.get("detail") else ""
        out.print(
            f"{at}  {e.get('tenant') or '-'}  {e['actor']}  {e['action']}  "
            f"{e.get('object') or '-'}  {e['outcome']}{where}{detail}",
            markup=False,
        )


@audit_app.command("ls")
def ls(
    ctx: typer.Context,
    *,
    tenant: bulk.Tenant = None,
    action: Annotated[
        str | None, typer.Option("--action", help="task.cancel, or a family: task, resource.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="operator:NAME, caller:NAME, cli:USER.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="A time (ISO) or an age (2h).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="A time (ISO) or an age (2h).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_LISTED)] = 100,
    as_json: AsJson = False,
) -> None:
    """Who did what, newest first: cancels, approvals, resets, deletes, erasures, exports,
    bulk jobs, schedules, memory writes, events, refused keys."""
    filters = {
        "tenant": tenant,
        "action": action,
        "actor": actor,
        "since": when(since, "--since"),
        "until": when(until, "--until"),
        "limit": limit,
    }
    opened: AbstractContextManager[Audit] = talk_to(ctx, LocalAudit, over_client(RemoteAudit))
    answer(
        opened,
        lambda api: api.ls(**filters),
        as_json,
        _print,
    )
