"""fleet's tasks as A2A protocol messages (the a2a-sdk's protobuf types).

What the A2A routes answer (:mod:`fleet.api.a2a_handler`) and what reply delivery pushes to an
A2A caller's push-notification URL (:mod:`fleet.delivery`): one shape, below both. The pure
decisions (state names, metadata keys) are :mod:`fleet.domain.a2a`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from a2a.server.events.event_queue import Event
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from fleet import views
from fleet.domain import a2a as rules
from fleet.domain.deltas import Delta
from fleet.domain.events import TaskEvent
from fleet.domain.values import DataPart, TextPart
from fleet.domain.values import Task as FleetTask
from fleet.domain.values import TaskStatus as FleetStatus
from fleet.domain.waits import Wait

#: The data part key of an ``input-required`` status message: the approvals asked for (each as
#: GetTask's ``pendingApprovals`` shows it).
PENDING_APPROVALS = "pendingApprovals"


def _ts(when: datetime | None) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when or datetime.now(UTC))
    return stamp


def _struct(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(values)
    return out


def _part(part: TextPart | DataPart) -> Part:
    if isinstance(part, TextPart):
        return Part(text=part.text)
    value = struct_pb2.Value()
    value.struct_value.update(part.data)
    return Part(data=value)


def _agent_message(task: FleetTask, suffix: str, text: str) -> Message:
    return Message(
        message_id=f"{task.id}-{suffix}",
        context_id=task.key,
        task_id=str(task.id),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def _state(task: FleetTask) -> str:
    return "TASK_STATE_" + rules.state(task.status).upper()


def _asking(task: FleetTask, asked: Sequence[Wait]) -> TaskStatus:
    """The status of a task asking its caller to decide ``asked``: ``input-required`` with a
    message naming each call (text) and the approvals as GetTask shows them (data)."""
    data = struct_pb2.Value()
    data.struct_value.update({PENDING_APPROVALS: [views.approval_json(w) for w in asked]})
    message = Message(
        message_id=f"{task.id}-approval-{asked[-1].id}",
        context_id=task.key,
        task_id=str(task.id),
        role=Role.ROLE_AGENT,
        parts=[Part(text=rules.asking_text(asked)), Part(data=data)],
    )
    return TaskStatus(
        state=TaskState.TASK_STATE_INPUT_REQUIRED,
        timestamp=_ts(max(w.requested_at for w in asked)),
        message=message,
    )


def to_a2a(
    task: FleetTask,
    *,
    asked: Sequence[Wait] = (),
    waiting: Sequence[Wait] = (),
    history_length: int | None = None,
) -> Task:
    """Our task as an A2A task: state, reply as artifact and status message, input as history;
    ``asked``: the approvals it asks its caller for (:func:`fleet.domain.a2a.asking`), which
    make an unfinished task ``input-required`` (a pending approval means its task waits: the
    row read a moment before may say it still runs); ``waiting``: what a waiting task waits
    for, said in the ``working`` status's message (an event of a name and key, a pause…)."""
    if asked and not task.status.terminal:
        status = _asking(task, asked)
    else:
        status = TaskStatus(state=_state(task), timestamp=_ts(task.finished_at or task.started_at))
        if waiting and task.status == FleetStatus.WAITING:
            text = "; ".join(views.waiting_text(w) for w in waiting)
            status.message.CopyFrom(_agent_message(task, f"waiting-{waiting[-1].id}", text))
    artifacts: list[Artifact] = []
    history = [
        Message(
            message_id=task.idempotency_key or f"{task.id}-input",
            context_id=task.key,
            task_id=str(task.id),
            role=Role.ROLE_USER,
            parts=[_part(p) for p in task.input],
        )
    ]
    if task.status == FleetStatus.SUCCEEDED and task.reply is not None:
        reply = _agent_message(task, "reply", task.reply)
        status.message.CopyFrom(reply)
        artifacts.append(_reply_artifact(task))
        history.append(reply)
    elif task.error:
        status.message.CopyFrom(_agent_message(task, "error", task.error))
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length else []
    return Task(
        id=str(task.id),
        context_id=task.key,
        status=status,
        artifacts=artifacts,
        history=history,
        metadata=_struct(
            {
                "fleet.status": task.status.value,
                "fleet.conversation": task.conversation,
                "fleet.deployment": task.deployment,
                "fleet.seq": task.seq,
                "fleet.labels": task.labels,
            }
        ),
    )


