"""Closing a store closes every connection it holds: each thread's pinned one, not only the
closing thread's (a connection left checked out is otherwise closed by the collector, later)."""

from __future__ import annotations

import threading

from fleet.domain.redaction import Redactor
from fleet.store import Store
from tests.conftest import POOLER


def test_dispose_closes_the_connections_other_threads_pinned(pg_url: str) -> None:
    store = Store.open(pg_url, Redactor(()), pooler=POOLER)
    held = []

    def work() -> None:
        with store.pinned():
            store.first("SELECT 1 AS one", {})
            held.append(store._local.conn)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(held) == 2 and not any(conn.closed for conn in held)
    store.dispose()
    assert all(conn.closed for conn in held)
