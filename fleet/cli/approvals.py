"""``fleet approvals``: list the tool calls waiting for a person's approval, approve or reject
one (against the store as the operator, or a server with ``--server`` as the key's caller)."""

from __future__ import annotations

import json
import uuid
from typing import Annotated

import typer
from rich.console import Console

from fleet.cli.audited import audited
from fleet.cli.backends import Tasks, tasks_for
from fleet.cli.common import AsJson, answer, fail, out, print_json
from fleet.cli.tasks import AMBIGUOUS_SHOWN, TaskRef, parse_id
from fleet.domain.ids import IdPrefix, parse_ref, short
from fleet.domain.waits import MAX_REASON
from fleet.errors import InputError, NotFound
from fleet.sdk.backends import View

#: The most pending approvals a prefix is looked up among (ListApprovals' own maximum).
MAX_PENDING_LISTED = 1000

approvals_app = typer.Typer(
    help="Tool calls waiting for a person's approval: list, show, approve, reject.",
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


def find_approval(tasks: Tasks, task: uuid.UUID | IdPrefix, ref: uuid.UUID | IdPrefix) -> View:
    """The pending approval ``task`` and ``ref`` name (whole ids, or prefixes unique among the
    approvals this key may decide: ListApprovals, so an operator's reach and no other
    tenant's tasks)."""
    found = tasks.list_approvals(task_id_prefix=task.hex, limit=MAX_PENDING_LISTED)
    task_ids = list(dict.fromkeys(str(a["taskId"]) for a in found))
    if isinstance(task, IdPrefix):
        if not task_ids:
            raise NotFound(
                f"no task with an id starting {task.typed!r} waits for an approval this key "
                "may decide; see `fleet approvals ls`",
                field="id",
            )
        if len(task_ids) > 1:
            listed = ", ".join(task_ids[:AMBIGUOUS_SHOWN])
            more = " and more" if len(task_ids) > AMBIGUOUS_SHOWN else ""
            raise InputError(
                f"task id prefix {task.typed!r} is ambiguous: it matches {listed}{more}; "
                "give more characters",
                field="id",
            )
    task_id = task_ids[0] if task_ids else str(task)
    mine = [a for a in found if a["id"].replace("-", "").startswith(ref.hex)]
    if not mine:
        shown = str(ref) if isinstance(ref, uuid.UUID) else f"an id starting {ref.typed!r}"
        raise NotFound(f"task {task_id} has no pending approval with {shown}", field="approvalId")
    if len(mine) > 1 and isinstance(ref, IdPrefix):  # (a whole id matches one at most)
        listed = ", ".join(a["id"] for a in mine[:AMBIGUOUS_SHOWN])
        raise InputError(
            f"approval id prefix {ref.typed!r} is ambiguous: it matches {listed}; "
            "give more characters",
            field="approvalId",
        )
    return mine[0]


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
@audited("approval.decide", names="task_id", detail={"decision": "approve"})
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
@audited("approval.decide", names="task_id", detail={"decision": "reject"})
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


@approvals_app.command("show")
def approvals_show(
    ctx: typer.Context, task_id: TaskRef, approval_id: ApprovalRef, as_json: AsJson = False
) -> None:
    """Show one pending approval: the call's whole arguments, its tool and its deadline."""
    task_ref, approval_ref = parse_id(task_id), _parse_approval(approval_id)
    answer(
        tasks_for(ctx),
        lambda tasks: find_approval(tasks, task_ref, approval_ref),
        as_json,
        lambda found: show_approval(out, found),
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
        if isinstance(task_ref, uuid.UUID) and isinstance(approval_ref, uuid.UUID):
            tid, aid = str(task_ref), str(approval_ref)  # (the server says if it is not pending)
        else:
            found = find_approval(tasks, task_ref, approval_ref)
            tid, aid = str(found["taskId"]), str(found["id"])
        result = tasks.decide_approval(tid, aid, decision, reason=reason)
    if as_json:
        print_json(result)
    else:
        out.print(decided_message(result), markup=False)


# -- printing ----------------------------------------------------------------------------------


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


def arguments_text(arguments: object, *, indent: int | None = None) -> str:
    """A call's arguments, whole: on one line, or ``indent``-ed over several."""
    if indent is None:
        return json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True, indent=indent)


def _redacted(view: View) -> str:
    return " (secrets in them redacted)" if view["redacted"] else ""


def show_approvals(out: Console, views: list[View]) -> None:
    """One block per approval: its ids, tool and times, then the call's arguments whole (a
    terminal wraps a long line; a pipe gets it on one)."""
    if not views:
        out.print("no approvals are waiting for a decision", markup=False)
        return
    for n, v in enumerate(views):
        out.print(
            ("\n" if n else "")
            + f"task {short(v['taskId'])}  approval {short(v['id'])}  tool {v['tool']}\n"
            f"  requested {_when(v['requestedAt'])}  expires {_when(v['expiresAt'])}\n"
            f"  arguments{_redacted(v)} {arguments_text(v['arguments'])}",
            markup=False,
            crop=False,
        )


def show_approval(out: Console, v: View) -> None:
    """One approval, its arguments as indented JSON."""
    arguments = arguments_text(v["arguments"], indent=2).replace("\n", "\n  ")
    out.print(
        f"approval   {v['id']}\n"
        f"task       {v['taskId']}\n"
        f"tool       {v['tool']}\n"
        f"status     {v['status']}\n"
        f"requested  {_when(v['requestedAt'])}\n"
        f"expires    {_when(v['expiresAt'])}\n"
        f"arguments{_redacted(v)}\n  {arguments}",
        markup=False,
        crop=False,
    )


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
