"""A scriptable JSON API server on 127.0.0.1, the base of the fake model providers.

A subclass names its route and says, like the real API would, what a default answer, an error
body and a malformed request look like. Tests script answers in order (status, body, headers, a
delay or a hang) and read back every request the server received.

A request that asks to stream (``"stream": true``) and gets a 2xx is answered with server-sent
events, chunked: the subclass makes them from the answer's body as its API would, or the script
gives them as sent (malformed ones included), and says how the stream ends: ``end`` (cleanly),
``drop`` (the connection closes mid-body) or ``hold`` (comments every few ms until the client
closes the connection, which :meth:`ScriptedServer.wait_hangup` sees).
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

#: Delay that stands for "never answers": a hanging handler is released when the server stops.
HANG_S = 3600.0
#: How a streamed answer ends: cleanly, by a dropped connection, or held open until the client
#: closes it.
Ending = Literal["end", "drop", "hold"]
#: Pause between the comments of a held stream.
HOLD_PING_S = 0.02

_ids = itertools.count(1)


def next_id() -> int:
    """A process-wide counter for fake object and request ids."""
    return next(_ids)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: When it arrived (``time.monotonic()``): rates and pauses are read from these.
    at: float = 0.0


@dataclass(frozen=True)
class ScriptedResponse:
    status: int = 200
    body: dict[str, Any] | str | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    #: A streamed answer's SSE frames as sent; None: made from ``body``.
    events: tuple[str, ...] | None = None
    ending: Ending = "end"
    #: Pause before each frame after the first.
    gap_s: float = 0.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes; avoid 40 ms stalls

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_GET(self) -> None:
        fake = self.server.fake
        status, body = fake.get(self.path)
        self._send(status, body, fake.response_headers())

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
                at=time.monotonic(),
            )
        )
        headers = fake.response_headers()
        if self.path.split("?")[0].rstrip("/") not in (fake.route, *fake.routes):
            self._send(404, fake.error_body(404, f"no route POST {self.path}"), headers)
            return
        problem = fake.check(body)
        if problem is not None:
            self._send(400, fake.error_body(400, problem), headers)
            return
        step = fake._next()
        if step.delay_s and fake._stopping.wait(step.delay_s):
            self.close_connection = True
            return  # server is shutting down
        out: dict[str, Any] | str
        if step.body is not None:
            out = step.body
        elif step.status < 400:
            out = fake.default_reply(body)
        else:
            out = fake.error_body(step.status, f"scripted HTTP {step.status}")
        if step.status < 400 and isinstance(body, dict) and body.get("stream") is True:
            frames = step.events if step.events is not None else fake.stream_events(out, body)
            self._stream(step, frames, {**headers, **step.headers})
            return
        self._send(step.status, out, {**headers, **step.headers})

    def _stream(
        self, step: ScriptedResponse, frames: Sequence[str], headers: dict[str, str]
    ) -> None:
        """``frames`` as a chunked event stream, ended as ``step.ending`` says."""
        fake = self.server.fake
        try:
            self.send_response(step.status)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            for i, frame in enumerate(frames):
                if i and step.gap_s and fake._stopping.wait(step.gap_s):
                    break
                self._chunk(frame.encode())
            if step.ending == "drop":
                self.close_connection = True  # no last chunk: the body is cut short
                return
            if step.ending == "hold":
                while not fake._stopping.wait(HOLD_PING_S):
                    self._chunk(b": keep-alive\n\n")
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            fake._hung_up.set()  # the client closed the connection

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

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
    fake: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client closed the connection (a stream it stopped reading): no news
        super().handle_error(request, client_address)


class ScriptedServer:
    """A JSON API in a background thread (context manager); subclasses speak one protocol."""

    #: The one POST path the fake answers, e.g. ``/v1/chat/completions``.
    route: str = "/"
    #: Further POST paths it answers (the subclass tells them apart by their bodies).
    routes: tuple[str, ...] = ()
    #: Header carrying a request id on every answer, as the real APIs send one.
    request_id_header: str = "x-request-id"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._script: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._hung_up = threading.Event()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None
        self.host: str = host
        self.port: int = self._httpd.server_port

    # -- the protocol (subclasses) ---------------------------------------------------------

    def default_reply(self, request: Any) -> dict[str, Any]:
        """The 2xx body when the script gives none."""
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The API's error body for ``status``."""
        raise NotImplementedError

    def check(self, request: Any) -> str | None:
        """Why the real API would refuse this request body with a 400, or None."""
        return None

    def stream_events(self, body: dict[str, Any] | str, request: dict[str, Any]) -> list[str]:
        """The SSE frames the API streams for the 2xx answer ``body`` to ``request``."""
        raise NotImplementedError

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """The answer to a GET."""
        return 404, self.error_body(404, f"no route GET {path}")

    def response_headers(self) -> dict[str, str]:
        return {self.request_id_header: f"req_fake{next_id()}"}

    # -- scripting ---------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def bodies(self) -> list[Any]:
        """The JSON bodies of the requests received so far, oldest first."""
        return [r.body for r in self.requests]

    def enqueue(
        self,
        status: int = 200,
        body: dict[str, Any] | str | None = None,
        delay_s: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Script the next answer (FIFO).

        ``body=None`` means the default reply for 2xx and the API's error body otherwise; a
        ``str`` body is sent verbatim as text/plain. A well-formed request takes the next answer;
        a malformed one gets the API's 400 and leaves the script alone.
        """
        with self._lock:
            self._script.append(ScriptedResponse(status, body, delay_s, dict(headers or {})))

    def stream(self, events: Sequence[str], *, ending: Ending = "end", gap_s: float = 0.0) -> None:
        """Script a streamed answer of these SSE frames, sent as they are (FIFO, as
        :meth:`enqueue`)."""
        with self._lock:
            self._script.append(ScriptedResponse(events=tuple(events), ending=ending, gap_s=gap_s))

    def wait_hangup(self, timeout: float) -> bool:
        """Whether a client closed a stream before it ended, waiting up to ``timeout``."""
        return self._hung_up.wait(timeout)

    def hang(self) -> None:
        """Script an answer that never comes (until the server stops)."""
        self.enqueue(delay_s=HANG_S)

    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        with self._lock:
            return len(self._script)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll interval
                name=f"fake-{type(self).__name__}",
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

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (process mode)."""
        try:
            self._httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._httpd.server_close()

    def __enter__(self) -> Self:
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
