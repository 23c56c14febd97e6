"""The offline model: deterministic, no network, history made visible.

Reply: ``echo: <last user text> [history: N]``, N = messages before the last user message (system
prompt, tool traffic and named user messages such as conversation notes not counted). For
exercising the tool loop, each line ``/tool NAME {json}`` of the last user text, wherever it
stands among other lines, asks for that tool once (all such lines: one step), then it replies; a
``/loop NAME {json}`` line, the only command of the text, asks for it on every step (so the step
limit ends the run). A command naming a tool the model was not given is text.

With ``stream_ms`` it streams: the reply is told to a listener word by word (each word with the
whitespace after it), ``stream_ms`` apart, listened to or not; a tool-call reply has no text to
tell. With ``stream_ms`` 0 it does not stream (``streams`` False): the reply comes whole.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence

from fleet.agents.models.base import (
    ChatMessage,
    Listener,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)

#: A word and the whitespace after it, or the whitespace a text starts with.
_WORD = re.compile(r"\S+\s*|\s+")


def words(text: str) -> list[str]:
    """``text`` cut into the chunks echo streams; joined, they are ``text`` again."""
    return _WORD.findall(text)


class EchoModel:
    name = "echo"
    provider = "echo"

    def __init__(
        self,
        delay_ms: int | tuple[int, int] = 0,
        *,
        stream_ms: int = 0,
        seed: int | None = None,
    ) -> None:
        if stream_ms < 0:
            raise ValueError(f"stream_ms must be >= 0, got {stream_ms}")
        self._delay = (delay_ms, delay_ms) if isinstance(delay_ms, int) else delay_ms
        self._stream_s = stream_ms / 1000.0
        #: With ``stream_ms`` 0 the reply comes whole, as a model that does not stream: the
        #: instant echo of tests and benchmarks shows no deltas.
        self.streams = stream_ms > 0
        self._random = random.Random(seed)

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        listen: Listener | None = None,
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
        calls = self._tool_calls(text, messages, last_user, tools)
        if calls:
            return ModelResponse(
                message=ChatMessage(role="assistant", tool_calls=calls),
                usage=usage,
                model=self.name,
                finish_reason="tool_calls",
                provider=self.provider,
            )
        reply = f"echo: {text} [history: {history}]"
        self._write(reply, listen)
        return ModelResponse(
            message=ChatMessage(role="assistant", content=reply),
            usage=usage,
            model=self.name,
            finish_reason="stop",
            provider=self.provider,
        )

    def _write(self, reply: str, listen: Listener | None) -> None:
        """Tell ``listen`` the reply word by word, ``stream_ms`` between words."""
        for i, chunk in enumerate(words(reply)):
            if i and self._stream_s > 0:
                time.sleep(self._stream_s)
            if listen is not None:
                listen.text(chunk)

    @staticmethod
    def _tool_calls(
        text: str, messages: Sequence[ChatMessage], last_user: int | None, tools: Sequence[ToolSpec]
    ) -> tuple[ToolCall, ...]:
        """The ``/tool NAME {json}`` lines (all in one step) or the one ``/loop NAME {json}``;
        other lines are text."""
        if last_user is None:
            return ()
        known = {t.name for t in tools}
        calls_so_far = sum(len(m.tool_calls) for m in messages[last_user:])
        asked: list[tuple[str, str, str]] = []
        for line in text.splitlines():
            command, _, rest = line.strip().partition(" ")
            name, _, raw_args = rest.strip().partition(" ")
            if command in ("/tool", "/loop") and name in known:
                asked.append((command, name, raw_args))
        if not asked or (len(asked) > 1 and any(c == "/loop" for c, _, _ in asked)):
            return ()
        if asked[0][0] == "/tool" and calls_so_far > 0:
            return ()
        calls = []
        for i, (_, name, raw_args) in enumerate(asked):
            try:
                args = json.loads(raw_args) if raw_args.strip() else {}
            except json.JSONDecodeError:
                args = {"raw": raw_args}
            calls.append(ToolCall(id=f"call_{calls_so_far + i + 1}", name=name, arguments=args))
        return tuple(calls)
