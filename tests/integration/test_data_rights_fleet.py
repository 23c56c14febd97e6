"""The canary test of a resource's erasure, on a real fleet (PostgreSQL, Redis, a Celery worker
process, ``fleet serve``): a canary string of ``ada@example.com`` is planted through every path
that stores text, another of ``bob@example.com`` through the same paths, a third of
``ada@example.com`` in another tenant; the export holds every canary of ada (and nothing of bob's
or the other tenant's); after ``DELETE /v1/resources/ada@example.com`` a ``pg_dump`` of the
database and a read of every Redis key find ada's canary nowhere, while bob's and the other
tenant's are all still there; new tasks naming ada are refused, bob's are not.

The paths (each checked to have really stored the canary before the erasure):

- input, reply, labels, idempotency key: every submission (``tasks``, ``messages``, ``runs``,
  ``idempotency_keys``); the reply also streams through Redis (``fleet:deltas:{task}``);
- tool arguments and results: ``track`` (a test tool whose result repeats its argument), the
  memory tools and ``schedule_followup`` (``traces``, ``followups``);
- a memory block: ``memory_update`` appends to the namespace's block (``memory_block_versions``,
  ``memory_blocks``; a person wrote its first version, which the erasure resets it to);
- a note: ``memory_set`` (``notes``);
- working memory: ``update_working_memory`` in a resource-scoped agent (its resource's key) and a
  conversation-scoped one (``working_memory``);
- recall and observations: the background job embeds the messages (``message_embeddings``,
  labels included), a later run of another conversation of the resource recalls them (its
  ``runs.context``), and the observer distils the history (``observations``);
- a failed delivery: the receiver answers 500 with the body it was sent, which the delivery's
  journal keeps (``deliveries``; its URL carries a label too);
- an approval's arguments: a tool needing approval parks the task (``waits.arguments``); the
  erasure cancels it first;
- an event's data: ``wait_for_event`` resolved by an event carrying the canary
  (``inbound_events``, ``waits.data``).
"""

from __future__ import annotations

import base64
import binascii
import glob
import hashlib
import json
import re
import shutil
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import func, make_url, select

from fleet.domain import delivery as delivery_rules
from fleet.domain import event_waits
from fleet.domain.blocks import Edit
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import PgServer, need, redis_client, write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

ADA, BOB = "ada@example.com", "bob@example.com"
CANARY = {ADA: "CANARY-ADA-7f3a", BOB: "CANARY-BOB-91c2"}
#: ada's canary in another tenant (``acme``): never exported with, nor erased by, default's ada.
ACME_CANARY = "CANARY-ACME-5d0e"
TAG = {ADA: "ada", BOB: "bob"}
#: The memory agent's deployment and namespace of each resource. Not one namespace: a memory
#: block is the namespace's, shared by every resource whose runs see it. What one resource's
#: run writes there is in the prompts (``runs.context``) of the others' runs, and in the
#: versions they append on top, which an erasure of that resource cannot take back (nor keep
#: out of its export the other resources' text that its runs saw in the block).
KEEP = {ADA: "keep", BOB: "keep-b"}
NAMESPACE = {ADA: "shop", BOB: "bobshop"}
#: What a person wrote in ada's namespace's block before ada's run appended to it: what the
#: erasure resets the block to.
HOUSE_RULES = "House rules: be kind."

KEYS = {
    "app": "app-key-0123456789abcdef",
    "acme": "acme-key-0123456789abcdef",
    "privacy": "privacy-key-0123456789abcdef",
}
CALLERS = {
    "app": 'source = "api"\nscope = "api"\n',
    "acme": 'source = "api"\ntenant = "acme"\n',
    "privacy": 'source = "api"\nscope = "api"\nerase = true\n',
}
#: Echo, streaming its replies word by word (into the task's Redis delta buffer).
STREAMING = '[model]\nprovider = "echo"\nstream_ms = 1\n'
AGENTS = {
    # everything memory has, scoped to the resource; history short so that the observer
    # distils the older messages and recall finds them
    "keeper": """
        notes = true
        memory = [{ block = "prefs", mode = "write" }]
        tools = ["tests.support.shop_tools:track", "schedule_followup"]
        max_steps = 4
        """
    + STREAMING
    + """
        [history]
        max_items = 2
        [working_memory]
        scope = "resource"
        [recall]
        scope = "resource"
        threshold = -1.0
        [observations]
        token_threshold = 200
    """,
    "courier": STREAMING + "[working_memory]\n",
    "guarded": """
        model = "echo"
        tools = [{ tool = "tests.support.shop_tools:track", approval = "required" }]
    """,
    "listener": """
        model = "echo"
        tools = [{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1h" }]
    """,
}
EVENT = "payment.cleared"
#: Words enough for the observer's threshold (200 tokens) within two messages.
FILLER = " ".join(f"filler{i}" for i in range(160))


