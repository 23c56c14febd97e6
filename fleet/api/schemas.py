"""Request and response bodies of the task API (camelCase on the wire, unknown fields refused).

Responses are built by :mod:`fleet.views` (one JSON shape for the CLI and the API); the models
here document that shape in ``/openapi.json`` and a unit test checks that the two agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from fleet.constants import MAX_PRIORITY
from fleet.domain import keys
from fleet.domain.error_classes import ErrorClass
from fleet.domain.values import DataPart, TaskStatus, TextPart
from fleet.domain.waits import MAX_REASON


class _Camel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class TextPartModel(_Camel, TextPart):
    """A piece of text for the agent."""


class DataPartModel(_Camel, DataPart):
    """A JSON object for the agent (rendered to it as sorted JSON)."""


PartModel = Annotated[TextPartModel | DataPartModel, Field(discriminator="type")]
_PARTS: TypeAdapter[list[TextPartModel | DataPartModel]] = TypeAdapter(list[PartModel])


def _input(value: Any) -> Any:
    """Text, or parts; errors name the part (``input part 0.text: Field required``)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError(
            f"must be text or a list of parts, not {type(value).__name__}; a part is "
            '{"type": "text", "text": "…"} or {"type": "data", "data": {…}}'
        )
    try:
        return _PARTS.validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = err["loc"]
        # (index, tag, field…): the tag is the part's own "type", already named by the index
        where = ".".join(str(p) for p in (loc[:1] + loc[2:] if len(loc) > 1 else loc))
        raise ValueError(f"part {where}: {err['msg']}") from None


Input = Annotated[str | list[PartModel], BeforeValidator(_input)]


class SubmitTaskRequest(_Camel):
    """Work for a deployment; the same ``conversationKey`` continues the same conversation."""

    deployment: str = Field(description="Deployment to run (a file in config/deployments).")
    input: Input = Field(
        description="Text, or a list of text/data parts; at most the agent's max_input_bytes."
    )
    conversation_key: str | None = Field(
        default=None,
        description=(
            "Conversation to join: a bare key (`ticket-4711`) or the scoped key a task showed "
            "(`api:acme:ticket-4711`); always one of the caller's tenant. Omitted: a new "
            "conversation (an empty key is refused). Ignored by singleton deployments."
        ),
        json_schema_extra={"minLength": 1},  # (the validator below says what to do instead)
    )
    labels: dict[str, str] | None = Field(
        default=None,
        description="At most 32; keys of letters, digits and `._/-`; values up to 256 bytes.",
    )
    idempotency_key: str | None = Field(
        default=None,
        description="Repeating a submission with this key (in the caller's scope) creates nothing.",
    )
    resource_id: str | None = Field(
        default=None,
        description="Who or what this is about across conversations (a user id): recall and "
        "working memory scoped to `resource` reach this resource's other conversations, "
        "within the caller's scope.",
    )
    delivery: Literal["followup", "collect", "steer", "interrupt"] | None = Field(
        default=None,
        description="What this submission does if its conversation is busy, instead of the "
        "deployment's queue mode: `followup` (queue), `collect` (merge into the queued task), "
        "`steer` (into the running run's inbox), `interrupt` (stop the running run, then run).",
    )
    priority: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_PRIORITY,
        description="Among the tenant's due work, higher runs first (0-9; default: the "
        "deployment's `priority`, else 5). Tenants share free capacity by weight whatever "
        "their tasks' priorities.",
    )

    @field_validator("conversation_key")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        # (not "no key": a client that lost its key would start over each time)
        if v is not None and keys.blank(v):
            raise ValueError(f"is {'empty' if v == '' else 'only white space'}; {keys.BLANK_HINT}")
        return v

    def input_value(self) -> str | list[dict[str, Any]]:
        if isinstance(self.input, str):
            return self.input
        return [p.model_dump() for p in self.input]


class SignalTaskRequest(_Camel):
    """A message for a running task's run (delivered at its next step boundary)."""

    input: Input = Field(description="Text, or a list of text/data parts, as SubmitTask's.")

    def input_value(self) -> str | list[dict[str, Any]]:
        if isinstance(self.input, str):
            return self.input
        return [p.model_dump() for p in self.input]


