"""``fleet tasks``: show, list and cancel tasks (against the store or a server), and how a
task prints."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.cli import bulk
from fleet.cli.audited import audited
from fleet.cli.backends import Tasks, tasks_for
from fleet.cli.common import AsJson, OnlyDeployment, answer, fail, out, print_json
from fleet.cli.runs import fetch_runs, show_context, show_runs, show_trace
from fleet.cli.tables import Col, print_table
from fleet.domain.ids import IdPrefix, parse_ref, short
from fleet.domain.values import TaskStatus
from fleet.errors import InputError, NotFound

View = dict[str, Any]

#: An ambiguous id prefix lists at most this many of the ids it matches.
AMBIGUOUS_SHOWN = 10
#: ``tasks ls`` shows at most this many characters of a reply or error.
SUMMARY_CHARS = 60

tasks_app = typer.Typer(help="Inspect, cancel and retry tasks.", no_args_is_help=True)

TaskRef = Annotated[
    str, typer.Argument(help="Task id, or a unique prefix of it (at least 6 hex characters).")
]


def parse_id(value: str) -> uuid.UUID | IdPrefix:
    """A whole id, or a prefix of at least 6 hex digits (checked before any store or server)."""
    try:
        return parse_ref(value)
    except InputError as exc:
        fail(exc.message)


def resolve_id(tasks: Tasks, ref: uuid.UUID | IdPrefix) -> uuid.UUID:
    """The one task id ``ref`` names: a whole id as is, a prefix when exactly one id has it."""
    if isinstance(ref, uuid.UUID):
        return ref
    found = tasks.find(ref, AMBIGUOUS_SHOWN + 1)
    if not found:
        raise NotFound(f"no task with an id starting {ref.typed!r}", field="id")
    if len(found) > 1:
        listed = ", ".join(found[:AMBIGUOUS_SHOWN])
        more = " and more" if len(found) > AMBIGUOUS_SHOWN else ""
        raise InputError(
            f"task id prefix {ref.typed!r} is ambiguous: it matches {listed}{more}; "
            "give more characters",
            field="id",
        )
    return uuid.UUID(found[0])


# -- commands ----------------------------------------------------------------------------------


@tasks_app.command("show")
def tasks_show(
    ctx: typer.Context,
    task_id: TaskRef,
    as_json: AsJson = False,
    context: Annotated[
        bool, typer.Option("--context", help="Each run's context: injected and dropped messages.")
    ] = False,
    trace: Annotated[
        bool, typer.Option("--trace", help="Each run's model and tool calls.")
    ] = False,
) -> None:
    """Show one task and its runs."""
    ref = parse_id(task_id)
    with tasks_for(ctx) as tasks:
        task = tasks.show(resolve_id(tasks, ref))
        runs = None
        if context or trace or not as_json:
            runs = fetch_runs(tasks, task["id"], steps=trace, messages=context and as_json)
    if as_json:
        print_json(task if runs is None else {**task, "runs": runs})
    else:
        show_task(out, task)
        show_runs(out, runs or [])
        if context:
            show_context(out, runs or [])
        if trace:
            show_trace(out, runs or [])


@tasks_app.command("ls")
def tasks_ls(
    ctx: typer.Context,
    *,
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Only this conversation key.")
    ] = None,
    deployment: OnlyDeployment = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only tasks in this status.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    as_json: AsJson = False,
) -> None:
    """List tasks, oldest first (the newest LIMIT)."""
    st: TaskStatus | None = None
    if status is not None:
        try:
            st = TaskStatus(status)
        except ValueError:
            fail(f"--status {status!r} is not one of {', '.join(s.value for s in TaskStatus)}")
    answer(
        tasks_for(ctx),
        lambda tasks: tasks.list_tasks(
            conversation_key=conversation,
            deployment=deployment,
            status=None if st is None else st.value,
            limit=limit,
        ),
        as_json,
        lambda found: show_task_list(out, found),
    )


@tasks_app.command("cancel")
@audited(lambda o: "task.cancel" if o.get("task_id") else "bulk.start", names="task_id")
def tasks_cancel(
    ctx: typer.Context,
    task_id: Annotated[
        str | None,
        typer.Argument(help="Task id or unique prefix; or name the tasks by filters instead."),
    ] = None,
    *,
    status: bulk.Status = None,
    tenant: bulk.Tenant = None,
    deployment: bulk.Deployment = None,
    since: bulk.Since = None,
    until: bulk.Until = None,
    label: bulk.Label = None,
    error_class: bulk.ErrorClass = None,
    everything: Annotated[
        bool, typer.Option("--all", help="With no filter: every unfinished task.")
    ] = False,
    dry_run: bulk.DryRun = False,
    yes: bulk.Yes = False,
    as_json: AsJson = False,
) -> None:
    """Cancel a task (a queued one at once, a running one at its next step boundary), or
    every task the filters name."""
    filters = (status, tenant, deployment, since, until, label, error_class)
    if task_id is not None:
        if any(filters) or everything or dry_run:
            fail("give a task id or filters, not both")
        ref = parse_id(task_id)
        answer(
            tasks_for(ctx),
            lambda tasks: tasks.cancel(str(resolve_id(tasks, ref))),
            as_json,
            lambda result: out.print(cancel_message(result), markup=False),
        )
        return
    body = bulk.request(
        "cancel",
        status=status,
        tenant=tenant,
        deployment=deployment,
        since=since,
        until=until,
        labels=label,
        error_class=error_class,
        everything=everything,
    )
    with tasks_for(ctx) as tasks:
        bulk.run(tasks, body, dry_run=dry_run, yes=yes, as_json=as_json)


@tasks_app.command("retry")
@audited("bulk.start")
def tasks_retry(
    ctx: typer.Context,
    *,
    status: bulk.Status = None,
    tenant: bulk.Tenant = None,
    deployment: bulk.Deployment = None,
    since: bulk.Since = None,
    until: bulk.Until = None,
    label: bulk.Label = None,
    error_class: bulk.ErrorClass = None,
    dry_run: bulk.DryRun = False,
    yes: bulk.Yes = False,
    as_json: AsJson = False,
) -> None:
    """Retry the failed tasks the filters name: each a new task with the same input on the
    same conversation, queued behind what is there now (so it answers after newer turns),
    labelled retry_of=<id>."""
    body = bulk.request(
        "retry",
        status=status,
        tenant=tenant,
        deployment=deployment,
        since=since,
        until=until,
        labels=label,
        error_class=error_class,
    )
    with tasks_for(ctx) as tasks:
        bulk.run(tasks, body, dry_run=dry_run, yes=yes, as_json=as_json)


# -- printing ----------------------------------------------------------------------------------


def _when(value: str | None) -> str:
    """``2024-05-01T10:00:00.123456Z`` → ``2024-05-01 10:00:00``."""
    return value[:19].replace("T", " ") if value else "-"


def _input_text(view: View) -> str:
    return "\n".join(
        p["text"] if p.get("type") == "text" else json.dumps(p.get("data")) for p in view["input"]
    )


def show_task(out: Console, view: View) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("id", view["id"]),
        ("deployment", view["deployment"]),
        ("conversation", view["conversation"]),
        ("seq", view["seq"]),
        ("status", view["status"]),
        ("attempts", f"{view['attempts']}/{view['maxAttempts']}"),
        ("created", _when(view["createdAt"])),
        ("started", _when(view["startedAt"])),
        ("finished", _when(view["finishedAt"])),
        ("labels", ", ".join(f"{k}={v}" for k, v in view["labels"].items()) or "-"),
        ("input", _input_text(view)),
    ]
    if view["reply"] is not None:
        rows.append(("reply", view["reply"]))
    if view["error"]:
        rows.append(("error", view["error"]))
    for d in view.get("deliveries") or ():
        rows.append(("delivery", _delivery_line(d)))
    for a in view.get("pendingApprovals") or ():
        rows.append(("approval", _approval_line(a)))
    for w in view.get("waitingFor") or ():
        if w["kind"] != "approval":  # (approvals: their own lines, with their ids)
            rows.append(("waits", w["text"]))
    for k, v in rows:
        table.add_row(k, Text(str(v)))  # Text: user text is never read as Rich markup
    out.print(table)


def _approval_line(a: View) -> str:
    """``1b2c3d4e-…  refund {"amount": 20}  expires 2026-12-03 09:00:00`` (``fleet approvals
    approve|reject TASK APPROVAL`` decides it)."""
    args = json.dumps(a["arguments"], ensure_ascii=False, sort_keys=True)
    redacted = " (redacted)" if a.get("redacted") else ""
    return f"{a['id']}  {a['tool']} {args}{redacted}  expires {_when(a['expiresAt'])}"


def _delivery_line(d: View) -> str:
    """``sent  reply:triggers/github  https://…  2/5 attempts`` and each attempt's outcome."""
    line = f"{d['status']}  {d['target']}  {d['url'] or '-'}  {d['attempts']}/{d['maxAttempts']}"
    if d.get("nextAttemptAt"):
        line += f"  next {_when(d['nextAttemptAt'])}"
    for a in d.get("journal") or ():
        code, error, detail = a.get("httpStatus"), a.get("error"), a.get("detail")
        status = f" (HTTP {code})" if code else ""
        line += f"\n  #{a.get('attempt')} {_when(a.get('at'))} {a.get('outcome')}"
        if a.get("outcome") == "sent" or not (error or detail):
            line += status
        elif error:  # what failed first: ``HTTP 500 from https://…: <the answer>``
            line += f": {error}"
        else:  # (journaled before errors said what failed)
            line += f"{status}: {detail}"
    return line


