"""One embedded ``fleet serve`` in a child process, for CLI tests that go through ``--server``."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.fleet import Proc, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(env: dict[str, str], log: Path, *args: str) -> Iterator[str]:
    """``fleet serve`` (embedded: it runs what it admits) with ``env`` and extra ``args``, up and
    answering ``/healthz``; its base URL. Stopped (SIGTERM to its group) on the way out."""
    port = free_port()
    argv = [sys.executable, "-m", "fleet.cli", "serve", "--port", str(port), "--loglevel"]
    server = Proc("api", [*argv, "warning", *args], env, log)
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if server.popen.poll() is not None:
                raise AssertionError(f"fleet serve exited:\n{server.log()[-3000:]}")
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, interval=0.1, what="fleet serve to answer")
        yield url
    finally:
        server.stop()
