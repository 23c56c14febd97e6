"""A scriptable OpenAI-compatible chat-completions (and embeddings) server on 127.0.0.1 for tests.

Faithful enough for the official ``openai`` SDK: JSON answers with ``x-request-id``, error bodies
``{"error": {"message", "type", "param", "code"}}``, scripted statuses with ``Retry-After`` /
``retry-after-ms`` headers, delays and hangs, and the API's 400 for a malformed conversation (a
tool message that answers no call, a call left unanswered, arguments that are not a string).
A request with ``"stream": true`` gets its answer as ``chat.completion.chunk`` events, as OpenAI
streams them (:func:`completion_chunks`), or the events a test scripts (:func:`chunk`).

In tests::

    with FakeOpenAI() as server:
        server.enqueue(body=reply("hi"))
        ... OpenAIModel(model="m", base_url=server.base_url) ...
        server.requests[0].body["messages"]

As a process (default echo behaviour until killed)::

    python -m tests.support.openai_server --port 8089
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import sys
import time
from typing import Any

from tests.support.scripted_server import RecordedRequest, ScriptedServer, next_id

__all__ = [
    "FakeOpenAI",
    "RecordedRequest",
    "chunk",
    "completion_chunks",
    "default_reply",
    "embedding_of",
    "embeddings_reply",
    "error_body",
    "reply",
    "sse",
    "tool_call",
]

_ERROR_TYPES = {401: "invalid_request_error", 404: "invalid_request_error", 429: "requests"}


def _completion(
    message: dict[str, Any],
    finish_reason: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake{next_id()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def reply(
    text: str, *, model: str = "fake-model", prompt_tokens: int = 10, completion_tokens: int = 5
) -> dict[str, Any]:
    """A chat-completion body whose assistant message is ``text``."""
    message = {"role": "assistant", "content": text}
    return _completion(message, "stop", model, prompt_tokens, completion_tokens)


def tool_call(
    name: str,
    arguments: dict[str, Any] | str,
    call_id: str = "call_1",
    *,
    model: str = "fake-model",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> dict[str, Any]:
    """A chat-completion body asking for one tool call; a ``str`` is sent as raw arguments."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
        ],
    }
    return _completion(message, "tool_calls", model, prompt_tokens, completion_tokens)


def error_body(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type_, "param": None, "code": None}}


def default_reply(request: Any) -> dict[str, Any]:
    """Echo the last user message (``echo: <text>``), with word counts as token usage."""
    messages = request.get("messages") if isinstance(request, dict) else None
    messages = messages if isinstance(messages, list) else []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    last = str(users[-1].get("content") or "") if users else ""
    prompt = sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))
    text = f"echo: {last}"
    model = request.get("model") if isinstance(request, dict) else None
    return reply(
        text,
        model=str(model or "fake-model"),
        prompt_tokens=prompt,
        completion_tokens=len(text.split()),
    )


def check_request(body: Any) -> str | None:
    """The 400 message OpenAI would give this chat-completions body, or None if it is fine."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    for key in ("model", "messages"):
        if key not in body:
            return f"Missing required parameter: '{key}'."
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "Invalid 'messages': expected a non-empty array."
    unanswered: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value for 'messages[{i}].role': {role!r}."
        if role != "tool" and unanswered:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(unanswered)}"
            )
        if role == "tool":
            if m.get("tool_call_id") not in unanswered:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceding message with 'tool_calls' (messages[{i}])."
                )
            unanswered.remove(m["tool_call_id"])
        for j, call in enumerate(m.get("tool_calls") or ()):
            where = f"messages[{i}].tool_calls[{j}]"
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                return f"Missing required parameter: '{where}.function.name'."
            if not isinstance(fn.get("arguments"), str):
                return f"Invalid type for '{where}.function.arguments': expected a string."
            unanswered.append(str(call.get("id")))
    if unanswered:
        return f"tool_call_ids without response messages: {', '.join(unanswered)}"
    for k, tool in enumerate(body.get("tools") or ()):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
            return f"Invalid value for 'tools[{k}]': expected a function tool."
    return None


def sse(data: Any) -> str:
    """One server-sent event frame: ``data: <json>`` (a ``str`` is sent as it is)."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


