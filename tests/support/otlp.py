"""A tiny OTLP/HTTP receiver on 127.0.0.1: records every POST, answers like a collector."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Post:
    path: str
    content_type: str
    body: bytes


@dataclass
class Receiver:
    url: str
    posts: list[Post] = field(default_factory=list)

    def spans(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """Every exported span as (name, span attributes, resource attributes), decoded."""
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        def plain(attrs: Any) -> dict[str, Any]:
            return {a.key: next(iter(MessageToDict(a.value).values()), None) for a in attrs}

        out = []
        for post in self.posts:
            request = ExportTraceServiceRequest.FromString(post.body)
            for rs in request.resource_spans:
                resource = plain(rs.resource.attributes)
                for ss in rs.scope_spans:
                    out.extend((s.name, plain(s.attributes), resource) for s in ss.spans)
        return out


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve on a free port until the block ends."""
    posts: list[Post] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts.append(Post(self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", posts)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
