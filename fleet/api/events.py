"""StreamTaskEvents: a task's events as Server-Sent Events, in the caller's scope like GetTask.

Each event's ``id`` is its position (``fleet.domain.events``): a client that reconnects with
``Last-Event-ID`` (browsers' EventSource do so on their own) gets every later event, once. A
stream ends after the task's ``end`` event, or after ``FLEET_EVENT_STREAM_MAX`` (the client
reconnects with its last id); comments keep quiet streams open through proxies.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from fleet import views
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.event_hub import EventHub, follow
from fleet.api.schemas import problem_responses
from fleet.api.tasks import _api_caller, _visible
from fleet.domain.events import Position
from fleet.errors import Unavailable

router = APIRouter(tags=["tasks"])

#: Milliseconds a browser's EventSource waits before it reconnects (the SSE ``retry`` field).
RETRY_MS = 1000
#: Seconds between keep-alive comments on a quiet stream.
PING_S = 15
#: Streams one API process serves at once (about 65 KiB each); more are refused with 503.
MAX_STREAMS = 10_000

_EVENTS_DOC = (
    "Server-Sent Events: `status` (queued, running, interrupted, and the final status), `step` "
    "(a finished model or tool call, as GetRun's steps), `inbox` (a message delivered into the "
    "running run), `reply`, then `end` (the task). Each `id` resumes the stream as "
    "`Last-Event-ID`."
)


def hub_of(request: Request) -> EventHub:
    hub: EventHub = request.app.state.event_hub
    return hub


def start_position(last_event_id: str | None, after: str | None) -> Position | None:
    """Where a stream starts: after ``Last-Event-ID`` (a reconnect), else after ``after``."""
    if last_event_id:
        return Position.parse(last_event_id)
    if after:
        return Position.parse(after, field="after")
    return None


def sse_response(
    hub: EventHub, task_id: uuid.UUID, after: Position | None, max_s: float
) -> EventSourceResponse:
    """The stream of one task's events (the caller was checked already); 503 when the process
    serves ``MAX_STREAMS`` already."""
    if hub.followers >= MAX_STREAMS:
        raise Unavailable(
            f"this server follows {hub.followers} task event streams already; retry later, "
            "or poll GetTask"
        )

    async def frames() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(retry=RETRY_MS, comment=f"task {task_id}")
        async for ev in follow(hub, task_id, after, max_s=max_s):
            data = json.dumps(views.event_json(ev), ensure_ascii=False, separators=(",", ":"))
            yield ServerSentEvent(data, event=ev.kind, id=ev.id)

    return EventSourceResponse(frames(), ping=PING_S, headers={"X-Accel-Buffering": "no"}, sep="\n")


_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": _EVENTS_DOC,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/v1/tasks/{id}/events",
    operation_id="StreamTaskEvents",
    response_class=EventSourceResponse,
    responses={**_STREAM, **problem_responses(401, 403, 404, 422, 503)},
    summary="Follow a task's events (Server-Sent Events)",
)
async def stream_task_events(
    request: Request,
    task_id: Annotated[uuid.UUID, Path(alias="id")],
    rt: RuntimeDep,
    caller: CallerDep,
    *,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The id of the last event received: the stream resumes after it.",
        ),
    ] = None,
    after: Annotated[
        str | None,
        Query(description="Start after this event id (`Last-Event-ID` wins when both are sent)."),
    ] = None,
) -> EventSourceResponse:
    caller = _api_caller(caller)
    position = start_position(last_event_id, after)
    task = await run_in_threadpool(_visible, rt, caller, task_id)
    return sse_response(hub_of(request), task.id, position, rt.settings.event_stream_max)
