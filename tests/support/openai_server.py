"""A scriptable OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

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
import itertools
import json
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class ScriptedResponse:
    status: int = 200
    body: dict[str, Any] | str | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def _completion(
    message: dict[str, Any],
    finish_reason: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake{next(_ids)}",
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


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes; avoid 40 ms stalls

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send(404, error_body(f"no route GET {self.path}"))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        fake = self.server.fake
        fake._record(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
        )
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, error_body(f"no route POST {self.path}"))
            return
        step = fake._next()
        if step.delay_s and fake._stopping.wait(step.delay_s):
            self.close_connection = True
            return  # server is shutting down
        out: dict[str, Any] | str
        if step.body is not None:
            out = step.body
        elif step.status < 400:
            out = default_reply(body)
        else:
            out = error_body(f"scripted HTTP {step.status}", "server_error")
        self._send(step.status, out, step.headers)

    def _send(
        self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None
    ) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        try:
            self.send_response(status)
            ctype = "text/plain" if isinstance(body, str) else "application/json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its timeout fired) before we answered


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI


class FakeOpenAI:
    """OpenAI-compatible chat-completions server in a background thread (context manager)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._script: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None
        self.host: str = host
        self.port: int = self._httpd.server_port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def enqueue(
        self,
        status: int = 200,
        body: dict[str, Any] | str | None = None,
        delay_s: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Script the next chat-completions answer (FIFO).

        ``body=None`` means the default echo reply for 2xx, an OpenAI error body otherwise;
        a ``str`` body is sent verbatim as text/plain.
        """
        with self._lock:
            self._script.append(ScriptedResponse(status, body, delay_s, dict(headers or {})))

    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        with self._lock:
            return len(self._script)

    def start(self) -> FakeOpenAI:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll interval
                name="fake-openai",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next(self) -> ScriptedResponse:
        with self._lock:
            return self._script.popleft() if self._script else ScriptedResponse()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI chat-completions API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeOpenAI(args.host, args.port)
    print(f"fake OpenAI listening on {server.base_url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":
    main()