class TaskView(_Camel):
    """A task as callers see it."""

    id: UUID
    deployment: str
    status: TaskStatus
    conversation: str = Field(
        description="The conversation key with its scope (`api:acme:ticket-4711`): send it back to "
        "continue the conversation."
    )
    seq: int = Field(description="Position in its conversation (1, 2, …).")
    input: list[PartModel]
    submissions: int = Field(description="How many submissions collect mode merged into it.")
    labels: dict[str, str]
    idempotency_key: str | None
    attempts: int
    max_attempts: int
    cancel_requested: bool
    created_at: datetime
    not_before: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reply: str | None = Field(description="The agent's final answer once it succeeded.")
    error: str | None
    error_class: ErrorClass | None = Field(
        default=None,
        description="`failed` or `cancelled`: why, in one word (`rate_limit`, `timeout`, "
        "`auth`, `provider_error`, `model_error`, `tool_error`, `budget`, `step_limit`, "
        "`config`, `lost`, `cancelled`, `internal`); none for tasks that ended under an "
        "older release.",
    )


class DeliveryView(_Camel):
    """A reply delivered somewhere (a `[reply]` URL, an A2A push config), with its journal."""

    id: UUID = Field(description="Also the `Idempotency-Key` every attempt sends.")
    target: str = Field(
        description="`reply:triggers/<name>`, `reply:deployments/<name>` or `push:<config id>`."
    )
    kind: Literal["reply", "push"]
    url: str | None
    status: Literal["pending", "sent", "failed", "unknown"] = Field(
        description="`sent`: a receiver answered 2xx; `failed`: refused, or retries used up; "
        "`unknown`: the last attempt timed out (the receiver may have it); `pending`: to be tried."
    )
    attempts: int
    max_attempts: int
    next_attempt_at: datetime | None
    error: str | None = Field(
        description="Why the last attempt failed: what failed first (`HTTP 500 from "
        "https://host/path`), then the start of the receiver's answer; redacted."
    )
    journal: list[dict[str, Any]] = Field(
        description="Every attempt: `attempt`, `at`, `outcome`, `httpStatus`, `durationMs`, "
        "`detail` (the start of the answer, or what went wrong; redacted) and, when it failed, "
        "`error` (as the delivery's)."
    )
    created_at: datetime
    updated_at: datetime


class ApprovalView(_Camel):
    """A tool call waiting for (or given) a person's decision before it runs."""

    id: UUID
    task_id: UUID
    tool: str = Field(description="The tool the model called (`refund`, `github.delete_repo`).")
    arguments: dict[str, Any] = Field(
        description="The arguments as the model gave them, as stored (secrets redacted): an "
        "approved call runs with exactly these."
    )
    redacted: bool = Field(description="Redaction changed the arguments the model gave.")
    status: Literal["pending", "approved", "rejected", "expired", "interrupted", "cancelled"]
    requested_at: datetime
    expires_at: datetime = Field(
        description="Undecided by then, the call is refused as `expired` (`approval_timeout`)."
    )
    decided_by: str | None = Field(description="The caller (or `operator`) that decided.")
    reason: str | None
    decided_at: datetime | None


class WaitView(_Camel):
    """One thing a waiting task waits for."""

    id: UUID
    kind: Literal["approval", "delegate", "time", "event"]
    tool: str
    event: str | None = Field(default=None, description="`event`: the name waited for.")
    key: str | None = Field(default=None, description="`event`: the key waited for.")
    task_id: UUID | None = Field(default=None, description="`delegate`: the task waited for.")
    expires_at: datetime = Field(description="It ends by then (an event wait: timed out).")
    text: str = Field(description="In words: `waiting for event payment.cleared (key o-1) …`.")


