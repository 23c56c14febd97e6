"""The canary test of a resource's erasure in embedded mode (SQLite, no Redis, one process, the
tasks run by the app's own threads): a canary string of ``ada@example.com`` is planted through
every path that stores text, another of ``bob@example.com`` through the same paths, a third of
``ada@example.com`` in another tenant; the export holds every canary of ada (and nothing of bob's
or the other tenant's); after ``DELETE /v1/resources/ada%40example.com`` the raw bytes of every
SQLite file of the home folder (``fleet.db``, its ``-wal`` and ``-shm``) hold ada's canary
nowhere, while bob's and the other tenant's are still there; new tasks naming ada are refused,
bob's are not. The fleet-mode twin is ``tests/integration/test_data_rights_fleet.py``.

The paths (each checked to have really stored the canary before the erasure):

- input, reply, labels, idempotency key: every submission (``tasks``, ``messages``, ``runs``,
  ``idempotency_keys``);
- tool arguments and results: ``track`` (a test tool whose result repeats its argument), the
  memory tools and ``schedule_followup`` (``traces``, ``followups``);
- a memory block: ``memory_update`` appends to the namespace's block (``memory_block_versions``,
  ``memory_blocks``; a person wrote its first version, which the erasure resets it to);
- a note: ``memory_set`` (``notes``);
- working memory: ``update_working_memory`` in a resource-scoped agent (its resource's key) and a
  conversation-scoped one (``working_memory``);
- recall and observations: the background job (a thread here) embeds the messages with the
  local embedder (``message_embeddings``), a later run of another conversation of the resource
  recalls them (its ``runs.context``), and the observer distils the history (``observations``);
- a failed delivery: a receiver on 127.0.0.1 answers 500 with the body it was sent, which the
  delivery's journal keeps (``deliveries``; its URL carries a label too);
- an approval's arguments: a tool needing approval parks the task (``waits.arguments``); the
  erasure cancels it first;
- an event's data: ``wait_for_event`` resolved by ``POST /v1/events`` carrying the canary
  (``inbound_events``, ``waits.data``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.domain import delivery as delivery_rules
from fleet.domain.blocks import Edit
from fleet.domain.values import Task, TaskStatus
from fleet.errors import NotFound
from fleet.runtime import Runtime, build
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import wait_for

pytestmark = pytest.mark.timeout(90)

ADA, BOB = "ada@example.com", "bob@example.com"
CANARY = {ADA: "CANARY-ADA-7f3a", BOB: "CANARY-BOB-91c2"}
#: ada's canary in another tenant (``acme``): never exported with, nor erased by, default's ada.
ACME_CANARY = "CANARY-ACME-5d0e"
TAG = {ADA: "ada", BOB: "bob"}
#: The memory agent's deployment and namespace of each resource (one namespace each: a block
#: is the namespace's, shared by every resource whose runs see it; see the fleet twin).
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
#: Echo, streaming its replies word by word (within this process, embedded).
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
TIMEOUT = 20.0


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
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def refuser() -> Iterator[Refuser]:
    server = Refuser()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def rt(tmp_path: Path, home: Path, refuser: Refuser) -> Iterator[Runtime]:
    deployments = {
        **{KEEP[who]: f'agent = "keeper"\nnamespace = "{NAMESPACE[who]}"\n' for who in KEEP},
        "courier": (
            'agent = "courier"\n[reply]\n'
            f'url = "{refuser.url}/refuse/{{labels.topic}}"\nattempts = 1\ntimeout = "5s"\n'
        ),
        "guarded": 'agent = "guarded"\n',
        "listener": 'agent = "listener"\n',
    }
    config = write_config(tmp_path / "config", AGENTS, deployments)
    (config / "callers").mkdir()
    for name, body in CALLERS.items():
        digest = hashlib.sha256(KEYS[name].encode()).hexdigest()
        (config / "callers" / f"{name}.toml").write_text(f'{body}key_sha256 = "{digest}"\n')
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


# -- the app's answers -------------------------------------------------------------------------


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def submit(
    api: TestClient,
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


def finished(rt: Runtime, task_id: uuid.UUID) -> Task:
    task = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        TIMEOUT,
        what=f"task {task_id} to finish",
    )
    assert task.status == TaskStatus.SUCCEEDED, task.error
    return task


def waiting(rt: Runtime, task_id: uuid.UUID) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status == TaskStatus.WAITING and t,
        TIMEOUT,
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


def plant_elsewhere(api: TestClient, resource: str) -> dict[str, uuid.UUID]:
    """The paths outside the memory agent: a conversation's working memory, a reply whose
    delivery fails, an approval, an event's data. Task ids by path."""
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