def _summary(view: View) -> str:
    """The reply (or error) on one line, cut at ``SUMMARY_CHARS``: ``tasks show`` has it whole."""
    text = view["reply"] if view["reply"] is not None else view["error"] or ""
    return " ".join(text.split())[:SUMMARY_CHARS]


def _undated_year(when: str) -> str:
    """``2026-11-30 06:12:34`` → ``11-30 06:12:34`` (the list's created time, when narrow)."""
    return when[5:] if len(when) == 19 else when


#: ``tasks ls``: ids, seqs, statuses and times whole; keys give way after the summary (cut).
#: Narrow, the created time loses its year, then the deployment and the summary columns go.
_LIST_COLUMNS = (
    Col("id", "whole"),
    Col("deployment", shrink=1, drop=1),
    Col("conversation", shrink=1),
    Col("seq", "whole", justify="right"),
    Col("status", "whole"),
    Col("created", "whole", short=_undated_year, shorten=0, drop=3),
    Col("reply/error", "cut", drop=2),
)


def show_task_list(out: Console, views: list[View]) -> None:
    """Ids, seqs, statuses and times whole, the summary cut before keys are; a value too long
    ends in "…" on a terminal (a pipe has every value whole); never a header split (columns go
    first: ``tasks show`` and ``--json`` have them)."""
    rows = [
        (
            short(v["id"]),
            v["deployment"],
            v["conversation"],
            str(v["seq"]),
            v["status"],
            _when(v["createdAt"]),
            _summary(v),
        )
        for v in views
    ]
    print_table(out, _LIST_COLUMNS, rows)


CANCEL_MESSAGES = {
    "cancelled": "cancelled",
    "requested": "cancel requested: it stops at its next step boundary",
}


def cancel_message(result: View) -> str:
    task = result["task"]
    text = CANCEL_MESSAGES.get(result["effect"], f"already {task['status']}; nothing to cancel")
    return f"{task['id']}: {text}"
