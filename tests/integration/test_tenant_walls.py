"""Tenants are walls (DESIGN invariant 12; issue 27's first acceptance point), on real
PostgreSQL, Redis, Celery workers and ``fleet serve``.

Tenant alpha makes one of everything: API tasks and their runs, a running task with another
queued behind it, a singleton's conversation, a webhook trigger's task, A2A tasks (one running,
one with a push config), a task waiting for a tool approval, a deleted conversation's
tombstone, memory blocks (written by a run and by alpha's operator), messages and working memory
under a resource id, and a schedule. Tenant bravo (an API key, an operator key, an A2A key) then
tries each of them through every door:

1. every operation of the running server's ``/openapi.json`` (``HTTP`` names how each is tried,
   ``EXEMPT`` the keyless ones; an operation in neither fails the test), every route the
   schema hides (``HIDDEN``: the operator UI, the docs), and a run's ``signal_agent`` tool;
2. A2A, in protocol 1.0 and 0.3 (``A2AJsonRpc``): alpha's tasks are TaskNotFound to bravo's
   A2A caller, and alpha's contextId is a conversation of bravo's own;
3. the CLI against the server (``fleet tasks show``, ``fleet approvals reject``) with bravo's
   ``FLEET_API_KEY``;
4. bravo's own runs: their frozen prompts hold none of alpha's blocks, recalled messages or
   working memory, and bravo's singleton conversations are bravo's.

A read of alpha's thing must answer as a missing one does (the same 404 problem, its id
swapped); a write must also change nothing (alpha's rows are read before and after); no answer
bravo gets may hold alpha's text (every text alpha stores carries ``MARK``). Each breach is
collected as a leak, naming the route and what leaked; there must be none.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    InvalidParamsError,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as Proto
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from fleet.api.app import create_app
from fleet.domain import error_classes
from tests.conftest import PgServer, need, redis_client, write_config
from tests.support.fleet import running_fleet, wait_for
from tests.support.intake import A2A, caller_toml, reply_text, write_intake_config
from tests.support.receiver import Receiver

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

#: In every text alpha stores (inputs, block values, a push token); bravo never sends it, so an
#: answer to bravo that holds it leaked alpha's data.
MARK = "kumquat" + uuid.uuid4().hex[:12]
NAMESPACE = "shared"  # the memory namespace of ``keep``, in both tenants
RESOURCE = "cust-1"  # the resource id both tenants' recall runs name
WAIT = '/tool wait {"seconds": 60}'  # a run that holds its conversation until cancelled

CALLER_NAMES = ("alpha", "bravo", "alpha-ops", "bravo-ops", "alpha-a2a", "bravo-a2a", "alpha-hook")
KEYS = {name: f"k-{name}-{uuid.uuid4().hex}" for name in CALLER_NAMES}


def _env(name: str) -> str:
    return "FLEET_TEST_KEY_" + name.upper().replace("-", "_")


ENV = {_env(name): KEYS[name] for name in CALLER_NAMES}
CALLERS = {
    "alpha": caller_toml("api", _env("alpha")),  # tenant alpha (its file's name)
    "bravo": caller_toml("api", _env("bravo")),
    "alpha-ops": caller_toml("api", _env("alpha-ops")) + 'tenant = "alpha"\noperator = true\n',
    "bravo-ops": caller_toml("api", _env("bravo-ops")) + 'tenant = "bravo"\noperator = true\n',
    "alpha-a2a": caller_toml("a2a", _env("alpha-a2a")) + 'tenant = "alpha"\n',
    "bravo-a2a": caller_toml("a2a", _env("bravo-a2a")) + 'tenant = "bravo"\n',
    "alpha-hook": caller_toml("webhook:alpha-inbox", _env("alpha-hook")),  # its trigger's tenant
}
TRIGGERS = {
    "alpha-inbox": """
        deployment = "chat"
        tenant = "alpha"
        input = "/text"
        conversation_key = { header = "X-Thread" }
    """
}
AGENTS = {
    "keeper": 'model = "echo"\n'
    'memory = [{ block = "prefs", mode = "write" }, { block = "facts" }]\n',
    # every embedded message of the resource is a hit (threshold -1): a leak could not hide
    "signaller": 'model = "echo"\ndelegates = ["tooly"]\n',  # signal_agent, to tooly's tasks
    # its tool call waits for a person's approval (never given here: the tool never runs)
    "approver": 'model = "echo"\n'
    'tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]\n',
    # its run waits for an event of alpha's (never sent by alpha here)
    "payer": 'model = "echo"\n'
    'tools = [{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1d" }]\n',
    "recaller": 'model = "echo"\n[history]\nmax_items = 2\n'
    '[recall]\nthreshold = -1.0\ntop_k = 20\nscope = "resource"\n'
    '[working_memory]\nscope = "resource"\n',
}
DEPLOYMENTS = {
    "keep": f'agent = "keeper"\nnamespace = "{NAMESPACE}"\n',
    "signal": 'agent = "signaller"\n',
    "recall": 'agent = "recaller"\n',
    "recall-solo": 'agent = "recaller"\nkind = "singleton"\n',
    "solo2": 'agent = "echo"\nkind = "singleton"\n',  # nobody's: the answer for a missing one
    "approve": 'agent = "approver"\n',
    "pay": 'agent = "payer"\n',
}
PROBLEM = "application/problem+json"
#: The event alpha's waiting task waits for.
EVENT_WAIT = '/tool wait_for_event {"event": "payment.cleared", "key": "order-alpha"}'


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


# -- leaks ---------------------------------------------------------------------------------------


@dataclass
class Leaks:
    """Every breach of the wall found, as ``route: what``."""

    found: list[str] = field(default_factory=list)

    def add(self, route: str, what: str) -> None:
        self.found.append(f"{route}: {what}")

    def scan(self, route: str, what: str, body: str) -> None:
        """Alpha's text in an answer bravo got."""
        at = body.find(MARK)
        if at >= 0:
            self.add(route, f"{what} holds alpha's text: ...{body[max(0, at - 120) : at + 40]}...")

    def same(
        self,
        route: str,
        theirs: httpx.Response,
        missing: httpx.Response,
        swaps: tuple[tuple[str, str], ...],
    ) -> None:
        """``theirs`` (asking for alpha's thing) must answer as ``missing`` (asking for a thing
        nobody has) does, a 404 problem, once alpha's names in it are swapped for the missing
        one's."""
        req = missing.request
        assert missing.status_code == 404, (route, req.method, str(req.url), missing.text)
        what = f"{theirs.request.method} {theirs.request.url}"
        if theirs.status_code != 404:
            self.add(route, f"{what} answered {theirs.status_code}: {theirs.text[:300]}")
            return
        if theirs.headers.get("content-type") != PROBLEM:
            self.add(route, f"{what} answered {theirs.headers.get('content-type')}, not a problem")
        body = theirs.text
        for mine, other in swaps:
            body = body.replace(mine, other)
        if json.loads(body) != missing.json():
            self.add(route, f"{what} answered unlike a missing one: {theirs.text} / {missing.text}")

    def status(self, route: str, r: httpx.Response, *expected: int) -> bool:
        if r.status_code in expected:
            return True
        self.add(
            route, f"{r.request.method} {r.request.url} answered {r.status_code}: {r.text[:300]}"
        )
        return False

    def assert_none(self) -> None:
        listed = "\n".join(f"  - {leak}" for leak in self.found)
        assert not self.found, f"{len(self.found)} leak(s) through the tenant wall:\n{listed}"


@dataclass
class Side:
    """One of bravo's keys (or no key) on the HTTP API; every answer is scanned for alpha's
    text."""

    http: httpx.Client
    leaks: Leaks
    key: str | None

    def headers(self, **more: str) -> dict[str, str]:
        if self.key is not None:
            more["Authorization"] = f"Bearer {self.key}"
        return more

    def __call__(self, route: str, method: str, url: str, **kw: Any) -> httpx.Response:
        headers = self.headers(**kw.pop("headers", {}))
        r = self.http.request(method, url, headers=headers, **kw)
        self.leaks.scan(route, f"{method} {r.request.url} ({r.status_code})", r.text)
        return r


# -- alpha's world -------------------------------------------------------------------------------


@dataclass
class World:
    """The running fleet and alpha's things in it, by label."""

    base: str
    http: httpx.Client
    db: Engine
    receiver: Receiver
    tasks: dict[str, str] = field(default_factory=dict)

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        with self.db.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]

    def submit(self, who: str, deployment: str, text_: str, **body: str) -> str:
        r = self.http.post(
            "/v1/tasks", json={"deployment": deployment, "input": text_, **body}, headers=auth(who)
        )
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def status(self, task_id: str) -> str:
        found = self.rows("SELECT status FROM tasks WHERE id = :id", id=task_id)
        return str(found[0][0]) if found else "deleted"

    def done(self, task_id: str, timeout: float = 60) -> str:
        """Wait for the task to end; its status."""
        terminal = ("succeeded", "failed", "cancelled", "deleted")
        return str(
            wait_for(
                lambda: (s := self.status(task_id)) in terminal and s,
                timeout,
                what=f"task {task_id}",
            )
        )

    def running(self, *task_ids: str) -> None:
        wait_for(
            lambda: all(self.status(t) == "running" for t in task_ids), 30, what="tasks to run"
        )

    def reply(self, task_id: str, who: str) -> str:
        r = self.http.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth(who))
        assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
        return str(r.json()["reply"])

    def run_of(self, label: str) -> str:
        found = self.rows(
            "SELECT id FROM runs WHERE task_id = :t ORDER BY attempt", t=self.tasks[label]
        )
        return str(found[0][0])

    def alpha_conversations(self) -> set[str]:
        return {str(r[0]) for r in self.rows("SELECT id FROM conversations WHERE tenant = 'alpha'")}


