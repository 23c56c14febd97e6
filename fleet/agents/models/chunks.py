"""A chat completion put together from the chunks an OpenAI-compatible endpoint streams.

Each chunk's first choice carries a delta: some of the reply's text, or some of a tool call (by
``index``: its id and name in the first delta, its arguments spread over the rest), and at the
end a ``finish_reason``. With ``stream_options.include_usage`` a last chunk without choices
carries the usage; a server that sends none leaves it zero. A chunk of the SDK is built without
validation: a field the server left out reads as None, which :meth:`Chunks.add` lets fail as
AttributeError or TypeError (the adapter reports the chunk as unreadable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, Usage, decode_arguments


@dataclass
class _Call:
    """A tool call as its deltas came so far."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class Chunks:
    """One streamed reply, chunk by chunk; :meth:`response` once it finished."""

    what = "a chat completion chunk"
    end = "finish_reason"

    def __init__(self, back: dict[str, str]) -> None:
        #: The fleet name of each tool by the name it was sent under.
        self._back = back
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._last_index: int | None = None
        self._finish: str | None = None
        self._model: str | None = None
        self._usage = Usage()

    @property
    def finished(self) -> bool:
        return self._finish is not None

    def add(self, chunk: Any) -> str:
        """Take one chunk in; the reply text it adds."""
        choices = chunk.choices
        if choices is None and chunk.usage is None:
            raise TypeError("the chunk has neither choices nor usage")
        if not self._model and isinstance(chunk.model, str):
            self._model = chunk.model
        if chunk.usage is not None:
            usage = chunk.usage
            self._usage = Usage(
                prompt_tokens=usage.prompt_tokens or 0,
                completion_tokens=usage.completion_tokens or 0,
            )
        text = ""
        for choice in choices or ():
            if choice.index not in (0, None):
                continue  # fleet asks for one choice
            delta = choice.delta
            if delta is not None:
                text += delta.content or ""  # (a content that is no string: TypeError)
                for raw in delta.tool_calls or ():
                    self._call_delta(raw)
            if choice.finish_reason is not None:
                self._finish = str(choice.finish_reason)
        if text:
            self._text.append(text)
        return text

    def _call_delta(self, raw: Any) -> None:
        """Some of a tool call: a new index (or, from servers that send none, a new id)
        starts a call; the id and name come once, the arguments in pieces."""
        index = raw.index
        if index is None:  # some servers leave it out
            last = self._calls.get(self._last_index) if self._last_index is not None else None
            fresh = last is None or (raw.id is not None and raw.id != last.id)
            index = len(self._calls) if fresh else self._last_index
        call = self._calls.setdefault(int(index), _Call())
        self._last_index = int(index)
        call.id = call.id or (str(raw.id) if raw.id else None)
        fn = raw.function
        if fn is not None:
            call.name = call.name or (str(fn.name) if fn.name else None)
            if fn.arguments:
                call.arguments.append(str(fn.arguments))

    def response(self, model: str, provider: str) -> ModelResponse:
        """The whole reply (``model``: the name to give when no chunk named one)."""
        calls = tuple(
            ToolCall(
                id=str(call.id or f"call_{i}"),
                name=self._back.get(call.name or "", call.name or ""),
                arguments=decode_arguments("".join(call.arguments)),
            )
            for i, (_, call) in enumerate(sorted(self._calls.items()))
        )
        return ModelResponse(
            message=ChatMessage(role="assistant", content="".join(self._text), tool_calls=calls),
            usage=self._usage,
            model=self._model or model,
            finish_reason=self._finish,
            provider=provider,
        )
