"""``fleet serve --metrics-port N``: the API's ``/metrics`` on a port of its own, without a key.

The same body as the API port's route (``fleet.api.ops.render_metrics``: this process's metrics,
or with ``--workers`` the sum of every uvicorn process, and the store's gauges), served by a
small HTTP server on a thread of the ``fleet serve`` process itself (with ``--workers``, the
parent that supervises the uvicorn processes), so one port answers however many there are. Keep
the port to the monitoring network (the Helm chart's pods expose it, no Service routes to it).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

if TYPE_CHECKING:
    from fleet.runtime import Runtime

log = logging.getLogger(__name__)


class MetricsServer:
    """A running metrics port; ``close`` stops it."""

    def __init__(self, rt: Runtime, host: str, port: int) -> None:
        handler = _handler(rt)
        self.http = ThreadingHTTPServer((host, port), handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(
            target=self.http.serve_forever, name="fleet-metrics", daemon=True
        )
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(5)


def _handler(rt: Runtime) -> type[BaseHTTPRequestHandler]:
    from fleet.api.ops import render_metrics

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.partition("?")[0] != "/metrics":
                self._send(404, b"only /metrics is served on this port\n", "text/plain")
                return
            try:
                body = render_metrics(rt)
            except Exception:  # a scrape must never take the server down
                log.exception("rendering /metrics failed")
                self._send(500, b"rendering the metrics failed (see the log)\n", "text/plain")
                return
            self._send(200, body, CONTENT_TYPE_PLAIN_0_0_4)

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are not logged (one every few seconds would drown the rest)."""

    return Handler


def serve(rt: Runtime, host: str, port: int) -> MetricsServer:
    """Start serving ``rt``'s metrics on ``host:port``; OSError when the port is taken."""
    server = MetricsServer(rt, host, port)
    log.info("serving /metrics without a key on %s:%d", host, server.port)
    return server
