"""StreamTaskEvents: a task's events as Server-Sent Events, in the caller's scope like GetTask.

Each event's ``id`` is its position (``fleet.domain.events``): a client that reconnects with
``Last-Event-ID`` (browsers' EventSource do so on their own) gets every later event, once. A
stream ends after the task's ``end`` event, or after ``FLEET_EVENT_STREAM_MAX`` (the client
reconnects with its last id); comments keep quiet streams open through proxies.

``EventStream`` is the response: it sends from the request's own task and listens for the
client's disconnect in one more, with nothing else per idle stream (a keep-alive is a timer
handle). sse-starlette's EventSourceResponse ran four tasks under an anyio task group per
stream: about 330 objects the garbage collector tracks, which every full pass walked again (at
1,000 idle streams the passes SubmitTask's requests trigger took ~0.3 s each).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fleet import views
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.event_hub import EventHub, Follower
from fleet.api.event_stream import updates
from fleet.api.schemas import problem_responses
from fleet.api.tasks import _api_caller, _visible
from fleet.config import Settings
from fleet.domain.deltas import Delta
from fleet.domain.events import Position, TaskEvent
from fleet.errors import Unavailable

router = APIRouter(tags=["tasks"])

#: Milliseconds a browser's EventSource waits before it reconnects (the SSE ``retry`` field).
RETRY_MS = 1000
#: The keep-alive comment (the same bytes every time: nothing to format).
KEEPALIVE = b": ping\n\n"
#: The scope key of ``StreamHandoff``'s slot for the stream the route answers with.
HANDOFF = "fleet.event_stream"
#: Streams one API process serves at once (about 20 KiB each); more are refused with 503.
MAX_STREAMS = 10_000

_EVENTS_DOC = (
    "Server-Sent Events: `status` (queued, running, interrupted, and the final status), `delta` "
    "(a piece of a model step's text as the model writes it; `reset` voids the step's text "
    "before it), `step` (a finished model or tool call, as GetRun's steps: it stands for its "
    "deltas), `inbox` (a message delivered into the running run), `reply`, then `end` (the "
    "task). Each `id` resumes the stream as `Last-Event-ID`."
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


class EventStream(Response):
    """A task's events as Server-Sent Events: a ``retry`` field first, then each event, a
    comment after at most ``beat_s`` quiet seconds, and the end of the body when the task ends,
    after ``max_s``, when the client goes away or when the server shuts down."""

    media_type = "text/event-stream"

    def __init__(
        self,
        hub: EventHub,
        task_id: uuid.UUID,
        after: Position | None,
        max_s: float,
        beat_s: float,
    ) -> None:
        self.hub, self.task_id, self.after, self.max_s = hub, task_id, after, max_s
        self.beat_s = beat_s
        self.status_code = 200
        self.background = None
        self.init_headers(
            {"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        slot = scope.get(HANDOFF)
        if slot is not None:  # ``StreamHandoff`` streams it, once the route has returned
            slot.append(self)
            return
        await self.stream(scope.get("method", "GET"), receive, send)

    async def stream(self, method: str, receive: Receive, send: Send) -> None:
        """Send the stream (``method`` HEAD: the headers only)."""
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        if method == "HEAD":  # the headers only: a stream would never end
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        follower = Follower()
        listener = asyncio.get_running_loop().create_task(_until_disconnect(receive, follower))
        try:
            await _body(send, _frame(retry=RETRY_MS, comment=f"task {self.task_id}"))
            stream = updates(
                self.hub,
                self.task_id,
                self.after,
                max_s=self.max_s,
                beat_s=self.beat_s,
                follower=follower,
            )
            async for ev in stream:
                chunk = KEEPALIVE if ev is None else _event_frame(ev)
                del ev  # an idle stream holds no event (its task's rows, some 7 KiB)
                await _body(send, chunk)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            listener.cancel()


class StreamHandoff:
    """ASGI middleware, outside the routing: a task event stream is sent from here, after the
    route that checked the caller and built it has returned.

    The route's ``EventStream`` finds this request's slot in the scope and leaves itself there
    instead of streaming; once the app returns (FastAPI's dependencies and exit stacks closed,
    Starlette's routing and middleware frames gone), this drops what they left in the scope and
    streams. An idle stream then holds this frame, its own and the disconnect listener rather
    than the request's whole path through the app: about 20 KiB a stream, not 31.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _streams(scope):
            await self.app(scope, receive, send)
            return
        before = set(scope)
        slot: list[EventStream] = []
        scope[HANDOFF] = slot
        await self.app(scope, receive, send)
        if not slot:  # another answer (a problem, a HEAD of another route): sent already
            return
        stream = slot.pop()
        method = scope["method"]
        for key in set(scope) - before:  # the routing's and FastAPI's (its exit stacks)
            del scope[key]
        await stream.stream(method, receive, send)


def _streams(scope: Scope) -> bool:
    """A task event stream's request (``GET|HEAD …/tasks/{id}/events``), not SendEvent's
    ``POST /v1/events`` or any other path ending in ``/events``."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
        return False
    path: str = scope["path"]
    return path.endswith("/events") and "/tasks/" in path


def _event_frame(ev: TaskEvent | Delta) -> bytes:
    shown = views.delta_json(ev) if isinstance(ev, Delta) else views.event_json(ev)
    data = json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
    return _frame(data, event=ev.kind, id=ev.id)


def _frame(data: str | None = None, **fields: Any) -> bytes:
    return ServerSentEvent(data, sep="\n", **fields).encode()


async def _body(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _until_disconnect(receive: Receive, follower: Follower) -> None:
    """Close ``follower`` once the client has gone away (the request's body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    follower.close()


def sse_response(
    hub: EventHub, task_id: uuid.UUID, after: Position | None, settings: Settings
) -> EventStream:
    """The stream of one task's events (the caller was checked already); 503 when the process
    serves ``MAX_STREAMS`` already."""
    if hub.followers >= MAX_STREAMS:
        raise Unavailable(
            f"this server follows {hub.followers} task event streams already; retry later, "
            "or poll GetTask"
        )
    return EventStream(hub, task_id, after, settings.event_stream_max, settings.event_keepalive)


_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": _EVENTS_DOC,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/v1/tasks/{id}/events",
    operation_id="StreamTaskEvents",
    response_class=EventStream,
    status_code=200,
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
) -> EventStream:
    caller = _api_caller(caller)
    position = start_position(last_event_id, after)
    task = await run_in_threadpool(_visible, rt, caller, task_id)
    return sse_response(hub_of(request), task.id, position, rt.settings)
