"""Model adapter for any OpenAI-compatible chat-completions endpoint, on the official SDK.

Any ``base_url`` works: OpenAI, Azure OpenAI (its ``…/openai/v1`` URL and key), vLLM, Ollama,
LiteLLM. Retries (429, 408, 409, 5xx, timeouts, refused connections), ``Retry-After`` and
timeouts are the SDK's; this module maps messages and tools in, the reply out, and the SDK's
exceptions to readable :class:`~fleet.errors.ModelError` messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

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
from fleet.agents.models.failures import Failures, excerpt


class OpenAIModel:
    """Synchronous chat completions with tools, through ``openai.OpenAI``."""

    provider = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.name = f"openai:{model}"
        self.model = model
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._failures = Failures(self.name, api_key=api_key, key_setting="FLEET_OPENAI_API_KEY")
        # Without a key no Authorization header is sent (local vLLM/Ollama); the SDK insists on
        # one at construction, so it gets a stand-in that every request then omits. The SDK's own
        # OPENAI_* variables are never read: fleet's settings are the one source.
        self._client = openai.OpenAI(
            api_key=api_key or "no-key",
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
        )
        self._headers: dict[str, Any] = {} if api_key else {"Authorization": openai.omit}

    def close(self) -> None:
        """Close the SDK's HTTP client."""
        self._client.close()

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
        try:
            completion = self._client.chat.completions.create(
                model=self.model, messages=wire, extra_headers=self._headers, **extra
            )
        except openai.APITimeoutError as exc:
            raise self._failures.timed_out(exc.request, self.timeout_s) from None
        except openai.APIConnectionError as exc:
            raise self._failures.unreachable(exc.request, exc.__cause__) from None
        except openai.APIStatusError as exc:
            raise self._failures.rejected(exc.response) from None
        except openai.OpenAIError as exc:
            raise self._failures.error(f"the request failed: {excerpt(str(exc))}") from None
        return self._parse(completion, names_back(tools))

    # -- request -----------------------------------------------------------------------

    def _message(self, m: ChatMessage) -> ChatCompletionMessageParam:
        if m.role == "tool":
            if not m.tool_call_id:
                raise self._failures.error(
                    f"tool message for {m.name or 'unnamed tool'!r} has no tool_call_id; "
                    "set it to the id of the call it answers"
                )
            return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
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
            shown = completion.model_dump_json() if hasattr(completion, "model_dump_json") else ""
            raise self._failures.error(
                f"the endpoint returned a body that is not a chat completion "
                f"({type(exc).__name__}: {exc}): {excerpt(shown or repr(completion))}"
            ) from None


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
