"""Model adapter for any OpenAI-compatible chat-completions endpoint, on the official SDK.

Any ``base_url`` works: OpenAI, Azure OpenAI (its ``…/openai/v1`` URL and key), vLLM, Ollama,
LiteLLM. Retries (429, 408, 409, 5xx, timeouts, refused connections), ``Retry-After`` and
timeouts are the SDK's; this module maps messages and tools in and the reply out, and
:class:`~fleet.agents.models.sdk.SDKModel` turns the SDK's exceptions into readable
:class:`~fleet.errors.ModelError` messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Unpack

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallUnionParam,
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


class OpenAIModel(SDKModel[openai.OpenAI]):
    """Synchronous chat completions with tools, through ``openai.OpenAI``."""

    provider = "openai"
    key_setting = "FLEET_OPENAI_API_KEY"
    errors = SDKErrors(
        openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError, openai.OpenAIError
    )

    def __init__(
        self,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        **endpoint: Unpack[Endpoint],
    ) -> None:
        super().__init__(openai.OpenAI, openai.omit, **endpoint)
        self.temperature = temperature
        self.max_tokens = max_tokens

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        wire = [self._message(m) for m in messages]
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = [_tool(t) for t in tools]
            extra["tool_choice"] = "auto"
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if self.max_tokens is not None:
            # OpenAI's current name (its newer models refuse ``max_tokens``); vLLM and LiteLLM
            # take it too, while Ollama and LM Studio still read only ``max_tokens``.
            extra["max_completion_tokens"] = self.max_tokens
        completion = self._send(
            lambda: self._client.chat.completions.create(
                model=self.model, messages=wire, extra_headers=self._headers, **extra
            )
        )
        return self._parse(completion, names_back(tools))

    # -- request -----------------------------------------------------------------------

    def _message(self, m: ChatMessage) -> ChatCompletionMessageParam:
        if m.role == "tool":
            return {"role": "tool", "tool_call_id": self._answered_call(m), "content": m.content}
        if m.role == "system":
            return {"role": "system", "content": m.content}
        if m.role == "user":
            return {"role": "user", "content": m.content}
        if not m.tool_calls:
            return {"role": "assistant", "content": m.content}
        calls: list[ChatCompletionMessageToolCallUnionParam] = [
            {
                "id": c.id,
                "type": "function",
                # an unparsed call goes back as the model wrote it
                "function": {"name": wire_name(c.name), "arguments": _arguments_json(c)},
            }
            for c in m.tool_calls
        ]
        return {"role": "assistant", "content": m.content or None, "tool_calls": calls}

    # -- response ----------------------------------------------------------------------

    def _parse(self, completion: ChatCompletion, back: dict[str, str]) -> ModelResponse:
        # The SDK builds response objects without validating them: a server that is not quite
        # OpenAI's may leave fields out, which shows up here as a missing attribute.
        try:
            choice = completion.choices[0]
            msg = choice.message
            calls = tuple(_tool_call(i, raw, back) for i, raw in enumerate(msg.tool_calls or ()))
            content = msg.content or ""
            usage = completion.usage
            return ModelResponse(
                message=ChatMessage(role="assistant", content=content, tool_calls=calls),
                usage=Usage(
                    prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
                    completion_tokens=(usage.completion_tokens or 0) if usage else 0,
                ),
                model=getattr(completion, "model", None) or self.model,
                finish_reason=choice.finish_reason,
                provider=self.provider,
            )
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise self._unreadable("a chat completion", completion, exc) from None


def _tool(t: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {
            "name": wire_name(t.name),
            "description": t.description,
            "parameters": t.parameters,
        },
    }


def _arguments_json(call: ToolCall) -> str:
    raw = call.unparsed
    return raw if raw is not None else json.dumps(call.arguments)


def _tool_call(index: int, raw: Any, back: dict[str, str]) -> ToolCall:
    fn = raw.function  # a custom (non-function) tool call has none: we only offer functions
    name = str(fn.name or "")
    return ToolCall(
        id=str(raw.id or f"call_{index}"),
        name=back.get(name, name),
        arguments=decode_arguments(fn.arguments),
    )