#: Alpha's rows a write of bravo's might touch (what must not change).
SNAPSHOT = {
    "tasks": "SELECT id, status, inbox, attempts, cancel_requested, generation, seq FROM tasks "
    "WHERE tenant = 'alpha' ORDER BY id",
    "runs": "SELECT r.id, r.status FROM runs r JOIN tasks t ON t.id = r.task_id "
    "WHERE t.tenant = 'alpha' ORDER BY r.id",
    "conversations": "SELECT id, generation, last_seq FROM conversations WHERE tenant = 'alpha' "
    "ORDER BY id",
    "messages": "SELECT m.conversation_id, count(*) FROM messages m JOIN conversations c "
    "ON c.id = m.conversation_id WHERE c.tenant = 'alpha' GROUP BY 1 ORDER BY 1",
    "run inbox": "SELECT i.task_id, count(*) FROM run_inbox i JOIN tasks t ON t.id = i.task_id "
    "WHERE t.tenant = 'alpha' GROUP BY 1 ORDER BY 1",
    "notes": "SELECT n.conversation_id, n.key, n.body FROM notes n JOIN conversations c "
    "ON c.id = n.conversation_id WHERE c.tenant = 'alpha' ORDER BY 1, 2",
    "memory blocks": "SELECT namespace, name, version, value FROM memory_blocks "
    "WHERE tenant = 'alpha' ORDER BY 1, 2",
    "tombstones": "SELECT deployment, scope, key FROM conversation_tombstones "
    "WHERE tenant = 'alpha' ORDER BY 1, 2, 3",
    "idempotency keys": "SELECT scope, key FROM idempotency_keys WHERE tenant = 'alpha' "
    "ORDER BY 1, 2",
    "push configs": "SELECT p.task_id, p.id, p.url, p.token, p.owner FROM push_configs p "
    "JOIN tasks t ON t.id = p.task_id WHERE t.tenant = 'alpha' ORDER BY 1, 2",
    "schedules": "SELECT name, scope, source, spec::text, last_tick, next_tick FROM schedules "
    "WHERE tenant = 'alpha' ORDER BY 1",
    "waits": "SELECT id, task_id, status, decided_by, reason, event_id FROM waits "
    "WHERE tenant = 'alpha' ORDER BY 1",
    "events": "SELECT event_id, resolved FROM inbound_events WHERE tenant = 'alpha' ORDER BY 1",
    "erased resources": "SELECT digest FROM resource_tombstones WHERE tenant = 'alpha'",
    "working memory": "SELECT key, version FROM working_memory WHERE key LIKE 'resource:alpha/%' "
    "OR key IN (SELECT 'conversation:' || id FROM conversations WHERE tenant = 'alpha') "
    "ORDER BY 1",
}


def snapshot(w: World) -> dict[str, list[tuple[Any, ...]]]:
    return {name: w.rows(sql) for name, sql in SNAPSHOT.items()}


def unchanged(leaks: Leaks, before: dict[str, Any], after: dict[str, Any], by: str) -> None:
    for name in SNAPSHOT:
        if before[name] != after[name]:
            gone = [r for r in before[name] if r not in after[name]]
            new = [r for r in after[name] if r not in before[name]]
            leaks.add(by, f"alpha's {name} changed: was {gone}, now {new}")


def make_alpha(w: World) -> None:
    """One of everything, in tenant alpha; all finished."""
    t = w.tasks
    t["t1"] = w.submit(
        "alpha", "chat", f"one {MARK}", conversationKey="thread-one", idempotencyKey="idem-one"
    )
    t["t2"] = w.submit(
        "alpha", "chat", f"two {MARK}", conversationKey="thread-two", idempotencyKey="idem-two"
    )
    t["gone"] = w.submit("alpha", "chat", f"gone {MARK}", conversationKey="thread-gone")
    t["solo"] = w.submit("alpha", "solo", f"solo {MARK}")
    t["keep"] = w.submit(
        "alpha",
        "keep",
        f'/tool memory_update {{"block": "prefs", "op": "append", "text": "prefs {MARK}"}}',
        conversationKey="keeper",
    )
    t["recall"] = w.submit(
        "alpha",
        "recall",
        f"the password is {MARK}",
        conversationKey="recall-one",
        resourceId=RESOURCE,
    )
    t["recall-solo"] = w.submit(
        "alpha",
        "recall-solo",
        f'/tool update_working_memory {{"patch": {{"favourite": "wm {MARK}"}}}}',
        resourceId=RESOURCE,
    )
    for block, value in (("facts", "facts"), ("ledger", "ledger 1"), ("ledger", "ledger 2")):
        r = w.http.put(
            f"/v1/memory/blocks/{block}",
            params={"namespace": NAMESPACE},
            json={"value": f"{value} {MARK}"},
            headers=auth("alpha-ops"),
        )
        assert r.status_code == 200, r.text
    r = w.http.post(
        "/v1/schedules",
        json={"name": "nightly", "deployment": "chat", "cron": "0 3 * * *", "input": MARK},
        headers=auth("alpha"),
    )
    assert r.status_code == 201, r.text
    r = w.http.post(
        "/v1/triggers/alpha-inbox",
        json={"text": f"hook {MARK}"},
        headers={**auth("alpha-hook"), "X-Thread": "thread-hook"},
    )
    assert r.status_code == 202, r.text
    t["hook"] = r.json()["id"]

    async def a2a() -> None:
        async with A2A(w.base, "chat", key=KEYS["alpha-a2a"], version="1.0") as alice:
            first = await alice.send(f"a2a {MARK}", context_id="ctx-one", message_id="msg-one")
            second = await alice.send(f"again {MARK}", context_id="ctx-one")
            assert reply_text(second) == f"echo: again {MARK} [history: 2]"
            config = TaskPushNotificationConfig(
                task_id=first.id,
                id="alpha-push",
                url=f"{w.receiver.url}/ok/alpha",
                token=f"token-{MARK}",
            )
            await alice.client.create_task_push_notification_config(config)
            t["a2a"], t["a2a-2"] = first.id, second.id

    asyncio.run(a2a())
    for label, task_id in t.items():
        assert w.done(task_id) == "succeeded", label
    r = w.http.delete(
        "/v1/conversations/api:alpha:thread-gone",
        params={"deployment": "chat"},
        headers=auth("alpha-ops"),
    )
    assert r.status_code == 200, r.text
    del t["gone"]  # its task went with it; its tombstone stays
    assert w.rows("SELECT count(*) FROM conversation_tombstones WHERE tenant = 'alpha'") == [(1,)]
    # a task waiting for an approval (left waiting: nobody of alpha's decides)
    t["waiting"] = w.submit("alpha", "approve", "/tool count {}", conversationKey="asks")
    wait_for(
        lambda: w.status(t["waiting"]) == "waiting",
        30,
        what="alpha's task to wait for its approval",
    )
    # a task waiting for an event (left waiting: nobody of alpha's sends it)
    t["event-wait"] = w.submit("alpha", "pay", EVENT_WAIT, conversationKey="pays")
    wait_for(
        lambda: w.status(t["event-wait"]) == "waiting",
        30,
        what="alpha's task to wait for its event",
    )


@pytest.fixture(scope="module")
def module_pg(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    """A database of this module's own (cloned from the session's migrated template)."""
    name = f"fleet_walls_{uuid.uuid4().hex[:12]}"
    pg_server.admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield pg_server.url_for(name)
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def module_redis(redis_base: str) -> Iterator[str]:
    """The session's Redis database, emptied before and after this module."""
    client = redis_client(redis_base)
    try:
        client.ping()
    except Exception as exc:
        need("Redis", str(exc))
    client.flushdb()
    yield redis_base
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, module_pg: str, module_redis: str
) -> Iterator[World]:
    """One fleet for the module (a worker of 4 processes, ``fleet serve``) and alpha's things."""
    tmp = tmp_path_factory.mktemp("walls")
    config = write_intake_config(tmp / "config", triggers=TRIGGERS, callers=CALLERS)
    write_config(config, AGENTS, DEPLOYMENTS)
    receiver = Receiver().start()
    engine = create_engine(module_pg)
    try:
        with running_fleet(
            tmp,
            database_url=module_pg,
            redis_url=module_redis,
            config_dir=config,
            sweep_interval=1.0,
        ) as fleet:
            worker = fleet.worker("w1", concurrency=4, ready=False)
            base = fleet.serve(**ENV)
            worker.wait_log(r"ready\.")
            with httpx.Client(base_url=base, timeout=60) as http:
                w = World(base, http, engine, receiver)
                make_alpha(w)
                yield w
    finally:
        engine.dispose()
        receiver.stop()


# -- 1, 2. every route of the HTTP API, A2A's JSON-RPC among them --------------------------------


def tooly(page: str) -> tuple[int, int]:
    """The operator overview's counts of queued and running ``tooly`` tasks."""
    row = re.search(
        r'>tooly</a></th>\s*<td class="num">(\d+)</td>\s*<td class="num">(\d+)</td>', page
    )
    assert row, page
    return int(row.group(1)), int(row.group(2))


def tenant_row(page: str, tenant: str) -> tuple[int, int, int, int] | None:
    """The operator overview's running tasks, running conversations, queued and waiting tasks
    of a tenant (None: no row of it)."""
    cells = r'\s*<td class="num">(\d+)</td>'
    row = re.search(rf'<th scope="row">{tenant}</th>{cells * 5}', page)
    if row is None:
        return None
    return int(row.group(2)), int(row.group(3)), int(row.group(4)), int(row.group(5))


@dataclass
class UiSessions:
    """Signed-in operator UI sessions: bravo's operator (with its CSRF token) and alpha's."""

    bravo: httpx.Client
    csrf: str
    alpha: httpx.Client


@contextmanager
def ui_sessions(w: World) -> Iterator[UiSessions]:
    def sign_in(who: str) -> tuple[httpx.Client, str]:
        browser = httpx.Client(base_url=w.base, timeout=30)
        r = browser.post("/ui/login", data={"key": KEYS[who], "next": "/ui"})
        assert r.status_code == 303, r.text
        page = browser.get("/ui").text
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert found, page
        return browser, found.group(1)

    bravo, token = sign_in("bravo-ops")
    alpha, _ = sign_in("alpha-ops")
    try:
        yield UiSessions(bravo, token, alpha)
    finally:
        bravo.close()
        alpha.close()


