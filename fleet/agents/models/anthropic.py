"""Model adapter for Anthropic's Messages API, on the official ``anthropic`` SDK (optional extra).

The port's OpenAI-shaped conversation is mapped to the Messages API: system messages become
``system``, an assistant's tool calls become ``tool_use`` blocks, and tool results become
``tool_result`` blocks of one user message (consecutive results merged, as the API requires).
Retries (429, 529 overloaded, 5xx, timeouts), ``retry-after`` and timeouts are the SDK's. The
SDK speaks API version 2026-10-21, which has no sampling parameters: no ``temperature`` here.

Every call streams: text deltas are told to a listener as they come, a ``tool_use`` block's
input is put together from its ``input_json_delta`` pieces, the usage from ``message_start``
and ``message_delta``, and the reply is complete at ``message_stop`` (a stream that ends before
it was cut short). Event types this module does not know are passed over, as the API asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

import anthropic
from anthropic.types import (
    ContentBlockParam,
    MessageParam,
    ToolParam,
    ToolResultBlockParam,
)

from fleet.agents.models.base import (
    ChatMessage,
    Listener,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
    decode_arguments,
    names_back,
    wire_name,
)
from fleet.agents.models.sdk import Endpoint, SDKErrors, SDKModel

#: ``max_tokens`` when the agent's config sets none (the Messages API requires one).
DEFAULT_MAX_TOKENS = 4096

#: Usage fields that count input tokens: cached ones (read and written) too, as the GenAI
#: conventions ask.
_INPUT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

#: Anthropic stop reasons in the port's (OpenAI) finish-reason words; others pass through.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class AnthropicModel(SDKModel[anthropic.Anthropic]):
    """Synchronous Messages API calls with tools, streamed, through ``anthropic.Anthropic``."""

    provider = "anthropic"
    streams = True
    key_setting = "FLEET_ANTHROPIC_API_KEY"
    errors = SDKErrors(
        anthropic.APITimeoutError,
        anthropic.APIConnectionError,
        anthropic.APIStatusError,
        anthropic.AnthropicError,
    )

    def __init__(
        self, *, max_tokens: int = DEFAULT_MAX_TOKENS, **endpoint: Unpack[Endpoint]
    ) -> None:
        super().__init__(anthropic.Anthropic, anthropic.omit, **endpoint)
        self.max_tokens = max_tokens

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        listen: Listener | None = None,
    ) -> ModelResponse:
        system, wire = self._messages(messages)
        extra: dict[str, Any] = {}
        if system:
            extra["system"] = system
        if tools:
            extra["tools"] = [_tool(t) for t in tools]
        reply = Events(names_back(tools))
        self._call(
            lambda: self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=wire,
                stream=True,
                extra_headers=self._headers,
                **extra,
            ),
            reply,
            listen,
        )
        return reply.response(self.model, self.provider)

    # -- request -----------------------------------------------------------------------

    def _messages(self, messages: Sequence[ChatMessage]) -> tuple[str, list[MessageParam]]:
        """The ``system`` text and the Messages API turns."""
        system: list[str] = []
        wire: list[MessageParam] = []
        results: list[ContentBlockParam] = []
        for m in messages:
            if m.role == "tool":
                results.append(self._tool_result(m))
                continue
            if results:
                wire.append({"role": "user", "content": results})
                results = []
            if m.role == "system":
                system.append(m.content)
            elif m.role == "user":
                wire.append({"role": "user", "content": m.content})
            elif not m.tool_calls:
                if m.content:  # the API refuses an empty turn; an empty reply says nothing
                    wire.append({"role": "assistant", "content": m.content})
            else:
                blocks: list[ContentBlockParam] = []
                if m.content:
                    blocks.append({"type": "text", "text": m.content})
                blocks.extend(
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": wire_name(c.name),
                        "input": c.arguments,
                    }
                    for c in m.tool_calls
                )
                wire.append({"role": "assistant", "content": blocks})
        if results:
            wire.append({"role": "user", "content": results})
        return "\n\n".join(s for s in system if s), wire

    def _tool_result(self, m: ChatMessage) -> ToolResultBlockParam:
        return {"type": "tool_result", "tool_use_id": self._answered_call(m), "content": m.content}


@dataclass
class _Block:
    """A content block as its deltas came so far: text, or a tool call's input."""

    kind: str
    text: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    #: The ``input`` of ``content_block_start`` (the API sends ``{}``, then the JSON in pieces).
    input: Any = None


