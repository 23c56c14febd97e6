"""``fleet tenants``: each tenant's weight, backlog, tokens today against its budget and today's
refusals (operators).

Against the store (embedded or fleet: the operator's own CLI sees every tenant) or, with
``--server``, through ListTenants / GetTenant (an operator key in FLEET_API_KEY, which sees the
tenants it reaches); both answer with ``fleet.views.tenants``' JSON shapes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any, Protocol

import typer

from fleet.cli.common import answer, out, over_client, talk_to
from fleet.cli.tables import Col, print_table

View = dict[str, Any]

tenants_app = typer.Typer(
    help="Tenants' weights, backlogs, token budgets and refusals (operators).",
    no_args_is_help=True,
)

AsJson = Annotated[bool, typer.Option("--json", help="Print the JSON records.")]
Name = Annotated[str, typer.Argument(help="The tenant's name.")]

#: The table's number columns (after the tenant), short enough to leave the tenant's name a few
#: of 80 columns: headers never wrap, a longer name is cut (whole in a pipe). ``tokens/day`` is
#: today's tokens over the daily budget (``12.3k/2.5M``), ``refused`` today's refusals.
_COLUMNS = ("weight", "running", "queued", "waiting", "oldest due", "tokens/day", "refused")


class Tenants(Protocol):
    def ls(self) -> list[View]: ...
    def show(self, name: str) -> View: ...


class LocalTenants:
    """Straight on the store and today's refusals (Redis in a fleet): every tenant."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt

    def ls(self) -> list[View]:
        from fleet.views.tenants import everyone, read_tenants

        return read_tenants(self.rt, everyone)

    def show(self, name: str) -> View:
        from fleet.views.tenants import one_tenant

        return one_tenant(self.ls(), name)


class RemoteTenants:
    """Through ``fleet serve``'s API (an operator key: the tenants it reaches)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def ls(self) -> list[View]:
        found: list[View] = self.client.list_tenants()
        return found

    def show(self, name: str) -> View:
        found: View = self.client.get_tenant(name)
        return found


def _open(ctx: typer.Context) -> AbstractContextManager[Tenants]:
    return talk_to(ctx, LocalTenants, over_client(RemoteTenants))


def _cells(view: View) -> list[str]:
    from fleet.views.tenants import budget_text, wait_text

    refused = view["refusedToday"]
    return [
        str(view["weight"]),
        str(view["running"]),
        str(view["queued"]),
        str(view.get("waiting", "-")),  # (a server of a release before it did not say)
        wait_text(view["oldestDueSeconds"]),
        budget_text(view),
        "?" if refused is None else str(refused),  # Redis could not be read
    ]


@tenants_app.command("ls")
def ls(ctx: typer.Context, *, as_json: AsJson = False) -> None:
    """List tenants: configured ones and any other with unfinished tasks or tokens today."""
    answer(_open(ctx), lambda tenants: tenants.ls(), as_json, _print_ls)


def _print_ls(found: list[View]) -> None:
    cols = [Col("tenant"), *(Col(h, "whole", justify="right") for h in _COLUMNS)]
    print_table(out, cols, [(view["tenant"], *_cells(view)) for view in found])


@tenants_app.command("show")
def show(ctx: typer.Context, name: Name, *, as_json: AsJson = False) -> None:
    """Show one tenant: its quotas and figures now (unknown or out of reach: exit 2)."""
    answer(_open(ctx), lambda tenants: tenants.show(name), as_json, _print_show)


def _print_show(found: View) -> None:
    from fleet.views.tenants import wait_text

    quotas = ", ".join(f"{k} {v:,}" for k, v in found["quotas"].items()) or "none"
    budget = "no budget" if found["tokensPerDay"] is None else f"of {found['tokensPerDay']:,}"
    refused = "unknown (Redis)" if found["refusedToday"] is None else found["refusedToday"]
    cost = f"  cost today {found['costToday']:g}\n" if found.get("costToday") else ""
    out.print(
        f"{found['tenant']}  weight {found['weight']}\n"
        f"  running {found['running']} tasks in {found['conversationsRunning']} conversations; "
        f"queued {found['queued']}, waiting {found.get('waiting', '-')}, "
        f"oldest due {wait_text(found['oldestDueSeconds'])}\n"
        f"  tokens today {found['tokensToday']:,} {budget} "
        f"(the day resets {found['budgetResetsAt']})\n"
        f"{cost}"
        f"  refused today {refused}\n"
        f"  quotas: {quotas}",
        markup=False,
    )