class Probes:
    """How each operation is tried against alpha's things, by bravo's keys."""

    def __init__(self, w: World, leaks: Leaks, ui: UiSessions) -> None:
        self.w = w
        self.leaks = leaks
        self.bravo = Side(w.http, leaks, KEYS["bravo"])
        self.ops = Side(w.http, leaks, KEYS["bravo-ops"])
        self.nobody = Side(w.http, leaks, None)
        self.alpha_tasks = dict(w.tasks)
        self.alpha_runs = {label: w.run_of(label) for label in w.tasks if label != "queued"}
        self.alpha_conversations = w.alpha_conversations()
        self.missing = str(uuid.uuid4())
        self.browser, self.csrf, self.alpha_ui = ui.bravo, ui.csrf, ui.alpha
        ((approval,),) = w.rows("SELECT id FROM waits WHERE task_id = :t", t=w.tasks["waiting"])
        self.alpha_approval = str(approval)
        blocks = w.http.get("/v1/memory/blocks", headers=auth("alpha-ops")).json()["blocks"]
        self.alpha_blocks = {
            (b["namespace"], b["block"], b["version"], b["updatedAt"]) for b in blocks
        }

    def controls(self) -> None:
        """Alpha reaches what bravo is about to try, by the same routes: each probe could find
        something (run first, before any write of bravo's could change it)."""
        t1 = self.alpha_tasks["t1"]
        mine = self.w.http.get("/v1/tasks", params={"idPrefix": t1[:8]}, headers=auth("alpha"))
        assert [t["id"] for t in mine.json()["tasks"]] == [t1], mine.text
        listed = self.w.http.get("/v1/conversations", headers=auth("alpha-ops")).json()
        assert {c["id"] for c in listed["conversations"]} == self.alpha_conversations, listed
        assert {b[1] for b in self.alpha_blocks} == {"facts", "ledger", "prefs"}
        # The prune probes cut at "olderThan 1s": wait (on a fast machine the whole setup takes
        # less) until one of alpha's messages is old enough for a prune to reach.
        wait_for(
            lambda: self.w.rows(
                "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE c.tenant = 'alpha' AND m.created_at < now() - interval '1 second'"
            )[0][0],
            10,
            what="a message of alpha's old enough for a prune to reach",
        )
        overview = self.alpha_ui.get("/ui").text
        assert tooly(overview) == (1, 2), "alpha's queued and running tooly tasks"
        # (queued: the task behind the running one; waiting: for its approval, for its event)
        assert tenant_row(overview, "alpha") == (2, 2, 1, 2), overview
        tenants = self.w.http.get("/v1/tenants", headers=auth("alpha-ops")).json()["tenants"]
        figures = [
            (t["tenant"], t["running"], t["queued"], t["waiting"], t["tokensToday"] > 0)
            for t in tenants
        ]
        assert figures == [("alpha", 2, 1, 2, True)], tenants
        page = self.alpha_ui.get("/ui/conversations").text
        assert all(c in page for c in self.alpha_conversations), page
        approvals = self.w.http.get("/v1/approvals", headers=auth("alpha")).json()["approvals"]
        assert [a["id"] for a in approvals] == [self.alpha_approval], approvals
        assert self.alpha_approval in self.alpha_ui.get("/ui/approvals").text

    # -- tasks ----------------------------------------------------------------------------------

    def per_task(self, route: str, method: str, suffix: str = "", **kw: Any) -> None:
        """``/v1/tasks/{id}<suffix>`` for each of alpha's tasks, as for a missing id."""
        missing = self.bravo(route, method, f"/v1/tasks/{self.missing}{suffix}", **kw)
        for task_id in self.alpha_tasks.values():
            theirs = self.bravo(route, method, f"/v1/tasks/{task_id}{suffix}", **kw)
            self.leaks.same(route, theirs, missing, ((task_id, self.missing),))

    def get_task(self, route: str) -> None:
        self.per_task(route, "GET")
        self.per_task(route, "GET", params={"wait": 0.5})

    def list_task_runs(self, route: str) -> None:
        self.per_task(route, "GET", "/runs")

    def cancel_task(self, route: str) -> None:
        self.per_task(route, "POST", "/cancel")

    def signal_task(self, route: str) -> None:
        self.per_task(route, "POST", "/signal", json={"input": "bravo signals"})

    def list_approvals(self, route: str) -> None:
        alpha_ids = {self.alpha_approval, *self.alpha_tasks.values()}
        for side in (self.bravo, self.ops):
            r = side(route, "GET", "/v1/approvals")
            if self.leaks.status(route, r, 200):
                listed = r.json()["approvals"]
                shown = ({a["id"] for a in listed} | {a["taskId"] for a in listed}) & alpha_ids
                if shown:
                    self.leaks.add(route, f"GET /v1/approvals lists alpha's {shown}")

    def send_event(self, route: str) -> None:
        """Bravo's keys send the event alpha's task waits for: it resolves nothing of alpha's
        (bravo's own tenant), and naming alpha's tenant is refused (``waits`` and ``events``
        of the snapshot show nothing changed)."""
        body = {"event": "payment.cleared", "key": "order-alpha", "data": {"paid": True}}
        for n, side in enumerate((self.bravo, self.ops)):
            r = side(route, "POST", "/v1/events", json={**body, "id": f"probe-{n}"})
            if self.leaks.status(route, r, 202, 200) and r.json()["resolved"]:
                self.leaks.add(route, f"bravo's event resolved {r.json()['resolved']} wait(s)")
            named = side(route, "POST", "/v1/events", json={**body, "tenant": "alpha"})
            self.leaks.status(route, named, 403)

    def bulk_tasks(self, route: str) -> None:
        """Bravo's keys count, retry and cancel by filters: nothing of alpha's is matched,
        listed or changed (the snapshot), and the tenant filter naming alpha is refused."""
        alpha_ids = set(self.alpha_tasks.values())
        wide = {"status": ["queued", "waiting", "running", "leased", "interrupted"]}
        for side in (self.bravo, self.ops):
            for action, f in (("retry", {"status": ["failed", "cancelled"]}), ("cancel", wide)):
                body = {"action": action, "filter": f}
                dry = side(route, "POST", "/v1/tasks:bulk", json={**body, "dryRun": True})
                if self.leaks.status(route, dry, 200) and alpha_ids & set(dry.json()["sample"]):
                    self.leaks.add(route, f"a {action} dry run lists alpha's tasks")
                done = side(route, "POST", "/v1/tasks:bulk", json=body)
                self.leaks.status(route, done, 202)
            named = {"action": "retry", "filter": {"tenant": "alpha"}, "dryRun": True}
            self.leaks.status(route, side(route, "POST", "/v1/tasks:bulk", json=named), 403)

    def get_bulk_job(self, route: str) -> None:
        """Alpha's job (one that matched nothing) asked for by bravo's keys: as a missing one."""
        made = self.w.http.post(
            "/v1/tasks:bulk",
            json={"action": "retry", "filter": {"deployment": "nothing-here"}},
            headers=auth("alpha"),
        )
        assert made.status_code == 202, made.text
        job = made.json()["id"]
        missing = str(uuid.uuid4())
        for side in (self.bravo, self.ops):
            theirs = side(route, "GET", f"/v1/tasks:bulk/{job}")
            absent = side(route, "GET", f"/v1/tasks:bulk/{missing}")
            self.leaks.same(route, theirs, absent, ((job, missing),))

    def decide_approval(self, route: str) -> None:
        """Alpha's approval, named with each of alpha's tasks, decided by bravo's keys: as for a
        missing task."""
        approval = self.alpha_approval
        for side in (self.bravo, self.ops):
            for decision in ("approve", "reject"):
                body = {"decision": decision, "reason": "bravo decides"}
                url = "/v1/tasks/{}/approvals/" + approval
                missing = side(route, "POST", url.format(self.missing), json=body)
                for task_id in self.alpha_tasks.values():
                    theirs = side(route, "POST", url.format(task_id), json=body)
                    self.leaks.same(route, theirs, missing, ((task_id, self.missing),))

    def stream_task_events(self, route: str) -> None:
        def answer(task_id: str) -> httpx.Response:
            url = f"/v1/tasks/{task_id}/events"
            with self.w.http.stream("GET", url, headers=self.bravo.headers()) as r:
                if r.status_code == 200:  # a stream of alpha's task: never read it to its end
                    self.leaks.add(route, f"GET {url} streams alpha's task's events")
                    return r
                r.read()
            self.leaks.scan(route, f"GET {url}", r.text)
            return r

        missing = answer(self.missing)
        for task_id in self.alpha_tasks.values():
            theirs = answer(task_id)
            if theirs.status_code != 200:
                self.leaks.same(route, theirs, missing, ((task_id, self.missing),))

    def get_run(self, route: str) -> None:
        for params in ({}, {"include": "messages"}):
            missing = self.bravo(route, "GET", f"/v1/runs/{self.missing}", params=params)
            for run_id in self.alpha_runs.values():
                theirs = self.bravo(route, "GET", f"/v1/runs/{run_id}", params=params)
                self.leaks.same(route, theirs, missing, ((run_id, self.missing),))

    def list_tasks(self, route: str) -> None:
        alpha_ids = set(self.alpha_tasks.values())
        tries: list[dict[str, Any]] = [
            {},
            {"conversationKey": "thread-one"},
            {"conversationKey": "api:alpha:thread-one"},
            {"conversationKey": "deployment:singleton"},
            {"deployment": "solo"},
            {"deployment": "tooly", "status": "running"},
            {"status": "queued"},
            *({"idPrefix": task_id[:8]} for task_id in alpha_ids),
        ]
        for params in tries:
            r = self.bravo(route, "GET", "/v1/tasks", params=params)
            if self.leaks.status(route, r, 200):
                shown = {t["id"] for t in r.json()["tasks"]} & alpha_ids
                if shown:
                    self.leaks.add(route, f"GET {r.request.url} lists alpha's tasks {shown}")
        for key in ("a2a:alpha-a2a:ctx-one", "webhook:alpha-inbox:thread-hook"):
            r = self.bravo(route, "GET", "/v1/tasks", params={"conversationKey": key})
            self.leaks.status(route, r, 403)  # another source's scope, as before tenants

    def submit_task(self, route: str) -> None:
        made: list[str] = []
        for key, conversation in (
            ("thread-two", "api:bravo:thread-two"),
            ("api:alpha:thread-two", "api:bravo:alpha:thread-two"),
            ("api:thread-two", "api:bravo:thread-two"),
            ("thread-gone", "api:bravo:thread-gone"),
        ):
            body = {"deployment": "chat", "input": "bravo here", "conversationKey": key}
            r = self.bravo(route, "POST", "/v1/tasks", json=body)
            if not self.leaks.status(route, r, 202):
                continue
            got = r.json()
            if got["conversation"] != conversation:
                self.leaks.add(route, f"{key!r} joined {got['conversation']!r}")
            if "freshAfterDelete" in got:
                self.leaks.add(route, f"{key!r} answered with alpha's tombstone: {got}")
            made.append(got["id"])
        # alpha's idempotency keys, on alpha's deployment and on another (no 409 either)
        for deployment, idem in (("chat", "idem-one"), ("once", "idem-two")):
            body = {"deployment": deployment, "input": "bravo here", "idempotencyKey": idem}
            r = self.bravo(route, "POST", "/v1/tasks", json=body)
            if self.leaks.status(route, r, 202):
                got = r.json()
                if got["duplicate"] or got["id"] in self.alpha_tasks.values():
                    self.leaks.add(route, f"alpha's idempotency key {idem} answered {got}")
                made.append(got["id"])
        for key in ("a2a:alpha-a2a:ctx-one", "webhook:alpha-inbox:thread-hook"):
            body = {"deployment": "chat", "input": "bravo here", "conversationKey": key}
            self.leaks.status(route, self.bravo(route, "POST", "/v1/tasks", json=body), 403)
        ended = [
            self.bravo(route, "GET", f"/v1/tasks/{task_id}", params={"wait": 30}).json()
            for task_id in made
        ]
        replies = [task.get("reply") for task in ended]
        # thread-two twice (bare, legacy api:): bravo's one conversation, never alpha's
        expected = ["echo: bravo here [history: 0]", "echo: bravo here [history: 0]"]
        expected += ["echo: bravo here [history: 2]", "echo: bravo here [history: 0]"]
        expected += ["echo: bravo here [history: 0]", "echo: bravo here [history: 0]"]
        if replies != expected:
            self.leaks.add(route, f"bravo's tasks saw other histories: {replies}")

    # -- conversations (API callers) ------------------------------------------------------------

    def list_conversation_messages(self, route: str) -> None:
        chat = {"deployment": "chat"}
        for key in ("thread-one", "api:alpha:thread-one", "api:bravo:thread-one", "api:thread-one"):
            none = key.replace("thread-one", "thread-none")
            missing = self.bravo(route, "GET", f"/v1/conversations/{none}/messages", params=chat)
            theirs = self.bravo(route, "GET", f"/v1/conversations/{key}/messages", params=chat)
            self.leaks.same(route, theirs, missing, (("thread-one", "thread-none"),))
        for deployment in ("solo", "recall-solo"):  # alpha's singletons; solo2 is nobody's
            url = "/v1/conversations/deployment:singleton/messages"
            missing = self.bravo(route, "GET", url, params={"deployment": "solo2"})
            theirs = self.bravo(route, "GET", url, params={"deployment": deployment})
            self.leaks.same(route, theirs, missing, ((f"'{deployment}'", "'solo2'"),))
        for key in ("a2a:alpha-a2a:ctx-one", "webhook:alpha-inbox:thread-hook"):
            url = f"/v1/conversations/{key}/messages"
            r = self.bravo(route, "GET", url, params={"deployment": "chat"})
            self.leaks.status(route, r, 403)

    # -- conversations (operators) --------------------------------------------------------------

    #: (deployment, key, tenant, the part a missing one's key has instead): alpha's
    #: conversations as bravo's operator might name them.
    NAMED: tuple[tuple[str, str, str | None, tuple[str, str]], ...] = (
        ("chat", "api:alpha:thread-one", None, ("thread-one", "thread-none")),
        ("chat", "api:alpha:thread-one", "alpha", ("thread-one", "thread-none")),
        ("chat", "api:alpha:thread-one", "bravo", ("thread-one", "thread-none")),
        ("chat", "thread-one", "alpha", ("thread-one", "thread-none")),
        ("chat", "thread-one", None, ("thread-one", "thread-none")),
        ("chat", "a2a:alpha-a2a:ctx-one", None, ("ctx-one", "ctx-none")),
        ("chat", "a2a:alpha-a2a:ctx-one", "alpha", ("ctx-one", "ctx-none")),
        ("chat", "webhook:alpha-inbox:thread-hook", None, ("thread-hook", "hook-none")),
        ("solo", "deployment:singleton", "alpha", ("'solo'", "'solo2'")),
        ("recall-solo", "deployment:singleton", "alpha", ("'recall-solo'", "'solo2'")),
        ("tooly", "api:alpha:busy", None, ("busy", "busy-none")),
        ("tooly", "api:alpha:busy", "alpha", ("busy", "busy-none")),
    )

    def per_conversation(
        self,
        route: str,
        method: str,
        suffix: str = "",
        *,
        extra: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        for deployment, key, tenant, (mine, other) in self.NAMED:
            params = {"deployment": deployment, **(extra or {})}
            if tenant is not None:
                params["tenant"] = tenant
            singleton = mine.startswith("'")  # a missing singleton: one of solo2's
            missing = self.ops(
                route,
                method,
                f"/v1/conversations/{key if singleton else key.replace(mine, other)}{suffix}",
                params={**params, "deployment": "solo2"} if singleton else params,
                json=body,
            )
            theirs = self.ops(
                route, method, f"/v1/conversations/{key}{suffix}", params=params, json=body
            )
            self.leaks.same(route, theirs, missing, ((mine, other),))
        # an API key is no operator's (as before tenants): refused whoever's the conversation
        r = self.bravo(
            route, method, f"/v1/conversations/thread-one{suffix}", params={"deployment": "chat"}
        )
        self.leaks.status(route, r, 403)

    def get_conversation(self, route: str) -> None:
        self.per_conversation(route, "GET")

    def reset_conversation(self, route: str) -> None:
        self.per_conversation(route, "POST", "/reset", body={"cancelRunning": True})

    def delete_conversation(self, route: str) -> None:
        self.per_conversation(route, "DELETE", extra={"cancelRunning": "true"})

    # -- a person's data (operators, erase = true) ---------------------------------------------

    def export_resource(self, route: str) -> None:
        """Bravo's operator exports the resource id alpha's tasks name: in bravo's tenant it
        holds nothing of alpha's; naming alpha's tenant answers as a tenant nobody has."""
        url = f"/v1/resources/{RESOURCE}/export"
        mine = self.ops(route, "GET", url)
        if self.leaks.status(route, mine, 200):
            self.leaks.scan(route, "bravo's export of its own tenant", mine.text)
        theirs = self.ops(route, "GET", url, params={"tenant": "alpha"})
        missing = self.ops(route, "GET", url, params={"tenant": "nosuch"})
        self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        self.leaks.status(route, self.bravo(route, "GET", url), 403)

    def erase_resource(self, route: str) -> None:
        """Bravo's operator erases that id in its own tenant (alpha's rows stay: the
        snapshot) and in alpha's (as a tenant nobody has); bravo's API key may not."""
        url = f"/v1/resources/{RESOURCE}"
        mine = self.ops(route, "DELETE", url)
        if self.leaks.status(route, mine, 200) and any(mine.json()["counts"].values()):
            self.leaks.add(route, f"bravo's erasure in its own tenant removed {mine.json()}")
        # bravo's tenant refuses the id now; bravo's later runs in this module name it again
        with self.w.db.begin() as conn:
            conn.execute(text("DELETE FROM resource_tombstones WHERE tenant = 'bravo'"))
        theirs = self.ops(route, "DELETE", url, params={"tenant": "alpha"})
        missing = self.ops(route, "DELETE", url, params={"tenant": "nosuch"})
        self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        self.leaks.status(route, self.bravo(route, "DELETE", url), 403)

    def list_audit_entries(self, route: str) -> None:
        """Bravo's operator lists the audit log: none of alpha's entries (alpha's operator
        acted before), and alpha's tenant named answers as a tenant nobody has."""
        mine = self.ops(route, "GET", "/v1/audit", params={"limit": "1000"})
        if self.leaks.status(route, mine, 200):
            for entry in mine.json()["entries"]:
                if entry["tenant"] != "bravo":
                    self.leaks.add(route, f"bravo's operator is shown {entry}")
        theirs = self.ops(route, "GET", "/v1/audit", params={"tenant": "alpha"})
        missing = self.ops(route, "GET", "/v1/audit", params={"tenant": "nosuch"})
        self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        self.leaks.status(route, self.bravo(route, "GET", "/v1/audit"), 403)

    def conversation_rights(self, route: str, method: str, path: str) -> None:
        """Alpha's conversations exported or erased by bravo's operator, each as a missing
        one; bravo's API key is refused."""
        for deployment, key, tenant, (mine, other) in self.NAMED:
            singleton = mine.startswith("'")

            def ask(key: str, deployment: str, tenant: str | None = tenant) -> httpx.Response:
                named = {"deployment": deployment, "conversationKey": key}
                if tenant is not None:
                    named["tenant"] = tenant
                if method == "GET":
                    return self.ops(route, method, path, params=named)
                return self.ops(route, method, path, json=named)

            theirs = ask(key, deployment)
            missing = ask(key, "solo2") if singleton else ask(key.replace(mine, other), deployment)
            self.leaks.same(route, theirs, missing, ((mine, other),))
        named = {"deployment": "chat", "conversationKey": "thread-one"}
        if method == "GET":
            r = self.bravo(route, method, path, params=named)
        else:
            r = self.bravo(route, method, path, json=named)
        self.leaks.status(route, r, 403)

    def export_conversation(self, route: str) -> None:
        self.conversation_rights(route, "GET", "/v1/conversations:export")

    def erase_conversation(self, route: str) -> None:
        self.conversation_rights(route, "POST", "/v1/conversations:erase")

    def list_conversations(self, route: str) -> None:
        alpha = self.alpha_conversations
        states = ({"state": "running"}, {"state": "waiting"})  # alpha has one of each
        for params in ({}, {"deployment": "solo"}, {"deployment": "tooly"}, *states):
            r = self.ops(route, "GET", "/v1/conversations", params=params)
            if not self.leaks.status(route, r, 200):
                continue
            for row in r.json()["conversations"]:
                if row["id"] in alpha or row["tenant"] != "bravo":
                    self.leaks.add(route, f"GET {r.request.url} lists alpha's {row}")
        self.leaks.status(route, self.bravo(route, "GET", "/v1/conversations"), 403)

    # -- tenants (operators) --------------------------------------------------------------------

    def list_tenants(self, route: str) -> None:
        r = self.ops(route, "GET", "/v1/tenants")
        if self.leaks.status(route, r, 200):
            names = [t["tenant"] for t in r.json()["tenants"]]
            if names != ["bravo"]:
                self.leaks.add(route, f"GET /v1/tenants lists {names} to bravo's operator")
            for t in r.json()["tenants"]:
                self.bravo_figures(route, t)
        self.leaks.status(route, self.bravo(route, "GET", "/v1/tenants"), 403)

    def get_tenant(self, route: str) -> None:
        missing = self.ops(route, "GET", "/v1/tenants/nosuch")
        theirs = self.ops(route, "GET", "/v1/tenants/alpha")
        self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        r = self.ops(route, "GET", "/v1/tenants/bravo")
        if self.leaks.status(route, r, 200):
            self.bravo_figures(route, r.json())
        self.leaks.status(route, self.bravo(route, "GET", "/v1/tenants/bravo"), 403)

    def list_workers(self, route: str) -> None:
        """The fleet's processes are no tenant's: an operator sees them, and nothing of alpha."""
        r = self.ops(route, "GET", "/v1/workers")
        if self.leaks.status(route, r, 200) and "alpha" in r.text:
            self.leaks.add(
                route, f"GET /v1/workers shows alpha's data to bravo's operator: {r.text}"
            )
        self.leaks.status(route, self.bravo(route, "GET", "/v1/workers"), 403)

    # -- schedules --------------------------------------------------------------------------------

    def list_schedules(self, route: str) -> None:
        for side in (self.bravo, self.ops):
            r = side(route, "GET", "/v1/schedules")
            if self.leaks.status(route, r, 200) and r.json()["schedules"]:
                self.leaks.add(route, f"GET /v1/schedules lists {r.json()['schedules']} to bravo")

    def get_schedule(self, route: str) -> None:
        for side in (self.bravo, self.ops):
            missing = side(route, "GET", "/v1/schedules/nosuch")
            theirs = side(route, "GET", "/v1/schedules/nightly")
            self.leaks.same(route, theirs, missing, (("'nightly'", "'nosuch'"),))

    def delete_schedule(self, route: str) -> None:
        for side in (self.bravo, self.ops):
            missing = side(route, "DELETE", "/v1/schedules/nosuch")
            theirs = side(route, "DELETE", "/v1/schedules/nightly")
            self.leaks.same(route, theirs, missing, (("'nightly'", "'nosuch'"),))

    def create_schedule(self, route: str) -> None:
        """Alpha's name is free in bravo's scope (a 409 would tell that alpha has one)."""
        body = {"name": "nightly", "deployment": "chat", "every": "1d", "input": "bravo's"}
        r = self.bravo(route, "POST", "/v1/schedules", json=body)
        if self.leaks.status(route, r, 201) and r.json()["scope"] != "api:bravo":
            self.leaks.add(route, f"bravo's schedule went to {r.json()['scope']!r}")
        self.leaks.status(route, self.bravo(route, "DELETE", "/v1/schedules/nightly"), 204)

    def bravo_figures(self, route: str, t: dict[str, Any]) -> None:
        """Bravo has run nothing yet (tenants are read before bravo submits): any figure is
        alpha's (2 running, 1 queued, tokens used)."""
        figures = {k: t.get(k) for k in ("running", "conversationsRunning", "queued")}
        figures["tokensToday"] = t.get("tokensToday")
        if t.get("tenant") != "bravo" or any(figures.values()):
            self.leaks.add(route, f"bravo's operator is shown {t.get('tenant')!r} with {figures}")

    def prune_conversations(self, route: str) -> None:
        for body in ({"olderThan": "1s", "dryRun": True}, {"olderThan": "1s"}):
            r = self.ops(route, "POST", "/v1/conversations:prune", json=body)
            self.leaks.status(route, r, 200)
        self.leaks.status(route, self.bravo(route, "POST", "/v1/conversations:prune", json={}), 403)

    # -- memory blocks (operators) --------------------------------------------------------------

    def list_memory_blocks(self, route: str) -> None:
        alpha = self.alpha_blocks
        for params in ({}, {"namespace": NAMESPACE}):
            r = self.ops(route, "GET", "/v1/memory/blocks", params=params)
            if self.leaks.status(route, r, 200):
                for b in r.json()["blocks"]:
                    if (b["namespace"], b["block"], b["version"], b["updatedAt"]) in alpha:
                        self.leaks.add(route, f"GET {r.request.url} lists alpha's block {b}")
            missing = self.ops(
                route, "GET", "/v1/memory/blocks", params={**params, "tenant": "nosuch"}
            )
            theirs_r = self.ops(
                route, "GET", "/v1/memory/blocks", params={**params, "tenant": "alpha"}
            )
            self.leaks.same(route, theirs_r, missing, (("'alpha'", "'nosuch'"),))
        self.leaks.status(route, self.bravo(route, "GET", "/v1/memory/blocks"), 403)

    def per_block(self, route: str, method: str, suffix: str = "") -> None:
        """Alpha's blocks ``facts`` and ``prefs``: as missing ones in bravo's own tenant, and as
        a tenant bravo's operator does not reach."""
        ns = {"namespace": NAMESPACE}
        for block in ("facts", "prefs"):
            missing = self.ops(route, method, f"/v1/memory/blocks/nosuch{suffix}", params=ns)
            theirs = self.ops(route, method, f"/v1/memory/blocks/{block}{suffix}", params=ns)
            self.leaks.same(route, theirs, missing, ((block, "nosuch"),))
            params = {**ns, "tenant": "alpha"}
            missing = self.ops(
                route,
                method,
                f"/v1/memory/blocks/{block}{suffix}",
                params={**params, "tenant": "nosuch"},
            )
            theirs = self.ops(route, method, f"/v1/memory/blocks/{block}{suffix}", params=params)
            self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        r = self.bravo(route, method, f"/v1/memory/blocks/facts{suffix}", params=ns)
        self.leaks.status(route, r, 403)

    def get_memory_block(self, route: str) -> None:
        self.per_block(route, "GET")

    def list_memory_block_versions(self, route: str) -> None:
        self.per_block(route, "GET", "/versions")

    def set_memory_block(self, route: str) -> None:
        url = "/v1/memory/blocks/ledger"
        ns = {"namespace": NAMESPACE}
        value = {"value": "bravo was here"}
        missing = self.ops(route, "PUT", url, params={**ns, "tenant": "nosuch"}, json=value)
        theirs = self.ops(route, "PUT", url, params={**ns, "tenant": "alpha"}, json=value)
        self.leaks.same(route, theirs, missing, (("'alpha'", "'nosuch'"),))
        # bravo's own ledger: a block of its own (version 1), not alpha's (at version 2)
        r = self.ops(route, "PUT", url, params=ns, json=value)
        if self.leaks.status(route, r, 200) and r.json()["version"] != 1:
            self.leaks.add(route, f"PUT {url} wrote version {r.json()['version']}, not bravo's 1")
        r = self.ops(route, "PUT", url, params=ns, json={**value, "expectedVersion": 2})
        self.leaks.status(route, r, 409)  # alpha's version is no version of bravo's block
        self.leaks.status(route, self.bravo(route, "PUT", url, params=ns, json=value), 403)

    # -- triggers, A2A, probes ------------------------------------------------------------------

    def deliver_webhook(self, route: str) -> None:
        """Alpha's trigger takes only its own callers' keys."""
        count = "SELECT count(*) FROM tasks"
        before = self.w.rows(count)
        url = "/v1/triggers/alpha-inbox"
        body = {"text": "bravo delivers"}
        thread = {"X-Thread": "thread-hook"}
        for who, status in (("bravo", 403), ("bravo-ops", 403), ("bravo-a2a", 403)):
            side = Side(self.w.http, self.leaks, KEYS[who])
            self.leaks.status(route, side(route, "POST", url, json=body, headers=thread), status)
        self.leaks.status(route, self.nobody(route, "POST", url, json=body, headers=thread), 401)
        wrong = Side(self.w.http, self.leaks, "k-nobody-" + uuid.uuid4().hex)
        self.leaks.status(route, wrong(route, "POST", url, json=body, headers=thread), 401)
        if self.w.rows(count) != before:
            self.leaks.add(route, "a refused delivery stored a task")

    def a2a_json_rpc(self, route: str) -> None:
        asyncio.run(self._a2a(route))
        for who, status in (("bravo", 403), ("bravo-ops", 403)):
            side = Side(self.w.http, self.leaks, KEYS[who])
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
            self.leaks.status(route, side(route, "POST", "/a2a/chat", json=rpc), status)

    async def _a2a(self, route: str) -> None:
        t = self.alpha_tasks
        for version in ("1.0", "0.3"):
            clients = {
                name: A2A(self.w.base, name, key=KEYS["bravo-a2a"], version=version)
                for name in ("chat", "tooly", "solo")
            }
            clients["streaming"] = A2A(
                self.w.base, "tooly", key=KEYS["bravo-a2a"], version=version, streaming=True
            )
            for c in clients.values():
                await c.__aenter__()
            try:
                await self._a2a_version(route, version, clients, t)
            finally:
                for c in clients.values():
                    await c.__aexit__(None, None, None)

    async def _a2a_version(
        self, route: str, version: str, clients: dict[str, A2A], t: dict[str, str]
    ) -> None:
        route = f"{route} ({version})"
        leaks = self.leaks

        async def as_missing(what: str, deployment: str, task_id: str, call: A2ACall) -> None:
            """``call`` naming alpha's task answers as naming a missing one does."""
            client = clients[deployment].client
            theirs = await outcome(call, client, task_id)
            missing = await outcome(call, client, self.missing)
            leaks.scan(route, what, theirs[1])
            assert missing[0] == TaskNotFoundError.__name__, (what, missing)
            if (theirs[0], theirs[1].replace(task_id, self.missing)) != missing:
                leaks.add(route, f"{what} of {task_id}: {theirs} / missing: {missing}")

        async def get(c: Any, i: str) -> Any:
            return await c.get_task(GetTaskRequest(id=i))

        async def get_as_alpha(c: Any, i: str) -> Any:
            return await c.get_task(GetTaskRequest(id=i, tenant="alpha"))

        async def cancel(c: Any, i: str) -> Any:
            return await c.cancel_task(CancelTaskRequest(id=i))

        async def subscribe(c: Any, i: str) -> Any:
            async for event in c.subscribe(SubscribeToTaskRequest(id=i)):
                return [event]  # the first is enough (a running task's stream goes on)
            return []

        async def follow_up(c: Any, i: str) -> Any:
            msg = Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="me too")]
            )
            msg.task_id = i
            return [r async for r in c.send_message(SendMessageRequest(message=msg))]

        async def push_set(c: Any, i: str) -> Any:
            cfg = TaskPushNotificationConfig(
                task_id=i, id="alpha-push", url=f"{self.w.receiver.url}/ok/bravo"
            )
            return await c.create_task_push_notification_config(cfg)

        async def push_get(c: Any, i: str) -> Any:
            req = GetTaskPushNotificationConfigRequest(task_id=i, id="alpha-push")
            return await c.get_task_push_notification_config(req)

        async def push_list(c: Any, i: str) -> Any:
            req = ListTaskPushNotificationConfigsRequest(task_id=i)
            return await c.list_task_push_notification_configs(req)

        async def push_delete(c: Any, i: str) -> Any:
            req = DeleteTaskPushNotificationConfigRequest(task_id=i, id="alpha-push")
            return await c.delete_task_push_notification_config(req)

        for what, call in (
            ("GetTask", get),
            ("GetTask(tenant=alpha)", get_as_alpha),
            ("CancelTask", cancel),
            ("a follow-up (message.taskId)", follow_up),
            ("SetTaskPushNotificationConfig", push_set),
            ("GetTaskPushNotificationConfig", push_get),
            ("ListTaskPushNotificationConfigs", push_list),
            ("DeleteTaskPushNotificationConfig", push_delete),
        ):
            for label in ("a2a", "a2a-2", "t1", "hook"):
                await as_missing(what, "chat", t[label], call)
        for label in ("busy", "queued", "a2a-busy"):  # unfinished: a cancel would show
            await as_missing("CancelTask", "tooly", t[label], cancel)
            await as_missing("SubscribeToTask", "streaming", t[label], subscribe)
        await as_missing("GetTask", "solo", t["solo"], get)  # the singleton's scope is shared

        alpha_ids = set(t.values())
        if version == "1.0":  # ListTasks is 1.0's
            for deployment, request in (
                ("chat", ListTasksRequest()),
                ("chat", ListTasksRequest(context_id="ctx-one")),
                ("solo", ListTasksRequest()),
                ("solo", ListTasksRequest(context_id="singleton")),
                ("tooly", ListTasksRequest()),
            ):
                listed = await clients[deployment].client.list_tasks(request)
                leaks.scan(route, "ListTasks", json.dumps(MessageToDict(listed)))
                shown = {task.id for task in listed.tasks} & alpha_ids
                if shown:
                    leaks.add(route, f"ListTasks on {deployment} lists alpha's tasks {shown}")
        # alpha's contextId is a conversation of bravo's own: 1.0 starts it, 0.3 continues it
        bravo = clients["chat"]
        mine = await bravo.send("bravo in ctx-one", context_id="ctx-one")
        leaks.scan(route, "SendMessage", json.dumps(MessageToDict(mine)))
        history = 0 if version == "1.0" else 2  # alpha's ctx-one holds 4 messages
        if reply_text(mine) != f"echo: bravo in ctx-one [history: {history}]":
            leaks.add(route, f"bravo's ctx-one joined another history: {reply_text(mine)!r}")
        if mine.metadata["fleet.conversation"] != "a2a:bravo-a2a:ctx-one":
            leaks.add(route, f"bravo's ctx-one is {mine.metadata['fleet.conversation']!r}")
        again = await bravo.send("bravo here", context_id="ctx-two", message_id="msg-one")
        if again.id in alpha_ids:  # alpha's messageId is no idempotency key of bravo's
            leaks.add(route, f"SendMessage with alpha's messageId answered alpha's {again.id}")
        try:  # another caller's A2A scope: refused, as before tenants
            await bravo.send("continue?", context_id="a2a:alpha-a2a:ctx-one")
        except InvalidParamsError as exc:
            if "belongs to scope" not in str(exc):
                leaks.add(route, f"a2a:alpha-a2a:ctx-one refused with {exc}")
        else:
            leaks.add(route, "SendMessage continued alpha's contextId a2a:alpha-a2a:ctx-one")

    def signal_agent(self, route: str) -> None:
        """A run of bravo's signals alpha's running tasks (``signal_agent``, a write inside the
        fleet): refused as for a missing id."""
        said = {}
        for task_id in (self.missing, self.alpha_tasks["busy"], self.alpha_tasks["a2a-busy"]):
            ask = "/tool signal_agent " + json.dumps({"task_id": task_id, "message": "bravo"})
            body = {"deployment": "signal", "input": ask}
            made = self.bravo(route, "POST", "/v1/tasks", json=body).json()["id"]
            done = self.bravo(route, "GET", f"/v1/tasks/{made}", params={"wait": 30}).json()
            assert done["status"] == "succeeded", done
            runs = self.bravo(route, "GET", f"/v1/tasks/{made}/runs").json()["runs"]
            run = self.bravo(route, "GET", f"/v1/runs/{runs[0]['id']}").json()
            (said[task_id],) = [s["tool"]["result"] for s in run["steps"] if s["kind"] == "tool"]
        missing = said.pop(self.missing)
        assert "no task" in str(missing), missing
        for task_id, result in said.items():
            if str(result).replace(task_id, self.missing) != str(missing):
                self.leaks.add(route, f"signal_agent {task_id}: {result!r} / missing: {missing!r}")

    def exempt(self, route: str, method: str, url: str) -> None:
        """An operation that needs no key: it answers without one, and holds nothing of
        alpha's."""
        r = self.nobody(route, method, url)
        self.leaks.status(route, r, 200)

    # -- the operator UI (routes hidden from the schema) ----------------------------------------

    def ui(self, route: str, method: str, url: str, **kw: Any) -> httpx.Response:
        with self.browser.stream(method, url, **kw) as r:
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                self.leaks.add(route, f"{method} {url} streams a task's events")
                return r  # not read: a running task's stream goes on
            r.read()
        self.leaks.scan(route, f"{method} {url} ({r.status_code})", r.text)
        return r

    def ui_as_missing(
        self, route: str, method: str, pattern: str, ids: list[str], **kw: Any
    ) -> None:
        missing = self.ui(route, method, pattern.format(self.missing), **kw)
        assert missing.status_code == 404, (pattern, missing.text)
        for ident in ids:
            theirs = self.ui(route, method, pattern.format(ident), **kw)
            if theirs.status_code != 404 or theirs.text != missing.text:
                self.leaks.add(
                    route,
                    f"{method} {pattern.format(ident)} answered {theirs.status_code}, "
                    "unlike a missing one",
                )

    def ui_overview(self, route: str) -> None:
        page = self.ui(route, "GET", "/ui").text
        if "alpha" in page:
            self.leaks.add(route, "GET /ui names alpha")
        mine = tooly(page)
        if mine != (0, 0):
            self.leaks.add(route, f"GET /ui counts alpha's tasks (queued, running): {mine}")
        figures = tenant_row(page, "bravo")  # bravo's tasks have all ended by now
        if figures != (0, 0, 0, 0):
            self.leaks.add(
                route, f"GET /ui: bravo's running, conversations, queued, waiting: {figures}"
            )

    def ui_conversations(self, route: str) -> None:
        alpha = self.alpha_conversations
        states = ({"state": "running"}, {"state": "waiting"})
        for params in ({}, {"scope": "api:alpha"}, {"deployment": "tooly"}, *states):
            page = self.ui(route, "GET", "/ui/conversations", params=params).text
            shown = {c for c in alpha if c in page}
            if shown or "api:alpha:" in page:
                self.leaks.add(route, f"GET /ui/conversations?{params} shows alpha's {shown}")

    def ui_conversation(self, route: str) -> None:
        ids = sorted(self.alpha_conversations)
        self.ui_as_missing(route, "GET", "/ui/conversations/{}", ids)

    def ui_run(self, route: str) -> None:
        self.ui_as_missing(route, "GET", "/ui/runs/{}", list(self.alpha_runs.values()))

    def ui_task(self, route: str) -> None:
        self.ui_as_missing(route, "GET", "/ui/tasks/{}", list(self.alpha_tasks.values()))

    def ui_task_events(self, route: str) -> None:
        self.ui_as_missing(route, "GET", "/ui/tasks/{}/events", list(self.alpha_tasks.values()))

    def ui_cancel(self, route: str) -> None:
        form = {"csrf": self.csrf, "confirmed": "yes"}
        ids = list(self.alpha_tasks.values())
        self.ui_as_missing(route, "POST", "/ui/tasks/{}/cancel", ids, data=form)

    def ui_approvals(self, route: str) -> None:
        page = self.ui(route, "GET", "/ui/approvals").text
        shown = {i for i in (self.alpha_approval, *self.alpha_tasks.values()) if i in page}
        if shown or "alpha" in page:
            self.leaks.add(route, f"GET /ui/approvals shows alpha's {shown}")

    def ui_failures(self, route: str) -> None:
        page = self.ui(route, "GET", "/ui/failures?hours=720").text
        shown = {i for i in self.alpha_tasks.values() if i in page}
        if shown or "alpha" in page:
            self.leaks.add(route, f"GET /ui/failures shows alpha's {shown}")

    def ui_retry_failures(self, route: str) -> None:
        """Bravo's operator retries every class of failure: nothing of alpha's is retried
        (the snapshot of alpha's tasks)."""
        for cls in (*error_classes.CLASSES, ""):
            form = {"csrf": self.csrf, "errorClass": cls, "hours": "720"}
            r = self.ui(route, "POST", "/ui/failures/retry", data=form)
            self.leaks.status(route, r, 303)

    def ui_cancel_group(self, route: str) -> None:
        """Bravo's operator cancels every group alpha has unfinished tasks in: nothing of
        alpha's is cancelled (the snapshot of alpha's tasks)."""
        for deployment in ("chat", "tooly", "pay", "approve"):
            for status in ("queued", "waiting", "running"):
                form = {"csrf": self.csrf, "deployment": deployment, "status": status}
                r = self.ui(route, "POST", "/ui/failures/cancel", data=form)
                self.leaks.status(route, r, 303)

    def ui_decide(self, route: str) -> None:
        ids = list(self.alpha_tasks.values())
        pattern = "/ui/tasks/{}/approvals/" + self.alpha_approval
        for decision in ("approve", "reject"):
            form = {"csrf": self.csrf, "decision": decision, "reason": "bravo decides"}
            self.ui_as_missing(route, "POST", pattern, ids, data=form)

    def ui_reset(self, route: str) -> None:
        form = {"csrf": self.csrf, "confirmed": "yes"}
        ids = sorted(self.alpha_conversations)
        self.ui_as_missing(route, "POST", "/ui/conversations/{}/reset", ids, data=form)

    def ui_keyless(self, route: str, method: str, url: str, status: int = 200) -> None:
        r = self.nobody(route, method, url)
        self.leaks.status(route, r, status)

    def ui_sign_in(self, route: str) -> None:
        """Signing in (both operators did, in ``ui_sessions``); a key of bravo's that is no
        operator's is refused."""
        r = self.nobody(route, "POST", "/ui/login", data={"key": KEYS["bravo"]})
        self.leaks.status(route, r, 403)

    def ui_logout(self, route: str) -> None:
        r = self.ui(route, "POST", "/ui/logout", data={"csrf": self.csrf})
        self.leaks.status(route, r, 303)


