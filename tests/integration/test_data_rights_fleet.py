"""The canary test of a resource's erasure, on a real fleet (PostgreSQL, Redis, a Celery worker
process, ``fleet serve``): a canary string of ``ada@example.com`` is planted through every path
that stores text, another of ``bob@example.com`` through the same paths, a third of
``ada@example.com`` in another tenant; the export holds every canary of ada (and nothing of bob's
or the other tenant's); after ``DELETE /v1/resources/ada@example.com`` a ``pg_dump`` of the
database and a read of every Redis key find ada's canary nowhere, while bob's and the other
tenant's are all still there; new tasks naming ada are refused, bob's are not.

The paths, the planting and the checks both modes share are ``tests.support.canary``'s (the
embedded twin is ``tests/unit/test_data_rights_embedded.py``). On a fleet, the reply also
streams through Redis (``fleet:deltas:{task}``), and the event that resolves a
``wait_for_event`` is sent through the dispatcher.
"""

from __future__ import annotations

import base64
import binascii
import glob
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from fleet.domain import event_waits
from fleet.runtime import Runtime
from tests.conftest import PgServer, need, redis_client
from tests.support.canary import (
    ADA,
    BOB,
    CANARY,
    EVENT,
    Refuser,
    check_block_reset,
    check_export,
    check_new_work,
    check_planted,
    check_untouched,
    erase,
    plant,
    write_canary_config,
)
from tests.support.fleet import Fleet, fleet_settings

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    with Refuser() as refuser:
        yield write_canary_config(tmp_path / "config", refuser.url)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str, config: Path) -> dict[str, Any]:
    """What ``rt`` and ``fleet`` (tests/integration/conftest.py) run with."""
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=2.0, sweep_interval=1.0)


# -- what the database and Redis hold ---------------------------------------------------------


def pg_dump(pg_server: PgServer, pg_url: str) -> str:
    """A plain ``pg_dump`` of the test's database (schema and data), reached directly."""
    binary = shutil.which("pg_dump") or max(
        glob.glob("/usr/lib/postgresql/*/bin/pg_dump"), default=None
    )
    need("pg_dump", None if binary else "no pg_dump binary on PATH or in /usr/lib/postgresql")
    direct = make_url(pg_server.direct_url_for(str(make_url(pg_url).database)))
    conninfo = direct.set(drivername="postgresql").render_as_string(hide_password=False)
    done = subprocess.run(
        [str(binary), "--no-owner", "--no-privileges", "-d", conninfo],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def dump_hits(dump: str, needle: str) -> dict[str, int]:
    """Where ``needle`` occurs in a plain dump: table → occurrences (``(schema)``: outside the
    tables' data)."""
    found: Counter[str] = Counter()
    table = "(schema)"
    for line in dump.splitlines():
        if line.startswith("COPY "):
            table = line.split()[1].removeprefix("public.")
            continue
        if line == "\\.":
            table = "(schema)"
            continue
        if needle in line:
            found[table] += line.count(needle)
    assert sum(found.values()) == dump.count(needle)
    return dict(found)


_BASE64 = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")


def _readable(raw: bytes) -> bytes:
    """``raw`` and whatever base64 it carries decoded (Celery's messages in Redis are)."""
    out = [raw]
    for run in _BASE64.findall(raw):
        try:
            out.append(base64.b64decode(run + b"=" * (-len(run) % 4)))
        except (binascii.Error, ValueError):
            continue
    return b"\n".join(out)


def redis_hits(redis_url: str, needle: str) -> dict[str, int]:
    """Every key of the test's Redis database read by its type (strings, lists, hashes, sets,
    sorted sets, streams; anything else by DUMP), its name included: key → occurrences."""
    client = redis_client(redis_url)
    found: dict[str, int] = {}
    want = needle.encode()
    try:
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            parts: list[bytes] = [key]
            if kind == "string":
                parts.append(client.get(key) or b"")
            elif kind == "list":
                parts.extend(client.lrange(key, 0, -1))
            elif kind == "hash":
                for field, value in client.hgetall(key).items():
                    parts.extend((field, value))
            elif kind == "set":
                parts.extend(client.smembers(key))
            elif kind == "zset":
                parts.extend(client.zrange(key, 0, -1))
            elif kind == "stream":
                for entry_id, fields in client.xrange(key, "-", "+"):
                    parts.append(entry_id)
                    for field, value in fields.items():
                        parts.extend((field, value))
            else:  # a type not read above (or one gone meanwhile): its serialized value
                parts.append(client.dump(key) or b"")
            text = b"\n".join(
                _readable(p if isinstance(p, bytes) else str(p).encode()) for p in parts
            )
            if want in text:
                name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
                found[name] = text.count(want)
    finally:
        client.close()
    return found


# -- the fleet's side -------------------------------------------------------------------------

#: How long a task, an embedding, an observation or a delivery may take on the fleet.
TIMEOUT = 30.0


def send_event(rt: Runtime, tag: str, key: str, data: dict[str, Any]) -> None:
    """The event that resolves a resource's ``wait_for_event``, sent through the dispatcher."""
    event = event_waits.new_event(
        name=EVENT,
        key=key,
        data=data,
        event_id=f"evt-{tag}",
        tenant="default",
        scope="api",
        sender="test",
        now=rt.dispatcher.clock(),
        max_bytes=16384,
    )
    assert rt.dispatcher.waiting.send_event(event).resolved == 1


# -- the test ------------------------------------------------------------------------------------


def test_an_erased_resource_leaves_no_canary_in_postgres_or_redis(
    rt: Runtime, fleet: Fleet, pg_server: PgServer, pg_url: str, redis_url: str
) -> None:
    worker = fleet.worker("w", concurrency=4, ready=False)
    base = fleet.serve()
    worker.wait_log(r"ready\.")
    ada_c, bob_c = CANARY[ADA], CANARY[BOB]
    with httpx.Client(base_url=base, timeout=30) as api:
        plant(rt, api, partial(send_event, rt), TIMEOUT)

        # every path stored each canary; the streamed replies are buffered in Redis
        before = pg_dump(pg_server, pg_url)
        bob_before = check_planted(partial(dump_hits, before))
        ada_redis = redis_hits(redis_url, ada_c)
        assert any(k.startswith("fleet:deltas:") for k in ada_redis), ada_redis
        assert redis_hits(redis_url, bob_c)

        check_export(api)

        erased = erase(api, tenant="default")
        assert erased["counts"]["stream_buffers"] >= 2, erased

        after = pg_dump(pg_server, pg_url)
        assert dump_hits(after, ada_c) == {}, f"{ada_c} left in the database"
        assert redis_hits(redis_url, ada_c) == {}, f"{ada_c} left in Redis"
        check_untouched(partial(dump_hits, after), bob_before)
        assert redis_hits(redis_url, bob_c)
        check_block_reset(rt)

        check_new_work(rt, api, TIMEOUT)
        assert redis_hits(redis_url, ada_c) == {}