#: The frame that ends an OpenAI stream.
DONE = "data: [DONE]\n\n"


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    *,
    usage: dict[str, int] | None = None,
    model: str = "fake-model",
) -> dict[str, Any]:
    """A ``chat.completion.chunk``: one choice with ``delta`` (none when only ``usage``)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fakestream",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
    }
    if delta is not None or finish_reason is not None:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
    if usage is not None:
        body["usage"] = usage
    return body


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_chunks(body: Any, request: dict[str, Any]) -> list[str]:
    """The SSE frames OpenAI streams for the chat completion ``body``: the role, the content
    word by word, each tool call's id and name then its arguments in pieces, the finish
    reason, the usage when the request asked for it (``stream_options.include_usage``; every
    other chunk then says ``"usage": null``), and ``[DONE]``. A body that is no chat
    completion is sent as one event."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        return [sse(body), DONE]
    options = request.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    model = str(body.get("model") or "fake-model")
    message = choices[0].get("message") or {}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [
        {"content": word} for word in re.findall(r"\S+\s*|\s+", message.get("content") or "")
    ]
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        start = {"name": fn.get("name"), "arguments": ""}
        deltas.append(
            {
                "tool_calls": [
                    {"index": i, "id": call.get("id"), "type": "function", "function": start}
                ]
            }
        )
        for piece in _pieces(str(fn.get("arguments") or ""), 7):
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    frames = [chunk(d, model=model) for d in deltas]
    frames.append(chunk({}, choices[0].get("finish_reason") or "stop", model=model))
    if with_usage:
        for frame in frames:
            frame["usage"] = None
        if body.get("usage"):
            frames.append(chunk(usage=body["usage"], model=model))
    return [*map(sse, frames), DONE]


#: Dimensions of a fake embedding when the request names none.
EMBEDDING_DIMS = 8


def embedding_of(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """The fake's embedding of ``text``: deterministic, unit length, ``dims`` floats."""
    raw = hashlib.sha256(text.encode()).digest() * (dims // 32 + 1)
    values = [b / 255.0 - 0.5 for b in raw[:dims]]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def _is_embeddings(body: Any) -> bool:
    return isinstance(body, dict) and "input" in body and "messages" not in body


def embeddings_reply(request: Any) -> dict[str, Any]:
    """An embeddings answer for the request's ``input`` (``dimensions`` honoured)."""
    given = request.get("input")
    texts = [given] if isinstance(given, str) else list(given)
    dims = int(request.get("dimensions") or EMBEDDING_DIMS)
    used = sum(len(t.split()) for t in texts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": embedding_of(t, dims)}
            for i, t in enumerate(texts)
        ],
        "model": request.get("model"),
        "usage": {"prompt_tokens": used, "total_tokens": used},
    }


def check_embeddings(body: dict[str, Any]) -> str | None:
    """The API's 400 for a malformed embeddings request, or None."""
    if not isinstance(body.get("model"), str):
        return "you must provide a model parameter"
    given = body["input"]
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return "'input' : input must be a string or a non-empty array of strings"
    return None


class FakeOpenAI(ScriptedServer):
    """OpenAI-compatible chat-completions and embeddings server in a background thread
    (context manager)."""

    route = "/v1/chat/completions"
    routes = ("/v1/embeddings",)
    request_id_header = "x-request-id"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def default_reply(self, request: Any) -> dict[str, Any]:
        return embeddings_reply(request) if _is_embeddings(request) else default_reply(request)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        default = "server_error" if status >= 500 else "invalid_request_error"
        return error_body(message, _ERROR_TYPES.get(status, default))

    def check(self, request: Any) -> str | None:
        return check_embeddings(request) if _is_embeddings(request) else check_request(request)

    def stream_events(self, body: dict[str, Any] | str, request: dict[str, Any]) -> list[str]:
        return completion_chunks(body, request)

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path.rstrip("/").endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
        return super().get(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI chat-completions API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeOpenAI(args.host, args.port)
    print(f"fake OpenAI listening on {server.base_url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
