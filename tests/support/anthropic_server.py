"""A scriptable Anthropic Messages API server on 127.0.0.1 for tests.

Faithful enough for the official ``anthropic`` SDK: ``POST /v1/messages`` answers with
``request-id``, error bodies ``{"type": "error", "error": {"type", "message"}}`` (429
``rate_limit_error``, 529 ``overloaded_error``, ...), scripted ``retry-after`` headers, delays and
hangs, and the API's 400 for a malformed conversation (a ``tool_use`` without a ``tool_result``
in the next user message, a result that answers no call, empty content, a bad tool schema).
A request with ``"stream": true`` gets its answer as the API's event stream
(:func:`message_events`), or the events a test scripts (:func:`event`).

In tests::

    with FakeAnthropic() as server:
        server.enqueue(body=tool_use("lookup", {"id": 7}))
        ... AnthropicModel(model="m", base_url=server.base_url) ...
        server.requests[0].body["messages"]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from typing import Any

from tests.support.scripted_server import RecordedRequest, ScriptedServer, next_id

__all__ = [
    "FakeAnthropic",
    "RecordedRequest",
    "error_body",
    "event",
    "message",
    "message_events",
    "tool_use",
]

#: The API's error type for each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _message(
    content: list[dict[str, Any]],
    stop_reason: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    return {
        "id": f"msg_fake{next_id()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def message(
    text: str,
    *,
    model: str = "claude-fake",
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A Messages API reply with one text block."""
    block = {"type": "text", "text": text}
    return _message([block], stop_reason, model, input_tokens, output_tokens)


def tool_use(
    name: str,
    input: Any,
    tool_use_id: str = "toolu_1",
    *,
    text: str | None = None,
    model: str = "claude-fake",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A Messages API reply asking for one tool, optionally after some text."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": tool_use_id, "name": name, "input": input})
    return _message(blocks, "tool_use", model, input_tokens, output_tokens)


def error_body(message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    """An Anthropic-style error body."""
    return {"type": "error", "error": {"type": type_, "message": message}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = (
        b.get("text") for b in content or () if isinstance(b, dict) and b.get("type") == "text"
    )
    return "".join(str(t or "") for t in texts)


def default_reply(request: Any) -> dict[str, Any]:
    """Echo the last user text (``echo: <text>``), with word counts as token usage."""
    messages = request.get("messages") if isinstance(request, dict) else None
    messages = messages if isinstance(messages, list) else []
    users = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    last = next((t for t in reversed(users) if t), "")
    text = f"echo: {last}"
    words = sum(len(_text_of(m.get("content")).split()) for m in messages)
    return message(
        text,
        model=str(request.get("model") or "claude-fake"),
        input_tokens=words,
        output_tokens=len(text.split()),
    )


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def check_request(body: Any) -> str | None:
    """The 400 message the Messages API would give this body, or None if it is fine."""
    if not isinstance(body, dict):
        return "There was an issue with the format of your request: body is not a JSON object"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    for key in ("temperature", "top_p", "top_k"):  # removed in API version 2026-10-21
        if key in body:
            return f"{key}: Extra inputs are not permitted"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list of text blocks"
    for k, tool in enumerate(body.get("tools") or ()):
        schema = tool.get("input_schema") if isinstance(tool, dict) else None
        if not isinstance(tool.get("name"), str):
            return f"tools.{k}.name: Field required"
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{k}.input_schema.type: Input should be 'object'"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return _check_turns(messages)


def _check_turns(messages: list[Any]) -> str | None:
    asked: list[str] = []  # tool_use ids of the previous assistant turn
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        blocks = _blocks(m.get("content"))
        last = i == len(messages) - 1
        if not blocks and not (last and role == "assistant"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        if any(b.get("type") == "text" and not b.get("text") for b in blocks) and not last:
            return f"messages.{i}: text content blocks must be non-empty"
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if role == "user":
            stray = [a for a in answered if a not in asked]
            if stray:
                return (
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {', '.join(map(str, stray))}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
        missing = [a for a in asked if a not in answered]
        if missing:
            return (
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        asked = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        if role == "assistant" and any(
            not isinstance(b.get("input"), dict) for b in blocks if b.get("type") == "tool_use"
        ):
            return f"messages.{i}.content: tool_use.input: Input should be a valid dictionary"
    if asked:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(asked)}."
        )
    return None


def event(body: dict[str, Any]) -> str:
    """One server-sent event frame of the Messages API: ``event: <type>``, ``data: <json>``."""
    return f"event: {body.get('type')}\ndata: {json.dumps(body)}\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def message_events(body: Any) -> list[str]:
    """The events the API streams for the message ``body``: ``message_start`` (the input usage,
    one output token), a ``ping``, each block's start, deltas (text word by word, a tool's
    input as JSON in pieces) and stop, ``message_delta`` (the stop reason, the output tokens)
    and ``message_stop``. A body that is no message is sent as one event of its type."""
    if not isinstance(body, dict) or body.get("type") != "message":
        return [event(body if isinstance(body, dict) else {"type": "unknown", "body": body})]
    usage = dict(body.get("usage") or {})
    output = usage.pop("output_tokens", 0)
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    frames = [event({"type": "message_start", "message": start}), event({"type": "ping"})]
    for i, block in enumerate(body.get("content") or ()):
        if block.get("type") == "tool_use":
            opened = {**block, "input": {}}
            raw = json.dumps(block.get("input"))
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(raw, 5)]
        else:
            opened = {"type": "text", "text": ""}
            words = re.findall(r"\S+\s*|\s+", str(block.get("text") or ""))
            deltas = [{"type": "text_delta", "text": w} for w in words]
        frames.append(event({"type": "content_block_start", "index": i, "content_block": opened}))
        frames += [event({"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        frames.append(event({"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")}
    frames.append(
        event({"type": "message_delta", "delta": stop, "usage": {"output_tokens": output}})
    )
    frames.append(event({"type": "message_stop"}))
    return frames


class FakeAnthropic(ScriptedServer):
    """Anthropic Messages API server in a background thread (context manager)."""

    route = "/v1/messages"
    request_id_header = "request-id"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def default_reply(self, request: Any) -> dict[str, Any]:
        return default_reply(request)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return error_body(message, kind)

    def check(self, request: Any) -> str | None:
        return check_request(request)

    def stream_events(self, body: dict[str, Any] | str, request: dict[str, Any]) -> list[str]:
        return message_events(body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Anthropic Messages API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeAnthropic(args.host, args.port)
    print(f"fake Anthropic listening on {server.base_url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