class Refuser:
    """A receiver that answers every request 500 with the start of the body it was sent (as
    many do in their error), so a failed delivery's journal holds the reply's text."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = b"refused: " + raw[:150]
                self.send_response(500)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def refuser() -> Iterator[Refuser]:
    server = Refuser()
    yield server
    server.stop()


@pytest.fixture
def config(tmp_path: Path, refuser: Refuser) -> Path:
    deployments = {
        **{KEEP[who]: f'agent = "keeper"\nnamespace = "{NAMESPACE[who]}"\n' for who in KEEP},
        "courier": (
            'agent = "courier"\n[reply]\n'
            f'url = "{refuser.url}/refuse/{{labels.topic}}"\nattempts = 1\ntimeout = "5s"\n'
        ),
        "guarded": 'agent = "guarded"\n',
        "listener": 'agent = "listener"\n',
    }
    root = write_config(tmp_path / "config", AGENTS, deployments)
    (root / "callers").mkdir()
    for name, body in CALLERS.items():
        digest = hashlib.sha256(KEYS[name].encode()).hexdigest()
        (root / "callers" / f"{name}.toml").write_text(f'{body}key_sha256 = "{digest}"\n')
    return root


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


# -- the fleet's answers -----------------------------------------------------------------------


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def submit(
    api: httpx.Client,
    deployment: str,
    text: str,
    key: str,
    resource: str,
    who: str = "app",
    **more: Any,
) -> uuid.UUID:
    body = {"deployment": deployment, "input": text, "conversationKey": key, "resourceId": resource}
    r = api.post("/v1/tasks", json=body | more, headers=auth(who))
    assert r.status_code == 202, r.text
    return uuid.UUID(r.json()["id"])


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float = 30) -> Task:
    task = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )
    assert task.status == TaskStatus.SUCCEEDED, task.error
    return task


def waiting(rt: Runtime, task_id: uuid.UUID) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status == TaskStatus.WAITING and t,
        30,
        what=f"task {task_id} to wait",
    )


def embedded(rt: Runtime, conversation_id: uuid.UUID) -> int:
    e = s.message_embeddings
    with rt.store.read() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(e).where(e.c.conversation_id == conversation_id)
            ).scalar_one()
        )


def tool_line(name: str, args: dict[str, Any]) -> str:
    return f"/tool {name} {json.dumps(args)}"


# -- planting ------------------------------------------------------------------------------------


def plant_elsewhere(api: httpx.Client, resource: str) -> dict[str, uuid.UUID]:
    """The paths outside the memory agent: a conversation's working memory, a streamed reply
    whose delivery fails, an approval, an event's data. Task ids by path."""
    c, tag = CANARY[resource], TAG[resource]
    courier = "\n".join(
        (
            tool_line("update_working_memory", {"patch": {"state": f"conversation {c}"}}),
            f"{c} please deliver this",
        )
    )
    return {
        "courier": submit(
            api,
            "courier",
            courier,
            f"{tag}-courier",
            resource,
            labels={"topic": c},
            idempotencyKey=f"idem-{c}",
        ),
        "approval": submit(
            api,
            "guarded",
            tool_line("track", {"carrier": "dhl", "code": c}),
            f"{c}-guarded",  # a conversation key carrying it too
            resource,
        ),
        "event": submit(
            api,
            "listener",
            tool_line("wait_for_event", {"event": EVENT, "key": f"{tag}-pay", "timeout": "1h"}),
            f"{tag}-listener",
            resource,
        ),
    }


