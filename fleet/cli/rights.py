"""``fleet export`` and ``fleet erase``: a person's data (a resource), or one conversation's.

Against the store as the operator (``--tenant``; when left out, the one tenant the resource
exists in, refused when it exists in several), or a server with ``--server`` as the key's
caller (an operator key within its reach, or one whose caller file says ``erase = true``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from fleet.cli.audited import audited, os_user, refine
from fleet.cli.common import AsJson, fail, out, over_client, print_json, talk_to
from fleet.constants import DEFAULT_TENANT

if TYPE_CHECKING:
    from fleet.runtime import Runtime
    from fleet.sdk.client import FleetClient

ResourceOpt = Annotated[
    str | None, typer.Option("--resource", "-r", help="The resource id (a user id, an e-mail).")
]
ConversationOpt = Annotated[
    str | None,
    typer.Option("--conversation", "-c", help="One conversation's key instead (with -d)."),
]
DeploymentOpt = Annotated[
    str | None, typer.Option("--deployment", "-d", help="The conversation's deployment.")
]
TenantOpt = Annotated[
    str | None,
    typer.Option("--tenant", help="Whose resource (needed when it exists in several tenants)."),
]


@dataclass(frozen=True)
class Named:
    """What a command names: one resource, or one conversation (key and deployment)."""

    resource: str | None
    conversation: str | None
    deployment: str | None
    tenant: str | None

    @property
    def words(self) -> str:
        if self.resource is not None:
            return f"resource {self.resource!r}"
        return f"conversation {self.conversation!r}"


class Rights(Protocol):
    def export(self, named: Named) -> Iterator[dict[str, Any]]: ...

    def erase(self, named: Named, cancel_running: bool) -> dict[str, Any]: ...


class LocalRights:
    """Over the store, as the operator (every tenant, ``by`` = ``cli:<OS user>``)."""

    def __init__(self, rt: Runtime) -> None:
        self.rights = rt.dispatcher.rights
        self.lifecycle = rt.dispatcher.lifecycle

    def _conversation(self, named: Named) -> Any:
        assert named.conversation is not None and named.deployment is not None
        tenant = self.lifecycle.tenant_of(named.conversation, named.tenant)
        info = self.lifecycle.show(named.deployment, named.conversation, tenant=tenant)
        refine(tenant=info.tenant, object=f"conversation:{info.id}")
        return info

    def export(self, named: Named) -> Iterator[dict[str, Any]]:
        if named.resource is not None:
            found = self.rights.tenant_of(named.resource, named.tenant, own=DEFAULT_TENANT)
            refine(tenant=found)
            yield from self.rights.export_resource(found, named.resource)
            return
        info = self._conversation(named)
        yield from self.rights.export_conversation(info.id, info.tenant)

    def erase(self, named: Named, cancel_running: bool) -> dict[str, Any]:
        from fleet.dispatch.rights import erasure_json

        by = f"cli:{os_user()}"
        if named.resource is not None:
            found = self.rights.tenant_of(named.resource, named.tenant, own=DEFAULT_TENANT)
            refine(tenant=found)
            done = self.rights.erase_resource(
                found, named.resource, by=by, cancel_running=cancel_running
            )
        else:
            info = self._conversation(named)
            done = self.rights.erase_conversation(
                info.id, info.tenant, by=by, cancel_running=cancel_running
            )
        return erasure_json(done)


class RemoteRights:
    """Through a server, as the key's caller."""

    def __init__(self, client: FleetClient) -> None:
        self.client = client

    def export(self, named: Named) -> Iterator[dict[str, Any]]:
        if named.resource is not None:
            return self.client.export_resource(named.resource, tenant=named.tenant)
        assert named.conversation is not None and named.deployment is not None
        return self.client.export_conversation(
            named.conversation, named.deployment, tenant=named.tenant
        )

    def erase(self, named: Named, cancel_running: bool) -> dict[str, Any]:
        if named.resource is not None:
            return self.client.erase_resource(
                named.resource, tenant=named.tenant, cancel_running=cancel_running
            )
        assert named.conversation is not None and named.deployment is not None
        return self.client.erase_conversation(
            named.conversation, named.deployment, tenant=named.tenant, cancel_running=cancel_running
        )


def _open(ctx: typer.Context) -> AbstractContextManager[Rights]:
    return talk_to(ctx, LocalRights, over_client(RemoteRights))


def _which(
    resource: str | None, conversation: str | None, deployment: str | None, tenant: str | None
) -> Named:
    """What is named, or exit 2 when it is not one resource or one conversation."""
    if (resource is None) == (conversation is None):
        fail("name what to act on: --resource R, or --conversation KEY -d DEPLOYMENT")
    if conversation is not None and deployment is None:
        fail("--conversation needs its deployment: -d DEPLOYMENT")
    if resource is not None and deployment is not None:
        fail("-d names a conversation's deployment: leave it out with --resource")
    return Named(resource, conversation, deployment, tenant)


def _action(verb: str) -> Callable[[dict[str, Any]], str]:
    return lambda o: f"resource.{verb}" if o.get("resource") else f"conversation.{verb}"


@audited(_action("export"), names="conversation")
def export(
    ctx: typer.Context,
    *,
    resource: ResourceOpt = None,
    conversation: ConversationOpt = None,
    deployment: DeploymentOpt = None,
    tenant: TenantOpt = None,
) -> None:
    """Print everything held about a resource (or one conversation) as JSON lines: its
    conversations with messages, tasks, runs and steps, notes, observations, waits,
    deliveries, working memory and the memory versions its runs wrote."""
    named = _which(resource, conversation, deployment, tenant)
    with _open(ctx) as rights:
        for line in rights.export(named):
            sys.stdout.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


@audited(_action("erase"), names="conversation")
def erase(
    ctx: typer.Context,
    *,
    resource: ResourceOpt = None,
    conversation: ConversationOpt = None,
    deployment: DeploymentOpt = None,
    tenant: TenantOpt = None,
    cancel_running: Annotated[
        bool,
        typer.Option(
            "--cancel-running/--no-cancel",
            help="Cancel its running, waiting and queued tasks first (default); --no-cancel: "
            "refuse, erasing nothing, while any runs or waits.",
        ),
    ] = True,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (scripts).")] = False,
    as_json: AsJson = False,
) -> None:
    """Erase everything held about a resource (or one conversation), everywhere: a resource
    erased refuses new tasks naming it for FLEET_ERASED_HOLD. Asks first unless --yes."""
    named = _which(resource, conversation, deployment, tenant)
    what = named.words
    if not yes:
        if not sys.stdin.isatty():
            fail(f"erasing {what} cannot be undone: pass --yes to confirm without a terminal")
        typer.confirm(f"Erase everything held about {what}? This cannot be undone", abort=True)
    with _open(ctx) as rights:
        done = rights.erase(named, cancel_running)
    if as_json:
        print_json(done)
        return
    counts = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in done["counts"].items() if n)
    until = done["refusedUntil"]
    refused = f"; new tasks naming it refused until {until}" if until else ""
    out.print(
        f"erased {what} in tenant {done['tenant']}: {counts or 'nothing was held'}"
        f" ({done['cancelled']} task(s) cancelled first){refused}",
        markup=False,
    )