def _reply_artifact(task: FleetTask) -> Artifact:
    return Artifact(artifact_id=f"{task.id}-reply", name="reply", parts=[Part(text=task.reply)])


def stream_events(ev: TaskEvent, asked: Sequence[Wait] = ()) -> list[Event]:
    """What a task event is on an A2A stream: ``working`` updates carrying fleet's event in
    their metadata (``fleet.event``, ``fleet.data``), the reply artifact, the final status;
    a ``waiting`` status event with ``asked`` (the approvals the task asks for now) is the
    ``input-required`` status."""
    task = ev.task
    if ev.kind == "reply":
        return [
            TaskArtifactUpdateEvent(
                task_id=str(task.id),
                context_id=task.key,
                artifact=_reply_artifact(task),
                last_chunk=True,
            )
        ]
    if ev.kind == "end" or (ev.kind == "status" and ev.status == FleetStatus.QUEUED):
        return []
    if ev.kind == "status" and ev.status is not None and ev.status.terminal:
        status = to_a2a(task).status
    elif ev.kind == "status" and ev.status == FleetStatus.WAITING and asked:
        status = _asking(task, asked)
    else:
        status = TaskStatus(state="TASK_STATE_WORKING", timestamp=_ts(ev.at))
    meta = {"fleet.event": ev.kind, "fleet.id": ev.id, "fleet.data": views.event_json(ev)}
    return [
        TaskStatusUpdateEvent(
            task_id=str(task.id), context_id=task.key, status=status, metadata=_struct(meta)
        )
    ]


class ReplyChunks:
    """The reply artifact as the model writes it, for one stream: each model step's text in
    appended chunks (``append``), the first chunk of a step or a reset replacing what was shown
    (a step that then called tools was not the reply); the final chunk (``lastChunk``) adds only
    what the streamed text lacks of the reply, or replaces it when it differs."""

    __slots__ = ("_shown", "_step")

    def __init__(self) -> None:
        self._step: tuple[int, int] | None = None
        self._shown = ""

    def delta(self, task_id: str, context_id: str, d: Delta) -> TaskArtifactUpdateEvent:
        fresh = d.reset or d.step_key != self._step
        self._step = d.step_key
        self._shown = d.text if fresh else self._shown + d.text
        return _chunk(task_id, context_id, d.text, append=not fresh, last=False)

    def reply(self, task: FleetTask) -> TaskArtifactUpdateEvent:
        text = task.reply or ""
        if self._step is not None and text.startswith(self._shown):
            return _chunk(str(task.id), task.key, text[len(self._shown) :], append=True, last=True)
        return _chunk(str(task.id), task.key, text, append=False, last=True)


def _chunk(
    task_id: str, context_id: str, text: str, *, append: bool, last: bool
) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=context_id,
        artifact=Artifact(artifact_id=f"{task_id}-reply", name="reply", parts=[Part(text=text)]),
        append=append,
        last_chunk=last,
    )


def asks(event: Event) -> bool:
    """Is this stream event the ``input-required`` status (where a stream stops)?"""
    return (
        isinstance(event, Task | TaskStatusUpdateEvent)
        and event.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    )


def to_a2a_json(task: FleetTask) -> dict[str, Any]:
    """:func:`to_a2a` in its JSON form: the body of a push notification."""
    return MessageToDict(to_a2a(task))
