"""``fleet conversations``: list, show, reset, delete and prune conversations (operators).

Against the store (embedded or fleet) or, with ``--server``, through the API's lifecycle
operations (an operator key in FLEET_API_KEY); both answer with the same JSON shapes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

import typer

from fleet.cli.audited import audited
from fleet.cli.common import AsJson, OnlyDeployment, answer, out, over_client, talk_to
from fleet.cli.tables import Col, print_table
from fleet.domain import lifecycle as rules
from fleet.domain.tenancy import tenant_name

View = dict[str, Any]

conversations_app = typer.Typer(
    help="List, show, reset, delete and prune conversations (operators).", no_args_is_help=True
)

Key = Annotated[
    str, typer.Argument(help="Conversation key: scoped (api:ticket-4711) or bare (an api one).")
]
Deployment = Annotated[str, typer.Option("--deployment", "-d", help="Its deployment.")]
CancelRunning = Annotated[
    bool,
    typer.Option("--cancel-running", help="Stop a running task first (else: refused, exit 2)."),
]


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
        help="Whose conversation (default: what the key's scope tells, else 'default'; needed "
        "for another tenant's delegated and singleton conversations).",
    ),
]


class Conversations(Protocol):
    def ls(self, deployment: str | None, state: str | None, limit: int) -> list[View]: ...
    def show(self, deployment: str, key: str, tenant: str | None) -> View: ...
    def reset(
        self, deployment: str, key: str, keep_notes: bool, cancel_running: bool, tenant: str | None
    ) -> View: ...
    def delete(
        self, deployment: str, key: str, cancel_running: bool, tenant: str | None
    ) -> View: ...
    def prune(self, deployment: str | None, older_than: str | None, dry_run: bool) -> View: ...


class LocalConversations:
    """Straight on the store (the lifecycle manager of a runtime built from the environment)."""

    def __init__(self, rt: Any) -> None:
        self.lc = rt.dispatcher.lifecycle
        self.store = rt.store

    def ls(self, deployment: str | None, state: str | None, limit: int) -> list[View]:
        from fleet.domain import operator as op
        from fleet.store.operator import ConversationFilter
        from fleet.views import iso

        if deployment is not None:
            self.lc.ref(deployment, "x")
        if state is not None and state not in op.STATES:
            raise _bad(f"--state {state!r} is not one of {', '.join(op.STATES)}")
        flt = ConversationFilter(deployment=deployment, state=state, limit=limit)
        rows = self.store.conversations(flt, datetime.now(UTC))
        return [
            {
                "id": str(r.id),
                "deployment": r.deployment,
                "conversation": r.conversation,
                "state": r.state,
                "reason": r.reason or None,
                "waiting": r.pending.waiting,
                "updatedAt": iso(r.updated_at),
            }
            for r in rows
        ]

    def show(self, deployment: str, key: str, tenant: str | None) -> View:
        from fleet.dispatch.lifecycle import info_json

        return info_json(self.lc.show(deployment, key, tenant=tenant))

    def reset(
        self, deployment: str, key: str, keep_notes: bool, cancel_running: bool, tenant: str | None
    ) -> View:
        from fleet.dispatch.lifecycle import reset_json

        info, done = self.lc.reset(
            deployment, key, keep_notes=keep_notes, cancel_running=cancel_running, tenant=tenant
        )
        return reset_json(info, done, keep_notes=keep_notes)

    def delete(self, deployment: str, key: str, cancel_running: bool, tenant: str | None) -> View:
        from fleet.dispatch.lifecycle import delete_json

        stone = self.lc.delete(
            deployment, key, by="cli", cancel_running=cancel_running, tenant=tenant
        )
        return delete_json(stone)

    def prune(self, deployment: str | None, older_than: str | None, dry_run: bool) -> View:
        from fleet.dispatch.lifecycle import prune_json

        older = None if older_than is None else rules.parse_age(older_than)
        return prune_json(self.lc.prune(deployment=deployment, older_than_s=older, dry_run=dry_run))


class RemoteConversations:
    """Through ``fleet serve``'s API (an operator key)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def ls(self, deployment: str | None, state: str | None, limit: int) -> list[View]:
        found: list[View] = self.client.list_conversations(
            deployment=deployment, state=state, limit=limit
        )
        return found

    def show(self, deployment: str, key: str, tenant: str | None) -> View:
        found: View = self.client.get_conversation(key, deployment, tenant=tenant)
        return found

    def reset(
        self, deployment: str, key: str, keep_notes: bool, cancel_running: bool, tenant: str | None
    ) -> View:
        found: View = self.client.reset_conversation(
            key, deployment, keep_notes=keep_notes, cancel_running=cancel_running, tenant=tenant
        )
        return found

    def delete(self, deployment: str, key: str, cancel_running: bool, tenant: str | None) -> View:
        found: View = self.client.delete_conversation(
            key, deployment, cancel_running=cancel_running, tenant=tenant
        )
        return found

    def prune(self, deployment: str | None, older_than: str | None, dry_run: bool) -> View:
        found: View = self.client.prune_conversations(
            deployment=deployment, older_than=older_than, dry_run=dry_run
        )
        return found