A2ACall = Callable[[Any, str], Awaitable[Any]]


async def outcome(call: A2ACall, client: Any, task_id: str) -> tuple[str, str]:
    """What an A2A call answered: the error's type and message, or ``answered`` and the
    result as JSON."""
    try:
        got = await call(client, task_id)
    except Exception as exc:  # the refusal itself is what is compared
        return type(exc).__name__, str(exc)
    items = got if isinstance(got, list) else [got]
    return "answered", json.dumps([MessageToDict(i) if isinstance(i, Proto) else i for i in items])


#: How each operation of /openapi.json is tried, in this order: reads (the tenants' figures
#: before bravo has submitted anything), then writes, the prune last. An operation the server
#: has and this table lacks fails the test.
HTTP: dict[str, Callable[[Probes, str], None]] = {
    "GetTask": Probes.get_task,
    "ListTasks": Probes.list_tasks,
    "ListTaskRuns": Probes.list_task_runs,
    "GetRun": Probes.get_run,
    "StreamTaskEvents": Probes.stream_task_events,
    "ListConversationMessages": Probes.list_conversation_messages,
    "ListConversations": Probes.list_conversations,
    "ListTenants": Probes.list_tenants,
    "ListWorkers": Probes.list_workers,
    "GetTenant": Probes.get_tenant,
    "GetConversation": Probes.get_conversation,
    "ListSchedules": Probes.list_schedules,
    "GetSchedule": Probes.get_schedule,
    "ListApprovals": Probes.list_approvals,
    "ListMemoryBlocks": Probes.list_memory_blocks,
    "GetMemoryBlock": Probes.get_memory_block,
    "ListMemoryBlockVersions": Probes.list_memory_block_versions,
    "ListAuditEntries": Probes.list_audit_entries,
    "SubmitTask": Probes.submit_task,
    "CancelTask": Probes.cancel_task,
    "SignalTask": Probes.signal_task,
    "DecideApproval": Probes.decide_approval,
    "SendEvent": Probes.send_event,
    "BulkTasks": Probes.bulk_tasks,
    "GetBulkJob": Probes.get_bulk_job,
    "ResetConversation": Probes.reset_conversation,
    "DeleteConversation": Probes.delete_conversation,
    "ExportResource": Probes.export_resource,
    "EraseResource": Probes.erase_resource,
    "ExportConversation": Probes.export_conversation,
    "EraseConversation": Probes.erase_conversation,
    "SetMemoryBlock": Probes.set_memory_block,
    "CreateSchedule": Probes.create_schedule,
    "DeleteSchedule": Probes.delete_schedule,
    "DeliverWebhook": Probes.deliver_webhook,
    "A2AJsonRpc": Probes.a2a_json_rpc,
    "PruneConversations": Probes.prune_conversations,
}
#: Operations that need no key and name nothing of a tenant's: tried without a key.
EXEMPT: dict[str, tuple[str, str]] = {
    "Health": ("GET", "/healthz"),
    "Ready": ("GET", "/readyz"),
    "Metrics": ("GET", "/metrics"),
    "GetAgentCard": ("GET", "/a2a/chat/.well-known/agent-card.json"),
}
#: The routes the schema hides (the operator UI, the docs), each tried as bravo's operator or
#: without a key.
HIDDEN: dict[tuple[str, str], Callable[[Probes, str], None]] = {
    ("GET", "/openapi.json"): lambda p, r: p.ui_keyless(r, "GET", "/openapi.json"),
    ("GET", "/docs"): lambda p, r: p.ui_keyless(r, "GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"): lambda p, r: p.ui_keyless(r, "GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"): lambda p, r: p.ui_keyless(r, "GET", "/redoc"),
    ("GET", "/a2a/{deployment}/.well-known/agent.json"): lambda p, r: p.ui_keyless(
        r, "GET", "/a2a/chat/.well-known/agent.json"
    ),
    ("GET", "/ui/static/{name}"): lambda p, r: p.ui_keyless(r, "GET", "/ui/static/ui.js"),
    ("GET", "/ui/login"): lambda p, r: p.ui_keyless(r, "GET", "/ui/login"),
    ("POST", "/ui/login"): Probes.ui_sign_in,
    ("GET", "/ui"): Probes.ui_overview,
    ("GET", "/ui/conversations"): Probes.ui_conversations,
    ("GET", "/ui/conversations/{conversation_id}"): Probes.ui_conversation,
    ("GET", "/ui/runs/{run_id}"): Probes.ui_run,
    ("GET", "/ui/tasks/{task_id}"): Probes.ui_task,
    ("GET", "/ui/tasks/{task_id}/events"): Probes.ui_task_events,
    ("POST", "/ui/tasks/{task_id}/cancel"): Probes.ui_cancel,
    ("POST", "/ui/conversations/{conversation_id}/reset"): Probes.ui_reset,
    ("GET", "/ui/approvals"): Probes.ui_approvals,
    ("GET", "/ui/failures"): Probes.ui_failures,
    ("POST", "/ui/failures/retry"): Probes.ui_retry_failures,
    ("POST", "/ui/failures/cancel"): Probes.ui_cancel_group,
    ("POST", "/ui/tasks/{task_id}/approvals/{approval_id}"): Probes.ui_decide,
    ("POST", "/ui/logout"): Probes.ui_logout,  # last: it ends bravo's operator's session
}