def plant_memory(rt: Runtime, api: httpx.Client) -> None:
    """The memory agent's paths, for both resources at once (each in its namespace): tools
    (note, block, resource working memory, a tool's arguments and result, a follow-up), then
    more history in that conversation (observed) and a run of another conversation that recalls
    the first (once its messages are embedded)."""
    first: dict[str, Task] = {}
    for who in (ADA, BOB):
        c, tag = CANARY[who], TAG[who]
        tools = "\n".join(
            (
                f"{c} says: {FILLER}",
                tool_line("memory_set", {"key": tag, "body": f"note {c}"}),
                tool_line("memory_update", {"block": "prefs", "op": "append", "text": c}),
                tool_line("update_working_memory", {"patch": {tag: f"resource {c}"}}),
                tool_line("track", {"carrier": "ups", "code": c}),
                tool_line("schedule_followup", {"after": "1h", "input": f"follow up on {c}"}),
            )
        )
        first[who] = rt.store.get_task(
            submit(api, KEEP[who], tools, f"{tag}-keep", who, labels={"topic": c})
        )
    later: dict[str, uuid.UUID] = {}
    for who, task in first.items():
        c, tag = CANARY[who], TAG[who]
        conversation = finished(rt, task.id).conversation_id
        wait_for(
            lambda conversation=conversation: embedded(rt, conversation) >= 2,
            30,
            what=f"the messages of {tag}'s first conversation to be embedded",
        )
        later[f"{tag}-more"] = submit(api, KEEP[who], f"{c} again: {FILLER}", f"{tag}-keep", who)
        later[who] = submit(api, KEEP[who], "what do you remember?", f"{tag}-recall", who)
    for task_id in later.values():
        finished(rt, task_id)
    for who, task in first.items():
        wait_for(
            lambda task=task: rt.store.observations(task.conversation_id),
            30,
            what=f"the observer to distil {TAG[who]}'s history",
        )
        hits = rt.store.runs_of(later[who])[0].context["recall"]["hits"]
        assert any(CANARY[who] in json.dumps(h) for h in hits), f"no recall hit: {hits}"


def settle_elsewhere(rt: Runtime, tasks: dict[str, uuid.UUID], resource: str) -> None:
    """Wait until those paths stored their text: the delivery failed, the approval waits, the
    event resolved the wait and its task finished."""
    c, tag = CANARY[resource], TAG[resource]
    finished(rt, tasks["courier"])

    def failed() -> bool:
        found = rt.store.task_deliveries(tasks["courier"])
        return bool(found) and all(d.status in delivery_rules.FINAL for d in found)

    wait_for(failed, 30, what=f"{tag}'s delivery to fail")
    [delivery] = rt.store.task_deliveries(tasks["courier"])
    assert delivery.status == "failed" and c in (delivery.error or ""), delivery
    [approval] = rt.store.waits_of(waiting(rt, tasks["approval"]).id, pending=True)
    assert approval.arguments == {"carrier": "dhl", "code": c}
    waiting(rt, tasks["event"])
    event = event_waits.new_event(
        name=EVENT,
        key=f"{tag}-pay",
        data={"memo": f"paid {c}"},
        event_id=f"evt-{tag}",
        tenant="default",
        scope="api",
        sender="test",
        now=rt.dispatcher.clock(),
        max_bytes=16384,
    )
    assert rt.dispatcher.waiting.send_event(event).resolved == 1
    finished(rt, tasks["event"])


# -- the test ------------------------------------------------------------------------------------

#: Where each canary must be before the erasure (every path above stored it).
PLANTED = {
    "tasks",
    "conversations",
    "runs",
    "traces",
    "messages",
    "idempotency_keys",
    "notes",
    "memory_blocks",
    "memory_block_versions",
    "working_memory",
    "message_embeddings",
    "observations",
    "followups",
    "deliveries",
    "waits",
    "inbound_events",
}
#: Export lines that must hold ada's canary.
EXPORTED = {
    "conversation",
    "task",
    "run",
    "step",
    "message",
    "note",
    "observation",
    "followup",
    "wait",
    "delivery",
    "working_memory",
    "memory_version",
}


