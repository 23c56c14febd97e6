"""``fleet tasks retry|cancel`` with filters: a bulk job over the tasks they name (against the
store as the operator, or a server with ``--server`` as the key's caller). A dry run counts and
lists; beyond a handful of tasks ``--yes`` is needed."""

from __future__ import annotations

import re
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from fleet.cli.audited import refine
from fleet.cli.backends import Tasks
from fleet.cli.common import fail, out, print_json
from fleet.config.base import parse_duration
from fleet.domain import bulk as rules
from fleet.domain import error_classes

View = dict[str, Any]
#: How long the CLI follows a server's job before it leaves it running (it goes on there).
FOLLOW_S = 600.0
_POLL_S = 0.5

Status = Annotated[
    list[str] | None,
    typer.Option("--status", help="Only tasks of this status (repeat for several)."),
]
Tenant = Annotated[str | None, typer.Option("--tenant", help="Only this tenant's (operators).")]
Deployment = Annotated[
    str | None, typer.Option("--deployment", "-d", help="Only this deployment's.")
]
Since = Annotated[
    str | None,
    typer.Option("--since", help="Created at or after: a time (ISO) or an age (2h, 1d)."),
]
Until = Annotated[
    str | None, typer.Option("--until", help="Created before: a time (ISO) or an age (30m).")
]
Label = Annotated[
    list[str] | None, typer.Option("--label", help="Only tasks with label k=v (repeatable).")
]
ErrorClass = Annotated[
    str | None,
    typer.Option(
        "--error-class", help="Only tasks that failed so: " + ", ".join(error_classes.CLASSES)
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Count and list; change nothing.")]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help=f"Do it without asking (beyond {rules.HANDFUL} tasks).")
]
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}")


def when(value: str | None, flag: str) -> str | None:
    """``--since``/``--until`` as the filter's ISO time: a time as given (UTC when it names no
    offset), or an age before now."""
    if value is None:
        return None
    if _ISO.match(value):
        try:
            found = datetime.fromisoformat(value)
        except ValueError:
            fail(f"{flag} {value!r} is not a time (2026-12-07T09:00:00Z) or an age (2h)")
        return (found if found.tzinfo else found.replace(tzinfo=UTC)).isoformat()
    try:
        age = parse_duration(value)
    except ValueError:
        fail(f"{flag} {value!r} is not a time (2026-12-07T09:00:00Z) or an age (2h)")
    return (datetime.now(UTC) - timedelta(seconds=age)).isoformat()


def request(
    action: rules.Action,
    *,
    status: list[str] | None,
    tenant: str | None,
    deployment: str | None,
    since: str | None,
    until: str | None,
    labels: list[str] | None,
    error_class: str | None,
    everything: bool = False,
) -> View:
    """BulkTasks' body, checked here first (a bad filter exits 2 before any store or server)."""
    raw: View = {
        "status": status or None,
        "tenant": tenant,
        "deployment": deployment,
        "since": when(since, "--since"),
        "until": when(until, "--until"),
        "labels": labels or None,
        "errorClass": error_class,
    }
    found = {k: v for k, v in raw.items() if v is not None}
    checked = rules.parse_filter(found, action, everything=everything)  # InputError: exit 2
    if checked.labels:
        found["labels"] = checked.labels  # (as the server takes them: an object)
    return {"action": action, "filter": found, "all": everything}


def run(tasks: Tasks, body: View, *, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Count first; then, unless a dry run, the job (asking beyond a handful), followed to
    its end."""
    counted = tasks.bulk({**body, "dryRun": True})
    action = body["action"]
    if dry_run:
        if as_json:
            print_json(counted)
            return
        out.print(f"{counted['matched']} task(s) would be {_done(action)}", markup=False)
        for task_id in counted["sample"]:
            out.print(f"  {task_id}", markup=False)
        if counted["matched"] > len(counted["sample"]):
            out.print(f"  … and {counted['matched'] - len(counted['sample'])} more", markup=False)
        return
    matched = counted["matched"]
    if matched > rules.HANDFUL and not yes:
        if not sys.stdin.isatty():
            fail(f"{matched} tasks match: add --yes to {action} them (or --dry-run to list them)")
        if not typer.confirm(f"{action} {matched} tasks?"):
            fail("nothing done")
    job = tasks.bulk({**body, "idempotencyKey": f"cli-{uuid.uuid4().hex}"})
    refine(object=f"bulk:{job['id']}", detail={"bulk": action})
    deadline = time.monotonic() + FOLLOW_S
    while job["status"] == "running" and time.monotonic() < deadline:
        time.sleep(_POLL_S)  # a server's job: its progress, read every half second
        job = tasks.bulk_job(job["id"])
    if as_json:
        print_json(job)
        return
    out.print(job_message(job), markup=False)


def _done(action: str) -> str:
    return "retried" if action == "retry" else "cancelled"


def job_message(job: View) -> str:
    """``retried 37 of 40 task(s); 3 failed (first: …); job 1b2c…``."""
    line = f"{_done(job['action'])} {job['done']} of {job['matched']} task(s)"
    if job["failed"]:
        first = job["errors"][0] if job["errors"] else {}
        line += f"; {job['failed']} failed (first: {first.get('taskId')}: {first.get('error')})"
    if job["status"] == "running":
        line += " so far; it goes on on the server"
    return f"{line}; job {job['id']}"


__all__ = ["request", "run"]