def hidden_routes() -> set[tuple[str, str]]:
    """(method, path) of every route the app serves outside its schema."""

    def flat(routes: list[Any]) -> Iterator[Any]:
        for route in routes:
            inner = getattr(route, "original_router", None)  # an included router (FastAPI ≥0.16x)
            if inner is not None:
                yield from flat(inner.routes)
            else:
                yield route

    found: set[tuple[str, str]] = set()
    for route in flat(create_app().routes):
        if not getattr(route, "include_in_schema", True) or route.path == "/openapi.json":
            found.update((m, route.path) for m in route.methods - {"HEAD"})
    return found


def start_blockers(w: World) -> None:
    """Alpha's unfinished work: a running API task with one queued behind it, a running A2A
    task."""
    w.tasks["busy"] = w.submit("alpha", "tooly", WAIT, conversationKey="busy")
    w.tasks["queued"] = w.submit("alpha", "tooly", f"queued {MARK}", conversationKey="busy")

    async def a2a() -> str:
        async with A2A(w.base, "tooly", key=KEYS["alpha-a2a"], version="1.0") as alice:
            task = await alice.send(WAIT, context_id="busy-a2a", return_immediately=True)
            return task.id

    w.tasks["a2a-busy"] = asyncio.run(a2a())
    w.running(w.tasks["busy"], w.tasks["a2a-busy"])


