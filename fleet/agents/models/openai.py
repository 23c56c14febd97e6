"""Model adapter for any OpenAI-compatible chat-completions endpoint, on the official SDK.

Any ``base_url`` works: OpenAI, Azure OpenAI (its ``…/openai/v1`` URL and key), vLLM, Ollama,
LiteLLM. Retries (429, 408, 409, 5xx, timeouts, refused connections), ``Retry-After`` and
timeouts are the SDK's; this module maps messages and tools in, and
:class:`~fleet.agents.models.sdk.SDKModel` turns the SDK's exceptions into readable
:class:`~fleet.errors.ModelError` messages.

Every call streams (``stream_options.include_usage`` asks for the usage at the end): the reply's
text is told to a listener as it comes, and :mod:`fleet.agents.models.chunks` puts the reply
together. A server that refuses ``stream_options`` (some older OpenAI-compatible ones answer 400)
is not handled: the call fails with that 400. The SDK's sync stream stops reading at ``[DONE]``
and closes the response before the chunked body's end, so its HTTP/1.1 connection is not reused
(openai/openai-python#3440): each call opens a new one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Unpack

import openai
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallUnionParam,
)

from fleet.agents.models.base import (
    ChatMessage,
    Listener,
    ModelResponse,
    ToolCall,
    ToolSpec,
    names_back,
    wire_name,
)
from fleet.agents.models.chunks import Chunks
from fleet.agents.models.sdk import Endpoint, SDKErrors, SDKModel


class OpenAIModel(SDKModel[openai.OpenAI]):
    """Synchronous chat completions with tools, streamed, through ``openai.OpenAI``."""

    provider = "openai"
    streams = True
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
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        listen: Listener | None = None,
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
        reply = Chunks(names_back(tools))
        self._call(
            lambda: self._client.chat.completions.create(
                model=self.model,
                messages=wire,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=self._headers,
                **extra,
            ),
            reply,
            listen,
        )
        return reply.response(self.model, self.provider)

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