def test_an_erased_resource_leaves_no_canary_in_postgres_or_redis(
    rt: Runtime, fleet: Fleet, pg_server: PgServer, pg_url: str, redis_url: str
) -> None:
    worker = fleet.worker("w", concurrency=4, ready=False)
    base = fleet.serve()
    worker.wait_log(r"ready\.")
    ada_c, bob_c = CANARY[ADA], CANARY[BOB]
    with httpx.Client(base_url=base, timeout=30) as api:
        elsewhere = {who: plant_elsewhere(api, who) for who in (BOB, ADA)}
        acme = submit(
            api,
            "keep",
            "\n".join(
                (
                    f"{ACME_CANARY} in another tenant",
                    tool_line("update_working_memory", {"patch": {"acme": ACME_CANARY}}),
                )
            ),
            "acme-keep",
            ADA,
            who="acme",
        )
        rt.store.edit_block(
            "shop",
            "prefs",
            Edit("replace", HOUSE_RULES),
            author="user",
            now=rt.dispatcher.clock(),
            tenant="default",
        )
        plant_memory(rt, api)
        for who in (BOB, ADA):
            settle_elsewhere(rt, elsewhere[who], who)
        finished(rt, acme)

        # every path stored each canary; the streamed replies are buffered in Redis
        before = pg_dump(pg_server, pg_url)
        for canary in (ada_c, bob_c):
            missing = PLANTED - set(dump_hits(before, canary))
            assert not missing, f"{canary} was not planted in {sorted(missing)}"
        bob_before = dump_hits(before, bob_c)
        assert "working_memory" in dump_hits(before, ACME_CANARY)
        ada_redis = redis_hits(redis_url, ada_c)
        assert any(k.startswith("fleet:deltas:") for k in ada_redis), ada_redis
        assert redis_hits(redis_url, bob_c)

        # the export holds every path's canary of ada, nothing of bob's or of another tenant's
        path = f"/v1/resources/{quote(ADA, safe='')}"
        r = api.get(f"{path}/export", params={"tenant": "default"}, headers=auth("privacy"))
        assert r.status_code == 200, r.text
        lines = [json.loads(x) for x in r.text.splitlines()]
        assert lines[0]["kind"] == "export" and lines[0]["resource"] == ADA
        exported = {ln["kind"] for ln in lines[1:] if ada_c in json.dumps(ln)}
        assert exported >= EXPORTED, f"no {sorted(EXPORTED - exported)} line holds {ada_c}"
        waits = [ln["record"] for ln in lines if ln["kind"] == "wait"]
        assert {"kind": "approval", "code": ada_c} in [
            {"kind": w["kind"], "code": w["arguments"].get("code")} for w in waits
        ]
        assert any(w["kind"] == "event" and ada_c in json.dumps(w["data"]) for w in waits)
        assert sum(ln["kind"] == "conversation" for ln in lines) == 5
        for other in (bob_c, ACME_CANARY):
            leaked = [
                (ln["kind"], [k for k, v in ln["record"].items() if other in json.dumps(v)])
                for ln in lines[1:]
                if other in json.dumps(ln)
            ]
            assert not leaked, f"{other} exported with ada's data: {leaked}"
        assert {ln["record"].get("tenant", "default") for ln in lines[1:]} == {"default"}

        # the erasure: ada's approval still waits, so it is cancelled first
        r = api.delete(
            path, params={"tenant": "default", "cancelRunning": "true"}, headers=auth("privacy")
        )
        assert r.status_code == 200, r.text
        erased = r.json()
        assert erased["cancelled"] == 1 and erased["counts"]["conversations"] == 5, erased
        assert erased["counts"]["stream_buffers"] >= 2, erased

        after = pg_dump(pg_server, pg_url)
        assert dump_hits(after, ada_c) == {}, f"{ada_c} left in the database"
        assert redis_hits(redis_url, ada_c) == {}, f"{ada_c} left in Redis"
        # bob's data and the other tenant's are untouched
        bob_after = dump_hits(after, bob_c)
        for table, n in bob_before.items():
            assert bob_after.get(table, 0) >= n, (table, bob_before, bob_after)
        assert "working_memory" in dump_hits(after, ACME_CANARY)
        assert redis_hits(redis_url, bob_c)
        # ada's version of the block went; the block is back at the person's version
        [version] = rt.store.block_history("shop", "prefs", tenant="default")
        assert (version.value, version.author) == (HOUSE_RULES, "user")
        b = s.memory_blocks
        with rt.store.read() as conn:
            value = conn.execute(
                select(b.c.value).where(b.c.tenant == "default", b.c.namespace == "shop")
            ).scalar_one()
        assert value == HOUSE_RULES
        [version] = rt.store.block_history("bobshop", "prefs", tenant="default")
        assert bob_c in version.value

        # new work naming ada is refused; bob's runs
        refused = api.post(
            "/v1/tasks",
            json={"deployment": "keep", "input": "again", "resourceId": ADA},
            headers=auth("app"),
        )
        assert refused.status_code == 409, refused.text
        finished(rt, submit(api, KEEP[BOB], f"{bob_c} still here", "bob-keep-2", BOB))
        assert redis_hits(redis_url, ada_c) == {}