def stop_blockers(w: World) -> list[str]:
    """Alpha cancels its own, with the calls bravo's keys could not make; what went unlike
    that."""
    wrong = []
    r = w.http.post(f"/v1/tasks/{w.tasks['queued']}/cancel", headers=auth("alpha"))
    if r.status_code != 200 or r.json()["task"]["status"] != "cancelled":
        wrong.append(f"alpha's cancel of its queued task: {r.status_code} {r.text}")
    r = w.http.post(f"/v1/tasks/{w.tasks['busy']}/cancel", headers=auth("alpha"))
    if r.status_code != 200 or r.json()["effect"] == "finished":
        wrong.append(f"alpha's cancel of its running task: {r.status_code} {r.text}")

    async def a2a() -> None:
        async with A2A(w.base, "tooly", key=KEYS["alpha-a2a"], version="1.0") as alice:
            await alice.client.cancel_task(CancelTaskRequest(id=w.tasks["a2a-busy"]))

    try:
        asyncio.run(a2a())
    except Exception as exc:  # reported with the rest
        wrong.append(f"alpha's A2A cancel of its running task: {exc!r}")
    for label in ("busy", "queued", "a2a-busy"):
        status = w.done(w.tasks.pop(label), 30)
        if status != "cancelled":
            wrong.append(f"alpha's {label} task ended {status}")
    return wrong


