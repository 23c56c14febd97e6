"""The model port: messages and tool schemas in; a reply or tool calls, plus usage, out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One call the model asks for; ``arguments`` is the decoded JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ChatMessage(_Frozen):
    """One message of a model conversation (OpenAI chat shape, provider neutral)."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For ``role="tool"``: the id of the call this message answers.
    tool_call_id: str | None = None
    #: For ``role="tool"``: the tool's name.
    name: str | None = None


class ToolSpec(_Frozen):
    """A tool the model may call: name, description and JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Usage(_Frozen):
    """Token counts a model call reports (zero where the provider reports none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class ModelResponse(_Frozen):
    """What one model call returns: the assistant message, usage, and which model answered."""

    message: ChatMessage
    usage: Usage = Usage()
    model: str
    finish_reason: str | None = None


class Model(Protocol):
    """A chat model. Implementations raise :class:`fleet.errors.ModelError` on failure."""

    #: Name recorded on runs and traces, e.g. ``echo`` or ``openai:gpt-4o-mini``.
    name: str

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse: ...
