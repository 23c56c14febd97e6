"""``fleet run``: submit a task and print the agent's reply (against the store or a server)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from fleet.cli.backends import tasks_for
from fleet.cli.common import EXIT_FAILED, err, fail, out, print_json
from fleet.cli.live import OnEvent, TextPrinter, printer
from fleet.domain.keys import blank
from fleet.domain.values import TaskStatus


def _watchers(
    live: bool | None, stream: bool | None, as_json: bool
) -> tuple[OnEvent | None, TextPrinter | None]:
    """The live view (steps on stderr) and the reply's text as it is written (stdout), each
    on when asked, else when its stream is a terminal (never with ``--json``)."""
    if live is None:
        live = err.is_terminal and not as_json
    on_event = printer(err) if live else None
    streamed = (out.is_terminal if stream is None else stream) and not as_json
    return on_event, TextPrinter(out.file, err, on_event) if streamed else None


def run(
    ctx: typer.Context,
    deployment: Annotated[
        str, typer.Argument(help="Deployment to run (a file in config/deployments).")
    ],
    text: Annotated[str, typer.Argument(help="The input for the agent ('-' reads stdin).")],
    *,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", "-c", help="Conversation key: the same key continues it."),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="A label key=value (repeatable).")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Repeats with this key create nothing.")
    ] = None,
    delivery: Annotated[
        str | None,
        typer.Option(
            "--delivery",
            help="If the conversation is busy: followup, collect, steer or interrupt "
            "(instead of the deployment's queue mode).",
        ),
    ] = None,
    resource: Annotated[
        str | None,
        typer.Option("--resource", help="Who the task is about across conversations (recall)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task record as JSON.")] = False,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="Print the task and exit; do not wait for it.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.0, help="Seconds to wait for the result.")
    ] = 300.0,
    live: Annotated[
        bool | None,
        typer.Option(
            "--live/--no-live",
            help="Show each step on stderr while waiting (default: when stderr is a terminal "
            "and not --json).",
        ),
    ] = None,
    stream: Annotated[
        bool | None,
        typer.Option(
            "--stream/--no-stream",
            help="Print the reply as the model writes it (default: when stdout is a terminal "
            "and not --json); --no-stream waits for it.",
        ),
    ] = None,
) -> None:
    """Submit a task and print the agent's reply."""
    from fleet.domain.labels import parse_label_args

    labels = parse_label_args(label or [])
    if conversation is not None and blank(conversation):  # not "no key": a new one each time
        fail(
            f"--conversation {conversation!r} is {'empty' if conversation == '' else 'blank'}: "
            "give the key, or leave the option out for a new one"
        )
    if text == "-":
        text = sys.stdin.read()
    with tasks_for(ctx) as tasks:
        admitted = tasks.submit(
            deployment,
            text,
            conversation_key=conversation,
            labels=labels,
            idempotency_key=idempotency_key,
            delivery=delivery,
            resource_id=resource,
        )
        if admitted.get("deliveredTo") == "run" and not as_json:
            err.print(
                f"fleet: steered into running task {admitted['id']}: your message joins its "
                "run at its next step",
                markup=False,
            )
        if admitted.get("notice") and not as_json:
            err.print(f"fleet: {admitted['notice']}", markup=False)  # fresh after a delete
        on_event, writer = _watchers(live, stream, as_json)
        shown = writer if writer is not None else on_event
        task = admitted if no_wait else tasks.follow(admitted["id"], timeout, err, shown)
        late = None if no_wait or TaskStatus(task["status"]).terminal else task["status"]
        if late is not None:
            ended = tasks.give_up(task["id"])  # embedded: cancelled, as nothing else runs it
            if ended is not None:
                task = ended
    status = TaskStatus(task["status"])
    if late is not None and status == TaskStatus.CANCELLED:
        if as_json:
            print_json(admitted | task)
        else:
            err.print(
                f"fleet: task {task['id']} is still {late} after {timeout:g}s; cancelled it "
                "(embedded, nothing runs it once this command exits)",
                markup=False,
            )
        raise typer.Exit(EXIT_FAILED)
    if as_json:
        print_json(admitted | task)
    elif no_wait or not status.terminal:
        out.print(f"{task['id']} {status.value} {task['conversation']} #{task['seq']}")
    elif (
        writer is not None and status == TaskStatus.SUCCEEDED and writer.finish(task["reply"] or "")
    ):
        pass  # printed as the model wrote it
    elif status == TaskStatus.SUCCEEDED:
        out.print(task["reply"] or "", markup=False)
    elif status == TaskStatus.SUPERSEDED:
        out.print(task["reply"] or "", markup=False)
        err.print(f"fleet: task {task['id']} was interrupted by a newer message", markup=False)
    if status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        if not as_json:
            err.print(f"fleet: task {task['id']} {status.value}: {task['error']}", markup=False)
        raise typer.Exit(EXIT_FAILED)
    if not no_wait and not status.terminal:
        if not as_json:
            err.print(f"fleet: task {task['id']} is still {status.value} after {timeout:g}s")
        raise typer.Exit(EXIT_FAILED)
