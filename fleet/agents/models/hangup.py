"""Ending a model call in flight from another thread, whatever it waits for.

A run that must stop (a cancel, an interrupt) hangs its model call up at once. Once the
response has begun, its socket is in the response (``sdk.hang_up``); before that — the request
sent, the provider not answering yet — it is only in the SDK's connection pool. So each SDK
client's pool opens its connections through a network backend of ours (:func:`watch`), whose
streams tell :class:`Calls` the socket each thread is reading from: :meth:`Calls.abort` of a
thread shuts that socket down (a blocked read returns at once), and every later read of that
thread's call raises :class:`HungUp`, which is not an ``Exception``: the SDK passes it through
instead of retrying the call.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

log = logging.getLogger(__name__)


class HungUp(BaseException):
    """The call's thread was told to stop (``Calls.abort``): not retried, not a failure."""


class Calls:
    """The socket each thread's model call reads from now, and the threads told to stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reading: dict[int, socket.socket] = {}
        self._stopped: set[int] = set()

    @contextmanager
    def call(self) -> Iterator[int]:
        """A call on this thread (its id yielded: what ``abort`` takes)."""
        me = threading.get_ident()
        with self._lock:
            self._stopped.discard(me)
        try:
            yield me
        finally:
            with self._lock:
                self._stopped.discard(me)
                self._reading.pop(me, None)

    def abort(self, thread: int) -> None:
        """Stop ``thread``'s call: its read now returns, and its next raises ``HungUp``."""
        with self._lock:
            self._stopped.add(thread)
            sock = self._reading.get(thread)
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise ``HungUp`` if this thread's call was told to stop."""
        if threading.get_ident() in self._stopped:
            raise HungUp

    @contextmanager
    def reading(self, sock: socket.socket | None) -> Iterator[None]:
        me = threading.get_ident()
        with self._lock:
            if me in self._stopped:
                raise HungUp
            if sock is not None:
                self._reading[me] = sock
        try:
            yield
        finally:
            with self._lock:
                self._reading.pop(me, None)


class _Stream:
    """A connection's stream whose reads ``Calls`` can end (the rest passed through)."""

    def __init__(self, inner: Any, calls: Calls) -> None:
        self._inner, self._calls = inner, calls
        self._sock: socket.socket | None = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._calls.reading(self._sock):
            try:
                data: bytes = self._inner.read(max_bytes, timeout)
            except Exception:
                self._calls.check()
                raise
        self._calls.check()
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._calls.check()
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> _Stream:
        return _Stream(self._inner.start_tls(*args, **kwargs), self._calls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """A connection pool's network backend whose streams are ``_Stream``s."""

    def __init__(self, inner: Any, calls: Calls) -> None:
        self._inner, self._calls = inner, calls

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _Stream:
        self._calls.check()
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream, self._calls)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _Stream:
        self._calls.check()
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options), self._calls)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def watch(client: Any, calls: Calls) -> bool:
    """Open ``client``'s (an SDK client's) connections through ``calls``; False when its HTTP
    client is not built as expected (a call is then hung up once its response began only)."""
    http = getattr(client, "_client", None)
    pool = getattr(getattr(http, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None or not hasattr(backend, "connect_tcp"):
        log.debug("%s: model calls are hung up once their response began", type(client))
        return False
    pool._network_backend = _Backend(backend, calls)  # type: ignore[union-attr]
    return True
