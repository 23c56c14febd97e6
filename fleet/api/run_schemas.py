"""Response bodies of the run API (ListTaskRuns, GetRun): what ``fleet.views.run_json`` writes.

They document the shape in ``/openapi.json``; the tests validate real answers against them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from fleet.api.schemas import _Camel
from fleet.domain.values import TaskStatus


class RunUsage(_Camel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    steps: int = Field(description="Model and tool steps the run took (replayed ones included).")
    cost: float | None = Field(
        default=None,
        description="What its model steps cost, in the unit of `[prices]` in "
        "`config/fleet.toml` (null: none of its models is priced).",
    )


class ContextMessage(_Camel):
    """A stored conversation message the context injected."""

    id: int
    seq: int | None = Field(
        default=None,
        description="The seq of the task (turn) it belongs to in its conversation; null once "
        "that task is gone (or for runs recorded before seqs were).",
    )
    role: str
    bytes: int = Field(description="UTF-8 bytes of its content.")
    preview: str = Field(description="Its first characters (`…` when cut).")
    tokens: int | None = Field(
        default=None, description="Its tokens, when the agent has `context_tokens`."
    )


class DroppedMessage(ContextMessage):
    """A stored message the context left out, and why."""

    reason: str = Field(
        description="`item_limit`, `byte_limit`, `token_limit` (a history budget was full), "
        "`oversized` (larger than a whole budget) or `undelivered` (a reply whose delivery is "
        'not `sent`, with `remember = "delivered"`).'
    )
    delivery: str | None = Field(
        default=None, description="`undelivered`: the reply's delivery status then."
    )


class RecentWindow(_Camel):
    """The recent window the context held: how many messages, and the newest of them."""

    count: int = Field(description="Messages of the conversation's history it injected.")
    items: list[ContextMessage] = Field(
        description="The newest of them (at most 50), oldest first; `injected` lists all."
    )


class ContextProvenance(_Camel):
    """What the run's frozen context was built from: every message it injected or dropped."""

    limits: dict[str, int] = Field(description="The budgets it was selected under (`maxItems`, …).")
    recent: RecentWindow
    injected: list[ContextMessage] = Field(description="Oldest first, as the model saw them.")
    injected_bytes: int
    injected_tokens: int | None = Field(description="With `context_tokens`: their tokens.")
    tokenizer: str | None = Field(description="With `context_tokens`: what counted them.")
    dropped: list[DroppedMessage] = Field(description="Newest first, each with its reason.")
    older_unseen: bool = Field(
        description="Older messages exist that were not examined (the read stopped at the limit)."
    )
    messages: list[dict[str, Any]] | None = Field(
        default=None,
        description="The prompt exactly as the first model step saw it; only with "
        "`include=messages`.",
    )
    memory: dict[str, Any] | None = Field(
        default=None,
        description="What memory the context held: `blocks` (name, version, bytes, mode), "
        "`notes` (shown and left out), `workingMemory` (version, characters), `observations` "
        "(level and range of each: `fromSeq`/`toSeq`, `fromMessageId`/`toMessageId`).",
    )
    agent: dict[str, str] | None = Field(
        default=None,
        description="The agent configuration the run started with, which it keeps until it ends "
        "(a resume after the config changed runs with it): `name` and `config`, its fingerprint. "
        "`fleet check` warns what unfinished runs started with.",
    )
    recall: dict[str, Any] | None = Field(
        default=None,
        description="Semantic recall: `hits` (message id, conversation, seq, role, score, "
        "preview), `recalled` (what was shown: the hits, with their score, and their neighbours; "
        "each with conversation, seq, role, preview), `searched`, `notEmbeddedYet`, the embedder "
        "and the method (`exact`, `pgvector`, `sqlite-vec`).",
    )


class ShortenedResult(_Camel):
    """A tool result cut in what the run sent, to fit `context_tokens` (the journal keeps it)."""

    call_id: str | None
    tool: str | None
    step: int | None = Field(description="The first model step that was sent it shortened.")
    tokens: int | None = Field(description="Tokens of the whole result.")
    kept: int | None = Field(description="Tokens of it that were sent.")


