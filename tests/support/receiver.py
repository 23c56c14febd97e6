"""A local HTTP receiver for reply deliveries: answers by path, records every request."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    """``/ok…`` answers 200 (echoing the Authorization it got), ``/flaky…`` 500 the first time
    per path and 200 after, ``/hang…`` never answers (until the receiver stops), ``/held…``
    holds its first request per path until the test sets ``answer`` (then 200) and answers 200
    at once after that, ``/drip…`` answers 200 and then drips its body a byte at a time."""

    requests: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    #: Set by the test: the held ``/held…`` request may answer now.
    answer: threading.Event = field(default_factory=threading.Event)
    #: (path, status) of every answer written in full.
    answered: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def got(self, prefix: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path.startswith(prefix)]

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                rec = Received(self.path, dict(self.headers.items()), json.loads(raw or b"null"))
                with receiver.lock:
                    seen = sum(1 for r in receiver.requests if r.path == self.path)
                    receiver.requests.append(rec)
                if self.path.startswith("/hang"):
                    receiver.released.wait(60)
                    return
                if self.path.startswith("/held") and seen == 0:
                    receiver.answer.wait(120)
                if self.path.startswith("/drip"):  # 200 at once, then a byte every 0.2 s
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    try:
                        while not receiver.released.wait(0.2):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                    except OSError:  # the sender stopped reading
                        pass
                    return
                status = 500 if self.path.startswith("/flaky") and seen == 0 else 200
                answer = f"status {status}; you sent {self.headers.get('Authorization')}".encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the sender died waiting (a test killed it)
                with receiver.lock:
                    receiver.answered.append((self.path, status))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        self.answer.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