def plant_memory(rt: Runtime, api: TestClient) -> None:
    """The memory agent's paths, for both resources at once (each in its namespace): tools
    (note, block, resource working memory, a tool's arguments and result, a follow-up), then
    more history in that conversation (observed) and a run of another conversation that recalls
    the first (once its messages are embedded)."""
    first: dict[str, uuid.UUID] = {}
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
        first[who] = submit(api, KEEP[who], tools, f"{tag}-keep", who, labels={"topic": c})
    later: dict[str, uuid.UUID] = {}
    conversations: dict[str, uuid.UUID] = {}
    for who, task_id in first.items():
        c, tag = CANARY[who], TAG[who]
        conversation = conversations[who] = finished(rt, task_id).conversation_id
        wait_for(
            lambda conversation=conversation: embedded(rt, conversation) >= 2,
            TIMEOUT,
            what=f"the messages of {tag}'s first conversation to be embedded",
        )
        later[f"{tag}-more"] = submit(api, KEEP[who], f"{c} again: {FILLER}", f"{tag}-keep", who)
        later[who] = submit(api, KEEP[who], "what do you remember?", f"{tag}-recall", who)
    for task_id in later.values():
        finished(rt, task_id)
    for who, conversation in conversations.items():
        wait_for(
            lambda conversation=conversation: rt.store.observations(conversation),
            TIMEOUT,
            what=f"the observer to distil {TAG[who]}'s history",
        )
        hits = rt.store.runs_of(later[who])[0].context["recall"]["hits"]
        assert any(CANARY[who] in json.dumps(h) for h in hits), f"no recall hit: {hits}"


def settle_elsewhere(
    rt: Runtime, api: TestClient, tasks: dict[str, uuid.UUID], resource: str
) -> None:
    """Wait until those paths stored their text: the delivery failed, the approval waits, the
    event resolved the wait and its task finished."""
    c, tag = CANARY[resource], TAG[resource]
    finished(rt, tasks["courier"])

    def failed() -> bool:
        found = rt.store.task_deliveries(tasks["courier"])
        return bool(found) and all(d.status in delivery_rules.FINAL for d in found)

    wait_for(failed, TIMEOUT, what=f"{tag}'s delivery to fail")
    [delivery] = rt.store.task_deliveries(tasks["courier"])
    assert delivery.status == "failed" and c in (delivery.error or ""), delivery
    [approval] = rt.store.waits_of(waiting(rt, tasks["approval"]).id, pending=True)
    assert approval.arguments == {"carrier": "dhl", "code": c}
    waiting(rt, tasks["event"])
    sent = api.post(
        "/v1/events",
        json={"event": EVENT, "key": f"{tag}-pay", "data": {"memo": f"paid {c}"}, "id": tag},
        headers=auth("app"),
    )
    assert sent.status_code == 202 and sent.json()["resolved"] == 1, sent.text
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


def test_an_erased_resource_leaves_no_canary_in_the_sqlite_files(
    rt: Runtime, api: TestClient, home: Path
) -> None:
    ada_c, bob_c = CANARY[ADA], CANARY[BOB]
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
        settle_elsewhere(rt, api, elsewhere[who], who)
    finished(rt, acme)

    # every path stored each canary, and the files' bytes hold them
    for canary in (ada_c, bob_c):
        missing = PLANTED - set(table_hits(home, canary))
        assert not missing, f"{canary} was not planted in {sorted(missing)}"
    bob_before = table_hits(home, bob_c)
    assert "working_memory" in table_hits(home, ACME_CANARY)
    before = file_hits(home, ada_c)
    # the database and its write-ahead log (both read below, raw)
    assert {"fleet.db", "fleet.db-wal", "fleet.db-shm"} <= set(before), before
    assert sum(before.values()) > 0

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

    # the erasure: ada's approval still waits, so it is cancelled first (bob's is left)
    r = api.delete(path, params={"cancelRunning": "true"}, headers=auth("privacy"))
    assert r.status_code == 200, r.text
    erased = r.json()
    assert erased["cancelled"] == 1 and erased["counts"]["conversations"] == 5, erased
    with pytest.raises(NotFound):  # cancelled, then erased with its conversation
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
    bob_after = table_hits(home, bob_c)
    for table, n in bob_before.items():
        assert bob_after.get(table, 0) >= n, (table, bob_before, bob_after)
    assert "working_memory" in table_hits(home, ACME_CANARY)
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
    assert sum(file_hits(home, ada_c).values()) == 0, whereabouts(home, ada_c)