class Events:
    """One streamed Messages API reply, event by event; :meth:`response` once it stopped."""

    what = "a Messages API stream event"
    end = "message_stop"

    def __init__(self, back: dict[str, str]) -> None:
        #: The fleet name of each tool by the name it was sent under.
        self._back = back
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, int] = {}
        self._model: str | None = None
        self._stop: str | None = None
        self._stopped = False

    @property
    def finished(self) -> bool:
        return self._stopped

    def add(self, event: Any) -> str:
        """Take one event in; the reply text it adds."""
        kind = event.type
        if kind == "message_start":
            message = event.message
            if isinstance(message.model, str) and message.model:
                self._model = message.model
            self._count(message.usage)
        elif kind == "content_block_start":
            block, index = event.content_block, int(event.index)
            if block.type == "text":
                text = _string(block.text or "")
                self._blocks[index] = _Block("text", [text])
                return text
            if block.type == "tool_use":
                self._blocks[index] = _Block(
                    "tool_use", id=_string(block.id), name=_string(block.name), input=block.input
                )
        elif kind == "content_block_delta":
            return self._delta(self._blocks.get(int(event.index)), event.delta)
        elif kind == "message_delta":
            self._stop = event.delta.stop_reason or self._stop
            self._count(event.usage)
        elif kind == "message_stop":
            self._stopped = True
        return ""

    def _delta(self, block: _Block | None, delta: Any) -> str:
        if block is None:  # a delta of a block that never started, or of a kind not kept
            return ""
        if delta.type == "text_delta" and block.kind == "text":
            text = _string(delta.text)
            block.text.append(text)
            return text
        if delta.type == "input_json_delta" and block.kind == "tool_use":
            block.text.append(_string(delta.partial_json))
        return ""

    def _count(self, usage: Any) -> None:
        """Usage so far: ``message_delta``'s counts are totals, and replace the start's."""
        if usage is None:
            return
        for name in (*_INPUT_FIELDS, "output_tokens"):
            value = getattr(usage, name, None)
            if value is not None:
                self._usage[name] = int(value)

    def response(self, model: str, provider: str) -> ModelResponse:
        """The whole reply (``model``: the name to give when the stream named none)."""
        texts: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self._blocks.items()):
            if block.kind == "text":
                texts.append("".join(block.text))
                continue
            raw = "".join(block.text)
            args = decode_arguments(raw if raw else block.input)
            name = self._back.get(block.name, block.name)
            calls.append(ToolCall(id=block.id, name=name, arguments=args))
        stop = self._stop
        prompt = sum(self._usage.get(name, 0) for name in _INPUT_FIELDS)
        return ModelResponse(
            message=ChatMessage(role="assistant", content="".join(texts), tool_calls=tuple(calls)),
            usage=Usage(
                prompt_tokens=prompt, completion_tokens=self._usage.get("output_tokens", 0)
            ),
            model=self._model or model,
            finish_reason=FINISH_REASONS.get(stop, stop) if stop else None,
            provider=provider,
        )


def _string(value: object) -> str:
    """``value``, which the event should have as a string."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _tool(t: ToolSpec) -> ToolParam:
    spec: ToolParam = {"name": wire_name(t.name), "input_schema": t.parameters}
    if t.description:
        spec["description"] = t.description
    return spec