class TokenCount(_Camel):
    prompt: int
    completion: int


class RequestedCall(_Camel):
    id: str | None
    name: str | None
    arguments: Any


class ModelCall(_Camel):
    tokens: TokenCount
    finish_reason: str | None
    messages: int | None = Field(description="How many messages the call sent.")
    content: str | None = Field(description="The text the model answered.")
    tool_calls: list[RequestedCall] = Field(description="The tool calls it asked for.")
    cost: float | None = Field(
        default=None, description="What the call cost (`[prices]`; null: its model is unpriced)."
    )
    answered_by: str | None = Field(
        default=None,
        description="The configured model that answered (`anthropic:claude-sonnet-4-5`), when "
        "fleet managed the call (model limits, fallbacks).",
    )
    fallback: bool = Field(default=False, description="A fallback model answered.")
    waited_s: float | None = Field(
        default=None,
        description="Seconds the call waited for model capacity, cooldowns and retries.",
    )


class WaitStep(_Camel):
    """A wait for model capacity, recorded as it began."""

    text: str | None = Field(
        description='"waiting for model capacity: openai:*, 1.2 s (requests per minute)"'
    )
    seconds: float | None = Field(description="How long it was expected to last.")
    limit: str | None = Field(description="The `match` of the model limit it waited for.")
    reason: str | None = Field(
        description="`cooldown` (after a 429), `requests`, `tokens` or `concurrency`."
    )
    model: str | None = Field(description="The model the call was for.")


class ToolCall(_Camel):
    call_id: str | None = Field(description="The model's id for the call.")
    arguments: Any = Field(description="The arguments as the model sent them.")
    result: Any = Field(description="What the model got back (null while in flight).")


class StepView(_Camel):
    """One model call or tool call of a run."""

    step: int
    kind: str = Field(
        description="`model`, `tool`, `inbox`, or `wait` (for model capacity: a model limit's "
        "rate or a cooldown after a 429)."
    )
    name: str = Field(description="The model's or the tool's name.")
    status: Literal["finished", "started"] = Field(
        description="`started`: a tool call journaled before it ran that never finished (it was "
        "in flight when its worker was lost)."
    )
    replayed: bool = Field(description="Copied from an earlier attempt's journal, not re-run.")
    started_at: datetime
    duration_ms: float = Field(description="Latency of the call.")
    error: str | None
    model: ModelCall | None = Field(description="Set for model steps.")
    tool: ToolCall | None = Field(description="Set for tool steps.")
    wait: WaitStep | None = Field(default=None, description="Set for wait steps.")


class ModelUsage(_Camel):
    """One configured model's share of a run."""

    model: str = Field(description="`provider:name`, as configured.")
    calls: int
    prompt_tokens: int
    completion_tokens: int
    fallback: bool = Field(description="A fallback of the agent's model.")


class RunView(_Camel):
    """One execution attempt of a task: who ran it, its outcome, usage and context."""

    id: UUID
    task_id: UUID
    attempt: int
    worker: str | None = Field(description="`host:pid` of the worker process that ran it.")
    release: str | None = Field(
        default=None,
        description="The release of fleet that ran it: version plus build "
        "(`0.2.0+3f1c2a9b0d4e`); null for runs before 0.2.0.",
    )
    status: TaskStatus
    model: str
    started_at: datetime
    finished_at: datetime | None
    error: str | None
    usage: RunUsage
    replayed_steps: list[int] = Field(description="Steps replayed from an earlier attempt.")
    shortened: list[ShortenedResult] = Field(
        description="Tool results shortened in what was sent to fit `context_tokens`."
    )
    context: ContextProvenance
    models: list[ModelUsage] = Field(
        default_factory=list,
        description="Which configured models answered the run's managed calls (model limits, "
        "fallbacks), with their calls and tokens.",
    )
    steps: list[StepView] | None = Field(
        default=None, description="Every model and tool step, in order (GetRun only)."
    )


class RunList(_Camel):
    runs: list[RunView] = Field(description="First attempt first; without their steps.")
