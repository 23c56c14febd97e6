"""``fleet events send``: hand the fleet an event from outside (a payment cleared, a job done);
the runs waiting for its name and key (``wait_for_event``) resume with its data. Against the
store as the operator (every scope of ``--tenant``), or a server with ``--server`` as the key's
caller (its tenant and scope)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from fleet.cli.audited import audited
from fleet.cli.backends import tasks_for
from fleet.cli.common import AsJson, fail, out, print_json
from fleet.sdk.backends import View

events_app = typer.Typer(
    help="Events from outside that waiting runs resume on (wait_for_event).",
    no_args_is_help=True,
)


def _data(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(
            f"--data is not JSON ({exc.msg} at character {exc.pos}): give a JSON value, e.g. "
            "'{\"amount\": 20}'"
        )


def sent_message(view: View) -> str:
    """``event payment.cleared (key o-1, id 7f…): resolved 2 waits`` or ``…: seen before``."""
    head = f"event {view['event']} (key {view['key']}, id {view['id']})"
    if view["duplicate"]:
        return f"{head}: seen before; nothing changed"
    n = view["resolved"]
    waits = "1 wait" if n == 1 else f"{n} waits"
    return f"{head}: resolved {waits}; kept for waits that start within the lookback window"


@events_app.command("send")
@audited("event.send", names="event")
def send(
    ctx: typer.Context,
    event: Annotated[str, typer.Argument(help="The event's name: payment.cleared, ci.finished.")],
    *,
    key: Annotated[str, typer.Option("--key", help="Which one it is about (an order id).")],
    data: Annotated[
        str | None, typer.Option("--data", help="Its data, a JSON value (outside data to runs).")
    ] = None,
    event_id: Annotated[
        str | None,
        typer.Option("--id", help="Your id of it, unique in the tenant: a repeat changes nothing."),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="The tenant it is for (operators; default: default)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Send an event: every run waiting for its name and key resumes with its data."""
    value = _data(data)
    with tasks_for(ctx) as api:
        sent = api.send_event(event, key, value, event_id=event_id, tenant=tenant)
    if as_json:
        print_json(sent)
    else:
        out.print(sent_message(sent), markup=False)
