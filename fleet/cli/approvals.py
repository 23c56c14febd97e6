"""``fleet approvals``: list the tool calls waiting for a person's approval, approve or reject
one (against the store as the operator, or a server with ``--server`` as the key's caller)."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

import typer
from rich.console import Console

from fleet.cli.backends import Tasks, tasks_for
from fleet.cli.common import AsJson, answer, fail, out, print_json
from fleet.cli.tables import Col, fit
from fleet.cli.tasks import AMBIGUOUS_SHOWN, TaskRef, parse_id, resolve_id
from fleet.domain.ids import IdPrefix, parse_ref, short
from fleet.domain.waits import MAX_REASON
from fleet.errors import InputError, NotFound
from fleet.sdk.backends import View

#: ``approvals ls`` shows at most this many characters of a call's arguments (``--json``: all).
ARGUMENTS_CHARS = 40

approvals_app = typer.Typer(
    help="Tool calls waiting for a person's approval: list, approve, reject.",
    no_args_is_help=True,
)

ApprovalRef = Annotated[
    str,
    typer.Argument(help="Approval id, or a unique prefix of it among the task's pending ones."),
]
Reason = Annotated[
    str | None,
    typer.Option(
        "--reason", help=f"Why (at most {MAX_REASON} characters; the model reads it as yours)."
    ),
]


def _parse_approval(value: str) -> uuid.UUID | IdPrefix:
    try:
        return parse_ref(value)
    except InputError:
        fail(
            f"approval id {value!r} is not a UUID or a prefix of one (at least 6 hex "
            "characters); see `fleet approvals ls` for ids"
        )


def resolve_approval(tasks: Tasks, task_id: uuid.UUID, ref: uuid.UUID | IdPrefix) -> str:
    """The approval id ``ref`` names: a whole id as is, a prefix when exactly one of the task's
    pending approvals has it."""
    if isinstance(ref, uuid.UUID):
        return str(ref)
    pending = tasks.show(task_id).get("pendingApprovals") or []
    found = [a["id"] for a in pending if a["id"].replace("-", "").startswith(ref.hex)]
    if not found:
        raise NotFound(
            f"task {task_id} has no pending approval with an id starting {ref.typed!r}",
            field="approvalId",
        )
    if len(found) > 1:
        listed = ", ".join(found[:AMBIGUOUS_SHOWN])
        raise InputError(
            f"approval id prefix {ref.typed!r} is ambiguous: it matches {listed}; "
            "give more characters",
            field="approvalId",
        )
    return str(found[0])


# -- commands ----------------------------------------------------------------------------------


@approvals_app.command("ls")
def approvals_ls(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: AsJson = False,
) -> None:
    """List the approvals waiting for a decision, oldest first."""
    answer(
        tasks_for(ctx),
        lambda tasks: tasks.list_approvals(limit=limit),
        as_json,
        lambda found: show_approvals(out, found),
    )


@approvals_app.command("approve")
def approvals_approve(
    ctx: typer.Context,
    task_id: TaskRef,
    approval_id: ApprovalRef,
    reason: Reason = None,
    as_json: AsJson = False,
) -> None:
    """Approve a tool call: it runs once, with the arguments shown, and the task goes on."""
    _decide(
        ctx, task_id, approval_id=approval_id, decision="approve", reason=reason, as_json=as_json
    )


@approvals_app.command("reject")
def approvals_reject(
    ctx: typer.Context,
    task_id: TaskRef,
    approval_id: ApprovalRef,
    reason: Reason = None,
    as_json: AsJson = False,
) -> None:
    """Reject a tool call: it never runs; the model is told who decided and why."""
    _decide(
        ctx, task_id, approval_id=approval_id, decision="reject", reason=reason, as_json=as_json
    )


def _decide(
    ctx: typer.Context,
    task_id: str,
    *,
    approval_id: str,
    decision: str,
    reason: str | None,
    as_json: bool,
) -> None:
    task_ref, approval_ref = parse_id(task_id), _parse_approval(approval_id)
    with tasks_for(ctx) as tasks:
        tid = resolve_id(tasks, task_ref)
        aid = resolve_approval(tasks, tid, approval_ref)
        result = tasks.decide_approval(str(tid), aid, decision, reason=reason)
    if as_json:
        print_json(result)
    else:
        out.print(decided_message(result), markup=False)


# -- printing ----------------------------------------------------------------------------------


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def arguments_text(arguments: object, n: int = ARGUMENTS_CHARS) -> str:
    """A call's arguments on one line, cut at ``n`` characters."""
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= n else text[: n - 1] + "…"


def _undated_year(when: str) -> str:
    """``2026-11-30 06:12:34`` → ``11-30 06:12:34`` (a time, when narrow)."""
    return when[5:] if len(when) == 19 else when


#: ``approvals ls``: ids and times whole; the tool folds; the arguments are one cut line.
#: Narrow, the times lose their year, then the redacted, arguments and requested columns go
#: (``--json`` has them).
_COLUMNS = (
    Col("task", "whole"),
    Col("approval", "whole"),
    Col("tool", shrink=1),
    Col("arguments", "cut", drop=2),
    Col("redacted", "whole", drop=1),
    Col("requested", "whole", short=_undated_year, shorten=0, drop=3),
    Col("expires", "whole", short=_undated_year, shorten=0),
)


def show_approvals(out: Console, views: list[View]) -> None:
    if not views:
        out.print("no approvals are waiting for a decision", markup=False)
        return
    rows = [
        (
            short(v["taskId"]),
            short(v["id"]),
            v["tool"],
            arguments_text(v["arguments"]),
            "yes" if v["redacted"] else "no",
            _when(v["requestedAt"]),
            _when(v["expiresAt"]),
        )
        for v in views
    ]
    out.print(fit(_COLUMNS, rows, out.width).table())


def decided_message(result: View) -> str:
    """``approval 1b2c… of task 9f8e…: approved by operator; the task resumes``."""
    a, task = result["approval"], result["task"]
    line = f"approval {a['id']} of task {task['id']}: {a['status']}"
    if a.get("decidedBy"):
        line += f" by {a['decidedBy']}"
    if a["status"] == "approved":
        line += "; the call runs once the task resumes"
    elif a["status"] == "rejected":
        line += "; the call will not run"
    return line
