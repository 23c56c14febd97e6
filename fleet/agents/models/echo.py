"""The offline model: deterministic, no network, history made visible.

Reply: ``echo: <last user text> [history: N]``, N = messages before the last user message (system
prompt, tool traffic and named user messages such as conversation notes not counted). For
exercising the tool loop, a last user text of ``/tool NAME {json}`` asks for that tool once, then
replies; ``/loop NAME {json}`` asks for it on every step (so the step limit ends the run).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, ToolSpec, Usage


class EchoModel:
    name = "echo"
    provider = "echo"

    def __init__(self, delay_ms: int | tuple[int, int] = 0, *, seed: int | None = None) -> None:
        self._delay = (delay_ms, delay_ms) if isinstance(delay_ms, int) else delay_ms
        self._random = random.Random(seed)

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        low, high = self._delay
        if high > 0:
            time.sleep(self._random.uniform(low, high) / 1000.0)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        text = messages[last_user].content if last_user is not None else ""
        history = (
            sum(
                1
                for m in messages[:last_user]
                if m.role in ("user", "assistant") and not m.tool_calls and not m.name
            )
            if last_user is not None
            else 0
        )
        usage = Usage(
            prompt_tokens=sum(len(m.content.split()) for m in messages),
            completion_tokens=len(text.split()) + 3,
        )
        call = self._tool_call(text, messages, last_user, tools)
        if call is not None:
            return ModelResponse(
                message=ChatMessage(role="assistant", tool_calls=(call,)),
                usage=usage,
                model=self.name,
                finish_reason="tool_calls",
                provider=self.provider,
            )
        return ModelResponse(
            message=ChatMessage(role="assistant", content=f"echo: {text} [history: {history}]"),
            usage=usage,
            model=self.name,
            finish_reason="stop",
            provider=self.provider,
        )

    @staticmethod
    def _tool_call(
        text: str, messages: Sequence[ChatMessage], last_user: int | None, tools: Sequence[ToolSpec]
    ) -> ToolCall | None:
        command, _, rest = text.partition(" ")
        if command not in ("/tool", "/loop") or last_user is None:
            return None
        name, _, raw_args = rest.strip().partition(" ")
        if name not in {t.name for t in tools}:
            return None
        calls_so_far = sum(len(m.tool_calls) for m in messages[last_user:])
        if command == "/tool" and calls_so_far > 0:
            return None
        try:
            args = json.loads(raw_args) if raw_args.strip() else {}
        except json.JSONDecodeError:
            args = {"raw": raw_args}
        return ToolCall(id=f"call_{calls_so_far + 1}", name=name, arguments=args)