@pytest.mark.core
def test_every_route_of_the_api_walls_alpha_off_from_bravo(world: World) -> None:
    w = world
    operations = {
        op["operationId"]
        for path in w.http.get("/openapi.json").json()["paths"].values()
        for op in path.values()
    }
    assert operations == set(HTTP) | set(EXEMPT), (
        f"untried: {sorted(operations - set(HTTP) - set(EXEMPT))}; "
        f"gone: {sorted((set(HTTP) | set(EXEMPT)) - operations)}"
    )
    assert hidden_routes() == set(HIDDEN), (
        f"untried: {sorted(hidden_routes() - set(HIDDEN))}; "
        f"gone: {sorted(set(HIDDEN) - hidden_routes())}"
    )
    start_blockers(w)
    leaks = Leaks()
    try:
        before = snapshot(w)
        with ui_sessions(w) as ui:
            probes = Probes(w, leaks, ui)
            probes.controls()
            for operation, (method, url) in EXEMPT.items():
                probes.exempt(operation, method, url)
            for operation, probe in HTTP.items():
                probe(probes, operation)
            for (method, path), probe in HIDDEN.items():
                probe(probes, f"{method} {path}")
            probes.signal_agent("signal_agent (a tool of bravo's run)")
        unchanged(leaks, before, snapshot(w), "bravo's writes")
    finally:
        stopped = stop_blockers(w)
    leaks.assert_none()
    assert not stopped, stopped