def _bad(message: str) -> Exception:
    from fleet.errors import InputError

    return InputError(message)


def _open(ctx: typer.Context) -> AbstractContextManager[Conversations]:
    return talk_to(ctx, LocalConversations, over_client(RemoteConversations))


@conversations_app.command("ls")
def ls(
    ctx: typer.Context,
    *,
    deployment: OnlyDeployment = None,
    state: Annotated[
        str | None, typer.Option("--state", help="stuck, running, queued, waiting or idle.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    as_json: AsJson = False,
) -> None:
    """List conversations: stuck, running, queued, waiting first, then the most recently active."""
    answer(_open(ctx), lambda convs: convs.ls(deployment, state, limit), as_json, _print_ls)


def _print_ls(found: list[View]) -> None:
    rows = []
    for row in found:
        state_text = row["state"] + (f" ({row['reason']})" if row.get("reason") else "")
        updated = (row.get("updatedAt") or "-")[:19].replace("T", " ")
        rows.append(
            (row["conversation"], row["deployment"], state_text, str(row["waiting"]), updated)
        )
    print_table(out, _LS_COLUMNS, rows)


#: ``conversations ls``: keys and states give way (cut); the count and the time stay whole on one
#: line.
_LS_COLUMNS = (
    Col("conversation", shrink=1),
    Col("deployment", shrink=1),
    Col("state"),
    Col("waiting", "whole", justify="right"),
    Col("updated", "whole", short=lambda when: when[5:]),
)


@conversations_app.command("show")
def show(
    ctx: typer.Context,
    key: Key,
    deployment: Deployment,
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """Show a conversation's generation and counts (an unknown key: exit 2, nothing created)."""
    answer(_open(ctx), lambda convs: convs.show(deployment, key, tenant), as_json, _print_show)


def _print_show(found: View) -> None:
    active = found["activeTask"] or "none"
    out.print(
        f"{found['conversation']} ({found['deployment']}) generation {found['generation']}\n"
        f"  messages {found['messages']} recalled, {found['storedMessages']} stored; "
        f"notes {found['notes']}\n"
        f"  tasks {found['tasks']}, {found['queued']} queued; running: {active}\n"
        f"  created {found['createdAt']}, updated {found['updatedAt']}",
        markup=False,
    )


@conversations_app.command("reset")
@audited("conversation.reset", names="key")
def reset(
    ctx: typer.Context,
    key: Key,
    deployment: Deployment,
    *,
    keep_notes: Annotated[
        bool, typer.Option("--keep-notes", help="Keep its notes into the new generation.")
    ] = False,
    cancel_running: CancelRunning = False,
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """Start a new generation: history (and notes, unless kept) is no longer recalled; queued
    tasks are cancelled; idempotency keys seen before still answer duplicate."""
    answer(
        _open(ctx),
        lambda convs: convs.reset(deployment, key, keep_notes, cancel_running, tenant),
        as_json,
        _print_reset,
    )


def _print_reset(done: View) -> None:
    notes = "notes kept" if done["notesKept"] else f"{done['notesRemoved']} notes removed"
    out.print(
        f"{done['conversation']} ({done['deployment']}): generation {done['generation']} "
        f"starts now; {len(done['cancelled'])} queued tasks cancelled; {notes}",
        markup=False,
    )


@conversations_app.command("delete")
@audited("conversation.delete", names="key")
def delete(
    ctx: typer.Context,
    key: Key,
    deployment: Deployment,
    *,
    cancel_running: CancelRunning = False,
    tenant: Tenant = None,
    as_json: AsJson = False,
) -> None:
    """Delete a conversation with its tasks, runs, messages and notes; its key is remembered,
    so a later task with it starts fresh and is told so."""
    answer(
        _open(ctx),
        lambda convs: convs.delete(deployment, key, cancel_running, tenant),
        as_json,
        _print_delete,
    )


def _print_delete(done: View) -> None:
    out.print(
        f"{done['conversation']} ({done['deployment']}) deleted: {done['tasks']} tasks, "
        f"{done['messages']} messages; a new task with this key starts fresh",
        markup=False,
    )


@conversations_app.command("prune")
@audited("conversation.prune")
def prune(
    ctx: typer.Context,
    *,
    deployment: OnlyDeployment = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Delete messages older than this (30d, 12h) instead of each deployment's "
            "retention; stored caps are enforced either way.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count what would go.")] = False,
    as_json: AsJson = False,
) -> None:
    """Delete messages past retention and past each conversation's stored cap, in batches."""
    if older_than is not None:
        rules.parse_age(older_than)  # bad input: exit 2 before connecting anywhere
    answer(
        _open(ctx),
        lambda convs: convs.prune(deployment, older_than, dry_run),
        as_json,
        lambda done: _print_prune(done, dry_run),
    )


def _print_prune(done: View, dry_run: bool) -> None:
    verb = "would delete" if done["dryRun"] else "deleted"
    for name in sorted(done["retention"]):
        out.print(
            f"{name}: {verb} {done['retention'][name]} messages past retention, "
            f"{done['storedCap'].get(name, 0)} past the stored cap",
            markup=False,
        )
    out.print(f"total: {done['total']}" + (" (dry run: nothing deleted)" if dry_run else ""))
