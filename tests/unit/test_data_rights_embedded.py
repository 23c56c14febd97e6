"""The canary test of a resource's erasure in embedded mode (SQLite, no Redis, one process, the
tasks run by the app's own threads): a canary string of ``ada@example.com`` is planted through
every path that stores text, another of ``bob@example.com`` through the same paths, a third of
``ada@example.com`` in another tenant; the export holds every canary of ada (and nothing of bob's
or the other tenant's); after ``DELETE /v1/resources/ada%40example.com`` the raw bytes of every
SQLite file of the home folder (``fleet.db``, its ``-wal`` and ``-shm``) hold ada's canary
nowhere, while bob's and the other tenant's are still there; new tasks naming ada are refused,
bob's are not.

The paths, the planting and the checks both modes share are ``tests.support.canary``'s (the
fleet-mode twin is ``tests/integration/test_data_rights_fleet.py``). Embedded, the replies
stream within this process, the background job is a thread embedding with the local embedder,
the receiver is on 127.0.0.1, and the event that resolves a ``wait_for_event`` is sent by
``POST /v1/events``.
"""

from __future__ import annotations

import sqlite3
import struct
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.errors import NotFound
from fleet.runtime import Runtime, build
from tests.support.canary import (
    ADA,
    BOB,
    CANARY,
    EVENT,
    Refuser,
    auth,
    check_block_reset,
    check_export,
    check_new_work,
    check_planted,
    check_untouched,
    erase,
    plant,
    write_canary_config,
)

pytestmark = pytest.mark.timeout(90)

#: How long a task, an embedding, an observation or a delivery may take here.
TIMEOUT = 20.0


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def rt(tmp_path: Path, home: Path) -> Iterator[Runtime]:
    with Refuser() as refuser:
        config = write_canary_config(tmp_path / "config", refuser.url)
        runtime = build(Settings(home=home, config_dir=config))
        assert runtime.settings.embedded and runtime.store.dialect == "sqlite"
        yield runtime
        runtime.close()


@pytest.fixture
def api(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt), raise_server_exceptions=False) as client:
        yield client


# -- what the SQLite files hold ---------------------------------------------------------------


def table_hits(home: Path, needle: str) -> dict[str, int]:
    """Where ``needle`` occurs in the database's rows, read through SQLite (the log's committed
    pages included): table → occurrences."""
    want = needle.encode()
    found: Counter[str] = Counter()
    db = sqlite3.connect(f"file:{home / 'fleet.db'}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    raw = value if isinstance(value, bytes) else str(value).encode()
                    found[table] += raw.count(want)
    finally:
        db.close()
    return {t: n for t, n in found.items() if n}


def file_hits(home: Path, needle: str) -> dict[str, int]:
    """``needle``'s occurrences in the raw bytes of each file of ``home`` (the SQLite files,
    ``fleet.db*``, and anything else the runtime keeps there): file → occurrences."""
    want = needle.encode()
    return {
        str(p.relative_to(home)): p.read_bytes().count(want)
        for p in sorted(home.rglob("*"))
        if p.is_file()
    }


def whereabouts(home: Path, needle: str) -> list[str]:
    """Each raw occurrence of ``needle`` in the SQLite files, told precisely: the file, its
    offset, the page it lies in (the WAL: the frame and the database page it logs) and the
    table or index that page belongs to now (``dbstat``), for a failure's message."""
    want = needle.encode()
    db = sqlite3.connect(f"file:{home / 'fleet.db'}?mode=ro", uri=True)
    try:
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        try:
            owners = {int(p): str(n) for n, p in db.execute("SELECT name, pageno FROM dbstat")}
        except sqlite3.OperationalError:  # no dbstat in this build
            owners = {}
        freelist = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        db.close()
    told: list[str] = []
    for path in sorted(home.glob("fleet.db*")):
        raw = path.read_bytes()
        at = raw.find(want)
        while at >= 0:
            context = raw[max(0, at - 40) : at + len(want) + 40]
            if path.name == "fleet.db":
                page = at // page_size + 1
                where = f"page {page} ({owners.get(page, f'free? {freelist} free pages')})"
            elif path.name.endswith("-wal") and at >= 32:
                frame = (at - 32) // (24 + page_size)
                start = 32 + frame * (24 + page_size)
                (page,) = struct.unpack(">I", raw[start : start + 4])
                where = f"WAL frame {frame}, logging page {page} ({owners.get(page, '?')})"
            else:
                where = "header"
            told.append(f"{path.name} @ {at}: {where}: {context!r}")
            at = raw.find(want, at + 1)
    return told


# -- the app's side ---------------------------------------------------------------------------


def send_event(api: TestClient, tag: str, key: str, data: dict[str, Any]) -> None:
    """The event that resolves a resource's ``wait_for_event``, sent through the API."""
    sent = api.post(
        "/v1/events",
        json={"event": EVENT, "key": key, "data": data, "id": tag},
        headers=auth("app"),
    )
    assert sent.status_code == 202 and sent.json()["resolved"] == 1, sent.text


# -- the test ------------------------------------------------------------------------------------


def test_an_erased_resource_leaves_no_canary_in_the_sqlite_files(
    rt: Runtime, api: TestClient, home: Path
) -> None:
    ada_c, bob_c = CANARY[ADA], CANARY[BOB]
    elsewhere = plant(rt, api, partial(send_event, api), TIMEOUT)

    # every path stored each canary, and the files' bytes hold them
    bob_before = check_planted(partial(table_hits, home))
    before = file_hits(home, ada_c)
    # the database and its write-ahead log (both read below, raw)
    assert {"fleet.db", "fleet.db-wal", "fleet.db-shm"} <= set(before), before
    assert sum(before.values()) > 0

    check_export(api)

    # ada's approval is cancelled, then erased with its conversation (bob's is left)
    erase(api)
    with pytest.raises(NotFound):
        rt.store.get_task(elsewhere[ADA]["approval"])
    assert rt.store.get_task(elsewhere[BOB]["approval"]).status == TaskStatus.WAITING

    # not a byte of ada's canary in the database, its write-ahead log or its shared memory
    assert table_hits(home, ada_c) == {}, f"{ada_c} left in rows"
    left = file_hits(home, ada_c)
    assert sum(left.values()) == 0, f"{ada_c} left in {left}:\n" + "\n".join(
        whereabouts(home, ada_c)
    )
    # bob's data and the other tenant's are untouched
    assert sum(file_hits(home, bob_c).values()) > 0
    check_untouched(partial(table_hits, home), bob_before)
    check_block_reset(rt)

    check_new_work(rt, api, TIMEOUT)
    assert sum(file_hits(home, ada_c).values()) == 0, whereabouts(home, ada_c)