# -- 3. the CLI ----------------------------------------------------------------------------------


def fleet_cli(base: str, who: str, home: Path, *args: str) -> subprocess.Popen[str]:
    """``fleet --server BASE ARGS`` with ``who``'s key as ``FLEET_API_KEY``, and no other
    ``FLEET_*`` variable of this process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(FLEET_API_KEY=KEYS[who], FLEET_HOME=str(home))
    script = Path(sys.executable).with_name("fleet")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "fleet.cli"]
    return subprocess.Popen(
        [*command, "--server", base, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_cli_shows_alphas_tasks_to_bravo_as_missing_ones(world: World, tmp_path: Path) -> None:
    """The console script against the server (all its runs at once): ``fleet tasks show``
    naming alpha's task exits and says what it does naming a missing one (the id swapped)."""
    w = world
    leaks = Leaks()
    t1, solo, missing = w.tasks["t1"], w.tasks["solo"], str(uuid.uuid4())
    waiting = w.tasks["waiting"]
    ((approval,),) = w.rows("SELECT id FROM waits WHERE task_id = :t", t=waiting)
    decide = ("approvals", "reject", "{}", str(approval), "--reason", "bravo decides")
    #: (who, arguments naming alpha's thing, the same naming a missing one, alpha's name → its)
    pairs = (
        ("bravo", ("tasks", "show", t1), ("tasks", "show", missing), (t1, missing)),
        # the singleton's scope is every tenant's: only the tenant walls its task off
        ("bravo", ("tasks", "show", solo), ("tasks", "show", missing), (solo, missing)),
        # alpha's pending approval, decided by bravo's keys
        *(
            (
                who,
                tuple(a.format(waiting) for a in decide),
                tuple(a.format(missing) for a in decide),
                (waiting, missing),
            )
            for who in ("bravo", "bravo-ops")
        ),
    )
    commands: set[tuple[str, tuple[str, ...]]] = {("alpha", ("tasks", "show", solo, "--json"))}
    commands |= {(who, args) for who, args, _, _ in pairs} | {(who, no) for who, _, no, _ in pairs}
    started = {c: fleet_cli(w.base, c[0], tmp_path, *c[1]) for c in commands}  # all at once
    outputs = {c: p.communicate(timeout=60) for c, p in started.items()}
    done = {c: (started[c].returncode, *out) for c, out in outputs.items()}
    for who, args, no, (name, other) in pairs:
        code, out, err = done[(who, args)]
        want = done[(who, no)]
        assert want[0] == 2 and want[2].startswith("fleet: no "), want  # a missing one's answer
        route = f"fleet {' '.join(args)} ({who})"
        leaks.scan(route, "its output", out + err)
        if (code, out.replace(name, other), err.replace(name, other)) != want:
            leaks.add(route, f"answered {(code, out, err)}, a missing one {want}")
    if w.rows("SELECT status FROM waits WHERE id = :a", a=approval) != [("pending",)]:
        leaks.add("fleet approvals reject (bravo)", "alpha's approval is no longer pending")
    # alpha's key shows it: the same command could have shown it to bravo
    code, out, err = done[("alpha", ("tasks", "show", solo, "--json"))]
    assert code == 0 and json.loads(out)["id"] == solo and MARK in out, (code, out, err)
    leaks.assert_none()


# -- 4. memory blocks, recall, working memory, singletons -----------------------------------------


@pytest.mark.core
def test_bravos_runs_see_none_of_alphas_memory_recall_or_singletons(world: World) -> None:
    """Bravo asks what alpha told, with alpha's conversation keys, namespace and resource id:
    its prompts hold none of alpha's blocks, recalled messages or working memory, and its
    singletons start empty; alpha asking the same sees all of it."""
    w = world
    leaks = Leaks()
    # Alpha's messages of RESOURCE are embedded (recallable) before bravo's runs start: a recall
    # that crossed the wall would find them.
    pending = (
        "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id "
        "LEFT JOIN message_embeddings e ON e.message_id = m.id WHERE c.tenant = 'alpha' "
        "AND c.deployment IN ('recall', 'recall-solo') AND e.message_id IS NULL"
    )
    scopes = (
        "SELECT DISTINCT scope FROM message_embeddings "
        "WHERE tenant = 'alpha' AND resource_id = :r ORDER BY 1"
    )
    wait_for(
        lambda: (
            w.rows(pending) == [(0,)]
            and w.rows(scopes, r=RESOURCE) == [("api:alpha",), ("deployment",)]
        ),
        30,
        what="alpha's messages to be embedded",
    )
    asks = {
        "keep": ("keep", "what do you remember?", {"conversationKey": "keeper"}),
        "recall": (
            "recall",
            "what is the password?",
            {"conversationKey": "recall-one", "resourceId": RESOURCE},
        ),
        "recall-solo": ("recall-solo", "what is the secret?", {"resourceId": RESOURCE}),
        "solo": ("solo", "who else is here?", {}),
    }
    bravo = {label: w.submit("bravo", d, q, **body) for label, (d, q, body) in asks.items()}
    # alpha asks the same in a conversation of its own where there is one to begin
    alpha_body = {
        "keep": {"conversationKey": "keeper-2"},
        "recall": {"conversationKey": "recall-two"},
    }
    alpha = {
        label: w.submit("alpha", d, q, **{**body, **alpha_body.get(label, {})})
        for label, (d, q, body) in asks.items()
    }

    def seen(who: str, task_id: str) -> tuple[str, dict[str, Any], str]:
        """The task's reply, its run's frozen context and that run as JSON (``GetRun``)."""
        reply = w.reply(task_id, who)
        runs = w.http.get(f"/v1/tasks/{task_id}/runs", headers=auth(who)).json()["runs"]
        r = w.http.get(
            f"/v1/runs/{runs[0]['id']}", params={"include": "messages"}, headers=auth(who)
        )
        assert r.status_code == 200, r.text
        return reply, r.json()["context"], r.text

    for label, task_id in bravo.items():
        reply, context, body = seen("bravo", task_id)
        route = f"bravo's {label} run"
        leaks.scan(route, "GetRun?include=messages", body)
        hits = (context.get("recall") or {}).get("hits") or []
        if hits:
            leaks.add(route, f"recalled {[h.get('preview') for h in hits]}")
        if label in ("solo", "recall-solo") and not reply.endswith("[history: 0]"):
            leaks.add(route, f"bravo's singleton joined a history: {reply!r}")
    # the same reads show alpha's runs what bravo's did not see
    _, context, body = seen("alpha", alpha["keep"])
    assert f"facts {MARK}" in body and f"prefs {MARK}" in body, body
    _, context, body = seen("alpha", alpha["recall"])
    assert any(MARK in h["preview"] for h in context["recall"]["hits"]), context
    reply, context, body = seen("alpha", alpha["recall-solo"])
    assert f"wm {MARK}" in body and reply.endswith("[history: 2]"), (reply, body)
    reply, _, _ = seen("alpha", alpha["solo"])
    assert reply == "echo: who else is here? [history: 2]", reply
    leaks.assert_none()