class TaskDetail(TaskView):
    """GetTask: the task, where its reply was delivered and what it waits for."""

    deliveries: list[DeliveryView] = Field(
        default_factory=list, description="Deliveries of its reply (none unless configured)."
    )
    pending_approvals: list[ApprovalView] = Field(
        default_factory=list,
        description="`waiting`: the tool calls waiting for a decision "
        "(`POST /v1/tasks/{id}/approvals/{approvalId}`).",
    )
    waiting_for: list[WaitView] = Field(
        default_factory=list,
        description="`waiting`: everything it waits for (approvals, delegated tasks, a pause, "
        "events of a name and key), each until its deadline.",
    )


class DecideApprovalRequest(_Camel):
    """A person's decision on a pending approval."""

    decision: Literal["approve", "reject"] = Field(
        description="`approve`: the call runs once, with the arguments shown; `reject`: it "
        "never runs and the model is told."
    )
    reason: str | None = Field(
        default=None,
        max_length=MAX_REASON,
        description="Why (shown to the model as a person's words, not instructions).",
    )


class DecideApprovalResponse(_Camel):
    approval: ApprovalView
    task: TaskView


class ApprovalList(_Camel):
    approvals: list[ApprovalView]


class SubmitTaskResponse(TaskView):
    """The admitted task: a new one, the queued one it was merged into, or the original one."""

    merged_into: UUID | None = Field(
        description="Set when collect mode merged this submission into a still-queued task: "
        "that task's id (also `id`). Keep using it."
    )
    duplicate: bool = Field(
        description="The idempotency key was seen before: this is the original task."
    )
    delivered_to: Literal["queued", "run"] = Field(
        description="`queued`: the submission is a task (new, or merged into `mergedInto`); "
        "`run`: steered into the running task's inbox (`id`), delivered at its next step — if "
        "that run ends first, the message becomes the next queued task."
    )
    dropped: UUID | None = Field(
        description="A queued task cancelled to make room (the queue cap's `drop_oldest`)."
    )
    interrupted: UUID | None = Field(
        description="The running task asked to stop for this submission (`interrupt`)."
    )
    fresh_after_delete: datetime | None = Field(
        default=None,
        description="The conversation's key was deleted at this time (DeleteConversation): "
        "this task starts it fresh, with no earlier history or notes.",
    )
    notice: str | None = Field(default=None, description="Says so, in words.")


class CancelTaskResponse(_Camel):
    """What cancelling did."""

    effect: Literal["cancelled", "requested", "finished"] = Field(
        description="`cancelled`: it was queued and is now cancelled; `requested`: it is running "
        "and stops at its next step boundary; `finished`: it had already finished."
    )
    task: TaskView


class TaskList(_Camel):
    tasks: list[TaskView] = Field(description="Oldest first (the newest `limit`).")


class MessageView(_Camel):
    id: int
    role: Literal["user", "assistant"]
    content: str
    task_id: UUID | None
    run_id: UUID | None
    delivery: str
    created_at: datetime


class MessageList(_Camel):
    conversation: str
    deployment: str
    messages: list[MessageView] = Field(description="Oldest first (the newest `limit`).")


#: RFC 9457 problem details, as :mod:`fleet.api.problems` writes them.
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Problem",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "invalidParams": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "reason"],
                "properties": {"name": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
}

_PROBLEM_TEXT = {
    400: "The body could not be read (not UTF-8 JSON).",
    401: "No or unknown API key (send `Authorization: Bearer <key>`).",
    403: "The key may not do this (another source's scope, or a deployment it may not use).",
    404: "Not found (also: it belongs to another scope or tenant).",
    409: "Conflicts with what exists (an idempotency key already used for another deployment).",
    413: "The body is larger than the server accepts.",
    422: "Invalid input: `invalidParams` names each field and the reason.",
    429: "Refused, nothing stored: the conversation's queue is full, or the tenant is over a "
    "quota or budget (`quota` names it, `limit` its value); retry after `Retry-After` seconds.",
    503: "The database or Redis is unavailable; retry after `Retry-After` seconds.",
}


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for problem+json errors (documented, not the default 422)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {
            "description": _PROBLEM_TEXT[code],
            "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}},
        }
        if code in (429, 503):
            entry["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}
            }
        out[code] = entry
    return out
