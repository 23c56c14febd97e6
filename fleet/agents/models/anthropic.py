"""Model adapter for Anthropic's Messages API, on the official ``anthropic`` SDK (optional extra).

The port's OpenAI-shaped conversation is mapped to the Messages API: system messages become
``system``, an assistant's tool calls become ``tool_use`` blocks, and tool results become
``tool_result`` blocks of one user message (consecutive results merged, as the API requires).
Retries (429, 529 overloaded, 5xx, timeouts), ``retry-after`` and timeouts are the SDK's. The
SDK speaks API version 2026-10-21, which has no sampling parameters: no ``temperature`` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

import anthropic
from anthropic.types import (
    ContentBlockParam,
    Message,
    MessageParam,
    ToolParam,
    ToolResultBlockParam,
)

from fleet.agents.models.base import (
    ChatMessage,
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

#: Anthropic stop reasons in the port's (OpenAI) finish-reason words; others pass through.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


class AnthropicModel(SDKModel[anthropic.Anthropic]):
    """Synchronous Messages API calls with tools, through ``anthropic.Anthropic``."""

    provider = "anthropic"
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
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        system, wire = self._messages(messages)
        extra: dict[str, Any] = {}
        if system:
            extra["system"] = system
        if tools:
            extra["tools"] = [_tool(t) for t in tools]
        reply = self._send(
            lambda: self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=wire,
                extra_headers=self._headers,
                **extra,
            )
        )
        return self._parse(reply, names_back(tools))

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

    # -- response ----------------------------------------------------------------------

    def _parse(self, reply: Message, back: dict[str, str]) -> ModelResponse:
        # The SDK builds response objects without validating them: a server that is not quite
        # Anthropic's may leave fields out, which shows up here as a missing attribute.
        try:
            texts: list[str] = []
            calls: list[ToolCall] = []
            for block in reply.content:
                if block.type == "text":
                    texts.append(block.text)
                elif block.type == "tool_use":
                    args = decode_arguments(block.input)
                    name = back.get(block.name, block.name)
                    calls.append(ToolCall(id=block.id, name=name, arguments=args))
            stop = reply.stop_reason
            return ModelResponse(
                message=ChatMessage(
                    role="assistant", content="".join(texts), tool_calls=tuple(calls)
                ),
                usage=_usage(getattr(reply, "usage", None)),
                model=getattr(reply, "model", None) or self.model,
                finish_reason=FINISH_REASONS.get(stop, stop) if stop else None,
                provider=self.provider,
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._unreadable("a Messages API message", reply, exc) from None


def _tool(t: ToolSpec) -> ToolParam:
    spec: ToolParam = {"name": wire_name(t.name), "input_schema": t.parameters}
    if t.description:
        spec["description"] = t.description
    return spec


def _usage(usage: Any) -> Usage:
    """Input tokens count cached ones too (read and written), as the GenAI conventions ask."""
    if usage is None:
        return Usage()
    prompt = sum(
        getattr(usage, field, None) or 0
        for field in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    return Usage(prompt_tokens=prompt, completion_tokens=getattr(usage, "output_tokens", 0) or 0)
