"""The model port: messages and tool schemas in; a reply or tool calls, plus usage, out."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]

#: Key of ``ToolCall.arguments`` that holds the model's raw text when its arguments were not a
#: JSON object: the call still reaches the runner, fails argument validation there, and the model
#: is told (a bad call is the model's mistake to fix, not a failed run).
UNPARSED_ARGUMENTS = "_unparsed"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One call the model asks for; ``arguments`` is the decoded JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @property
    def unparsed(self) -> str | None:
        """The model's raw argument text when it was not a JSON object, else None."""
        raw = self.arguments.get(UNPARSED_ARGUMENTS)
        return raw if isinstance(raw, str) and len(self.arguments) == 1 else None


def decode_arguments(raw: object) -> dict[str, Any]:
    """Tool-call arguments from the model's JSON text (or object); a non-object is kept unparsed."""
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: text}


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
    #: Which provider answered (``openai``, ``anthropic``, ``echo``): ``gen_ai.provider.name``.
    provider: str | None = None
    #: The configured model that answered (``anthropic:claude-sonnet-4-5``), when fleet
    #: managed the call (model limits, fallbacks).
    answered_by: str | None = None
    #: A fallback answered: the agent's own model kept failing.
    fallback: bool = False
    #: Seconds the call waited for model capacity, cooldowns and retries' backoff.
    waited_s: float = 0.0


class Listener(Protocol):
    """Told a streaming model call's reply text as the model writes it.

    ``text`` may raise (the run must stop: a cancel, an interrupt, a lost lease): the adapter
    lets the exception through and closes the provider's stream, so the call ends at once.
    """

    def text(self, chunk: str) -> None:
        """More of the reply's text (never empty)."""
        ...

    def reset(self) -> None:
        """The text told so far is void: the call starts over (a retry, a fallback)."""
        ...


#: How to end a model call in flight from another thread (its connection hung up).
Abort = Callable[[], None]


class Stopped(Exception):
    """A model call ended because its run must stop (a cancel, an interrupt, a lost lease):
    while it waited for capacity, or aborted in flight."""


def opened(listen: object, abort: Abort | None) -> bool:
    """Tell ``listen`` (if it wants to know: an ``opened`` method) how to abort the call now
    in flight, or (None) that it is over; whether it was aborted meanwhile."""
    tell = getattr(listen, "opened", None)
    if tell is not None:
        tell(abort)
    return bool(getattr(listen, "aborted", False))


def streams(model: object) -> TypeGuard[StreamingModel]:
    """Whether ``model.complete`` takes ``listen`` (fleet's adapters say so with ``streams``)."""
    return getattr(model, "streams", False) is True


class Model(Protocol):
    """A chat model. Implementations raise :class:`fleet.errors.ModelError` on failure.

    fleet's adapters also have a ``provider`` attribute (``openai``, ``anthropic``, ``echo``);
    :func:`provider_of` reads it, so models without one still fit the port. Those with
    ``streams = True`` take a keyword ``listen: Listener | None`` too (:func:`streams`), told
    the reply's text as it comes; the response is still the whole reply, once.
    """

    #: Name recorded on runs and traces, e.g. ``echo`` or ``openai:gpt-4o-mini``.
    name: str

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse: ...


class StreamingModel(Model, Protocol):
    """A model that streams (``streams = True``): ``complete`` tells ``listen`` the reply's
    text as it comes, then returns the whole reply, once."""

    streams: bool

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        listen: Listener | None = None,
    ) -> ModelResponse: ...


def provider_of(model: Model) -> str:
    """The model's provider: its ``provider`` attribute, else the prefix of ``name`` before ':'."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else model.name.partition(":")[0]


_NOT_WIRE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """A tool name provider APIs accept (``^[A-Za-z0-9_-]{1,64}$``): ``github.search`` is sent
    as ``github__search`` (MCP tools are namespaced with a dot, which the APIs refuse)."""
    return _NOT_WIRE.sub("_", name.replace(".", "__"))[:64]


def names_back(tools: Sequence[ToolSpec]) -> dict[str, str]:
    """The fleet name of each tool by the name it was sent under."""
    return {wire_name(t.name): t.name for t in tools}
