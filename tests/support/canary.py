"""The canary test of a resource's erasure, shared by its two runs: in embedded mode
(``tests/unit/test_data_rights_embedded.py``: SQLite, the app's own threads) and on a real fleet
(``tests/integration/test_data_rights_fleet.py``: PostgreSQL, Redis, a Celery worker,
``fleet serve``). A canary string of ``ada@example.com`` is planted through every path that
stores text, another of ``bob@example.com`` through the same paths, a third of
``ada@example.com`` in another tenant (``acme``); each run then looks for them where its mode
keeps data.

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
- recall and observations: the background job embeds the messages (``message_embeddings``,
  labels included), a later run of another conversation of the resource recalls them (its
  ``runs.context``), and the observer distils the history (``observations``);
- a failed delivery: the receiver (``Refuser``) answers 500 with the body it was sent, which the
  delivery's journal keeps (``deliveries``; its URL carries a label too);
- an approval's arguments: a tool needing approval parks the task (``waits.arguments``); the
  erasure cancels it first;
- an event's data: ``wait_for_event`` resolved by an event carrying the canary
  (``inbound_events``, ``waits.data``); each mode says how the event is sent.

Nothing here starts anything on import: the receiver is started by its test.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from fleet.domain import delivery as delivery_rules
from fleet.domain.blocks import Edit
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.callers import auth as key_auth
from tests.support.callers import write_callers
from tests.support.fleet import wait_for

#: The app's client: ``fleet serve`` over HTTP, or the app in-process.
Api = httpx.Client | TestClient
#: Sends the event that resolves a resource's ``wait_for_event``: (its tag, key, data).
SendEvent = Callable[[str, str, dict[str, Any]], None]

ADA, BOB = "ada@example.com", "bob@example.com"
CANARY = {ADA: "CANARY-ADA-7f3a", BOB: "CANARY-BOB-91c2"}
#: ada's canary in another tenant (``acme``): never exported with, nor erased by, default's ada.
ACME_CANARY = "CANARY-ACME-5d0e"
TAG = {ADA: "ada", BOB: "bob"}
#: ada's resource as the API names it.
ADA_PATH = f"/v1/resources/{quote(ADA, safe='')}"
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
#: Echo, streaming its replies word by word (on a fleet, into the task's Redis delta buffer).
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


class Refuser:
    """A receiver that answers every request 500 with the start of the body it was sent (as
    many do in their error), so a failed delivery's journal holds the reply's text. Serving
    from its start until ``stop`` (or the end of its ``with`` block)."""

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

    def __enter__(self) -> Refuser:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def write_canary_config(root: Path, refuser_url: str) -> Path:
    """The agents, deployments (the courier delivering to ``refuser_url``) and callers with
    their keys, in ``root``."""
    deployments = {
        **{KEEP[who]: f'agent = "keeper"\nnamespace = "{NAMESPACE[who]}"\n' for who in KEEP},
        "courier": (
            'agent = "courier"\n[reply]\n'
            f'url = "{refuser_url}/refuse/{{labels.topic}}"\nattempts = 1\ntimeout = "5s"\n'
        ),
        "guarded": 'agent = "guarded"\n',
        "listener": 'agent = "listener"\n',
    }
    return write_callers(write_config(root, AGENTS, deployments), CALLERS, KEYS)


# -- the app's answers -------------------------------------------------------------------------


def auth(who: str) -> dict[str, str]:
    return key_auth(KEYS, who)


def submit(
    api: Api,
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


def finished(rt: Runtime, task_id: uuid.UUID, timeout: float) -> Task:
    task = wait_for(
        lambda: (t := rt.store.get_task(task_id)).status.terminal and t,
        timeout,
        what=f"task {task_id} to finish",
    )
    assert task.status == TaskStatus.SUCCEEDED, task.error
    return task


def waiting(rt: Runtime, task_id: uuid.UUID, timeout: float) -> Task:
    return wait_for(
        lambda: (t := rt.store.get_task(task_id)).status == TaskStatus.WAITING and t,
        timeout,
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


def plant_elsewhere(api: Api, resource: str) -> dict[str, uuid.UUID]:
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


def plant_memory(rt: Runtime, api: Api, timeout: float) -> None:
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
        conversation = conversations[who] = finished(rt, task_id, timeout).conversation_id
        wait_for(
            lambda conversation=conversation: embedded(rt, conversation) >= 2,
            timeout,
            what=f"the messages of {tag}'s first conversation to be embedded",
        )
        later[f"{tag}-more"] = submit(api, KEEP[who], f"{c} again: {FILLER}", f"{tag}-keep", who)
        later[who] = submit(api, KEEP[who], "what do you remember?", f"{tag}-recall", who)
    for task_id in later.values():
        finished(rt, task_id, timeout)
    for who, conversation in conversations.items():
        wait_for(
            lambda conversation=conversation: rt.store.observations(conversation),
            timeout,
            what=f"the observer to distil {TAG[who]}'s history",
        )
        hits = rt.store.runs_of(later[who])[0].context["recall"]["hits"]
        assert any(CANARY[who] in json.dumps(h) for h in hits), f"no recall hit: {hits}"


def settle_elsewhere(
    rt: Runtime,
    tasks: dict[str, uuid.UUID],
    resource: str,
    send_event: SendEvent,
    timeout: float,
) -> None:
    """Wait until those paths stored their text: the delivery failed, the approval waits, the
    event (sent by ``send_event``) resolved the wait and its task finished."""
    c, tag = CANARY[resource], TAG[resource]
    finished(rt, tasks["courier"], timeout)

    def failed() -> bool:
        found = rt.store.task_deliveries(tasks["courier"])
        return bool(found) and all(d.status in delivery_rules.FINAL for d in found)

    wait_for(failed, timeout, what=f"{tag}'s delivery to fail")
    [delivery] = rt.store.task_deliveries(tasks["courier"])
    assert delivery.status == "failed" and c in (delivery.error or ""), delivery
    [approval] = rt.store.waits_of(waiting(rt, tasks["approval"], timeout).id, pending=True)
    assert approval.arguments == {"carrier": "dhl", "code": c}
    waiting(rt, tasks["event"], timeout)
    send_event(tag, f"{tag}-pay", {"memo": f"paid {c}"})
    finished(rt, tasks["event"], timeout)


def plant(
    rt: Runtime, api: Api, send_event: SendEvent, timeout: float
) -> dict[str, dict[str, uuid.UUID]]:
    """Every canary through every path (ada's and bob's, and ada's in tenant acme), each path
    waited for until it stored its text. The tasks outside the memory agent, by resource."""
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
    plant_memory(rt, api, timeout)
    for who in (BOB, ADA):
        settle_elsewhere(rt, elsewhere[who], who, send_event, timeout)
    finished(rt, acme, timeout)
    return elsewhere


# -- the checks ----------------------------------------------------------------------------------

#: Where a canary is kept: table → occurrences (each mode reads its own store).
Hits = Callable[[str], dict[str, int]]


def check_planted(hits: Hits) -> dict[str, int]:
    """Every path stored each canary, the other tenant's too; where bob's is, returned to
    compare with after the erasure."""
    for canary in (CANARY[ADA], CANARY[BOB]):
        missing = PLANTED - set(hits(canary))
        assert not missing, f"{canary} was not planted in {sorted(missing)}"
    bob_before = hits(CANARY[BOB])
    assert "working_memory" in hits(ACME_CANARY)
    return bob_before


def check_export(api: Api) -> None:
    """The export holds every path's canary of ada, nothing of bob's or of another tenant's."""
    ada_c = CANARY[ADA]
    r = api.get(f"{ADA_PATH}/export", params={"tenant": "default"}, headers=auth("privacy"))
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
    for other in (CANARY[BOB], ACME_CANARY):
        leaked = [
            (ln["kind"], [k for k, v in ln["record"].items() if other in json.dumps(v)])
            for ln in lines[1:]
            if other in json.dumps(ln)
        ]
        assert not leaked, f"{other} exported with ada's data: {leaked}"
    assert {ln["record"].get("tenant", "default") for ln in lines[1:]} == {"default"}


def erase(api: Api, **params: str) -> dict[str, Any]:
    """The erasure of ada (with ``params``): ada's approval still waits, so it is cancelled
    first; the answer."""
    r = api.delete(ADA_PATH, params={**params, "cancelRunning": "true"}, headers=auth("privacy"))
    assert r.status_code == 200, r.text
    erased: dict[str, Any] = r.json()
    assert erased["cancelled"] == 1 and erased["counts"]["conversations"] == 5, erased
    return erased


def check_untouched(hits: Hits, bob_before: dict[str, int]) -> None:
    """After the erasure, bob's data and the other tenant's are all still there."""
    bob_after = hits(CANARY[BOB])
    for table, n in bob_before.items():
        assert bob_after.get(table, 0) >= n, (table, bob_before, bob_after)
    assert "working_memory" in hits(ACME_CANARY)


def check_block_reset(rt: Runtime) -> None:
    """ada's version of the block went; the block is back at the person's version (bob's
    namespace keeps his)."""
    [version] = rt.store.block_history("shop", "prefs", tenant="default")
    assert (version.value, version.author) == (HOUSE_RULES, "user")
    b = s.memory_blocks
    with rt.store.read() as conn:
        value = conn.execute(
            select(b.c.value).where(b.c.tenant == "default", b.c.namespace == "shop")
        ).scalar_one()
    assert value == HOUSE_RULES
    [version] = rt.store.block_history("bobshop", "prefs", tenant="default")
    assert CANARY[BOB] in version.value


def check_new_work(rt: Runtime, api: Api, timeout: float) -> None:
    """New work naming ada is refused; bob's runs."""
    refused = api.post(
        "/v1/tasks",
        json={"deployment": "keep", "input": "again", "resourceId": ADA},
        headers=auth("app"),
    )
    assert refused.status_code == 409, refused.text
    bob_c = CANARY[BOB]
    finished(rt, submit(api, KEEP[BOB], f"{bob_c} still here", "bob-keep-2", BOB), timeout)
