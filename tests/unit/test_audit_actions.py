"""The audit log lists every action, with its actor, for the API, the CLI on the store and the
UI (docs/ops/audit.md), on an embedded SQLite runtime.

Each surface has a table of its actions, each row how to perform it and what its entry must
say; the rows run once (a module fixture per surface) and each keeps the entries it left, so a
missing or extra entry is named by its row. One test per surface checks the acceptance point
(one entry per action: its action, its actor, ``ok``) and that the table covers every action;
another what the docs promise of each entry (its object, tenant and detail); another that no
entry holds a resource id, a key or any text the actions carried.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.api.audit import entry_json
from fleet.cli import main
from fleet.cli.audited import os_user
from fleet.config import Settings
from fleet.domain import audit
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime, build
from fleet.store import Started
from fleet.store.audit import AuditFilter
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.support.approvals import ASK, SHOP_AGENT
from tests.support.callers import auth, write_callers

#: Every action the audit log knows.
EVERY_ACTION = frozenset(audit.ACTIONS.values()) | {audit.KEY_REFUSED}
#: The actions no CLI command performs: a signal is the API's alone, a key refused a request's.
NOT_CLI = frozenset({"task.signal", audit.KEY_REFUSED})
#: The UI's forms, as ACTIONS names them.
UI_ROUTES = frozenset(route for route in audit.ACTIONS if route.startswith("POST /ui/"))

KEYS = {name: f"{name}-key-0123456789" for name in ("app", "ops", "boss")}
CALLERS = {
    "app": 'source = "api"\ntenant = "acme"\nerase = true\n',  # caller:app, acme's own scope
    "ops": 'source = "api"\ntenant = "acme"\noperator = true\n',  # operator:ops, acme alone
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',  # reads every entry
}
STEPPER = 'model = "echo"\nmax_steps = 1\ntools = ["current_time"]\n'  # fails: step limit
FAILS = "/tool current_time {}"
WHO = "ada@example.com/1"  # a resource id: never in an entry
TEXT = "canary"  # every text an action carries holds it: never in an entry
ANY: Any = object()  # what an entry says there is not checked


def write_audit_config(root: Path, callers: Mapping[str, str]) -> Path:
    config = write_config(
        root,
        {**AGENTS, "shop": SHOP_AGENT, "stepper": STEPPER},
        {**DEPLOYMENTS, "shop": 'agent = "shop"\n', "step": 'agent = "stepper"\n'},
    )
    if callers:
        write_callers(config, callers, KEYS)
    return config


@dataclass(frozen=True)
class Expect:
    """What a row's entry must name beyond its action and actor (``ANY``: not checked)."""

    object: Any = ANY
    tenant: Any = ANY
    detail: Mapping[str, Any] = field(default_factory=dict)  # each key, its value (or ANY)
    outcome: str = "ok"


@dataclass
class Row:
    """A row performed: what it did and the entries it left."""

    label: str
    action: str
    actor: str
    expect: Expect
    said: str  # how the action was answered (a status, an exit code)
    entries: list[dict[str, Any]]


def core_problems(row: Row) -> list[str]:
    """The acceptance point: one entry, its action, its actor, ``ok`` (a refused key: refused)."""
    got = [(e["action"], e["actor"], e["outcome"]) for e in row.entries]
    want = [(row.action, row.actor, row.expect.outcome)]
    return [] if got == want else [f"{row.label}: {got}, expected {want} (answered {row.said})"]


def detail_problems(row: Row) -> list[str]:
    """What the docs promise of the entry: its object, tenant and detail."""
    if len(row.entries) != 1:
        return [f"{row.label}: {len(row.entries)} entries"]
    (e,) = row.entries
    found = []
    for name, want in (("object", row.expect.object), ("tenant", row.expect.tenant)):
        if want is not ANY and e[name] != want:
            found.append(f"{row.label}: {name} {e[name]!r}, expected {want!r}")
    for key, want in row.expect.detail.items():
        if key not in e["detail"] or (want is not ANY and e["detail"][key] != want):
            found.append(f"{row.label}: detail {e['detail']!r}, expected {key}={want!r}")
    return found


def run_rows(
    table: list[tuple[str, str, str, Callable[[Any], Expect]]],
    scene: Any,
    entries: Callable[[], list[dict[str, Any]]],
) -> list[Row]:
    """Perform each row in turn, keeping the entries each one added."""
    rows = []
    seen = max((e["id"] for e in entries()), default=0)
    for label, action, actor, perform in table:
        scene.said = "-"
        expect = perform(scene)
        new = [e for e in entries() if e["id"] > seen]
        seen = max((e["id"] for e in new), default=seen)
        rows.append(Row(label, action, actor, expect, scene.said, new))
    return rows


# -- the API ---------------------------------------------------------------------------------


class Api:
    """The API's scene: a runtime that runs nothing by itself, and a client of its app."""

    def __init__(self, rt: Runtime, client: TestClient) -> None:
        self.rt, self.client, self.said = rt, client, "-"

    def call(self, who: str, method: str, url: str, **kw: Any) -> Any:
        r = self.client.request(method, url, headers=auth(KEYS, who), **kw)
        self.said = f"{r.status_code} {r.text[:300]}"
        return r

    def submit(self, who: str, deployment: str, text: str, key: str, **extra: Any) -> Task:
        body = {"deployment": deployment, "input": text, "conversationKey": key, **extra}
        r = self.client.post("/v1/tasks", json=body, headers=auth(KEYS, who))
        assert r.status_code == 202, r.text
        return self.rt.store.get_task(uuid.UUID(r.json()["id"]))

    def ran(self, who: str, deployment: str, text: str, key: str, **extra: Any) -> Task:
        task = self.submit(who, deployment, text, key, **extra)
        self.rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
        return self.rt.store.get_task(task.id)

    def parked(self, key: str) -> tuple[Task, str]:
        """A ``shop`` task of app's waiting for its approval, and the approval's id."""
        task = self.ran("app", "shop", ASK, key)
        assert task.status == TaskStatus.WAITING, task
        (wait,) = self.rt.store.waits_of(task.id, pending=True)
        return task, str(wait.id)


def api_cancel(s: Api) -> Expect:
    task = s.submit("app", "chat", f"{TEXT}-cancel", "c")  # queued: nothing runs it
    s.call("app", "POST", f"/v1/tasks/{task.id}/cancel")
    return Expect(object=str(task.id), tenant="acme")


def api_signal(s: Api) -> Expect:
    task = s.submit("app", "chat", f"{TEXT}-run", "s")
    started = s.rt.store.start_next(
        task.conversation_id,
        "w",
        s.rt.dispatcher.clock(),
        history_items=lambda _: 20,
        prepare=s.rt.dispatcher._prepare,
    )
    assert isinstance(started, Started)  # running: a signal reaches it
    s.call("app", "POST", f"/v1/tasks/{task.id}/signal", json={"input": f"{TEXT}-signal"})
    return Expect(object=str(task.id), tenant="acme")


def api_approve(s: Api) -> Expect:
    task, approval = s.parked("a1")
    s.call("app", "POST", f"/v1/tasks/{task.id}/approvals/{approval}", json={"decision": "approve"})
    return Expect(object=str(task.id), tenant="acme", detail={"decision": "approve"})


def api_reject(s: Api) -> Expect:
    task, approval = s.parked("a2")
    body = {"decision": "reject", "reason": f"{TEXT}-reason"}
    s.call("ops", "POST", f"/v1/tasks/{task.id}/approvals/{approval}", json=body)
    return Expect(object=str(task.id), tenant="acme", detail={"decision": "reject"})


def api_event(s: Api) -> Expect:
    body = {"event": "payment.cleared", "key": "o-1", "data": {"note": f"{TEXT}-event"}}
    s.call("app", "POST", "/v1/events", json=body)
    return Expect(tenant="acme")  # (the docs name no object for an event)


def api_bulk_retry(s: Api) -> Expect:
    failed = s.ran("app", "step", FAILS, "f")
    assert failed.status == TaskStatus.FAILED, failed
    body = {"action": "retry", "filter": {"deployment": "step"}}
    job = s.call("ops", "POST", "/v1/tasks:bulk", json=body).json().get("id")
    return Expect(object=f"bulk:{job}", tenant="acme", detail={"bulk": "retry", "dryRun": False})


def api_bulk_cancel(s: Api) -> Expect:
    s.submit("app", "once", f"{TEXT}-bulk", "b")  # queued
    body = {"action": "cancel", "filter": {"deployment": "once"}}
    job = s.call("app", "POST", "/v1/tasks:bulk", json=body).json().get("id")
    return Expect(object=f"bulk:{job}", tenant="acme", detail={"bulk": "cancel", "dryRun": False})


def api_reset(s: Api) -> Expect:
    s.ran("app", "chat", f"{TEXT}-reset", "r")
    s.call("ops", "POST", "/v1/conversations/api:acme:r/reset?deployment=chat")
    return Expect(object="api:acme:r", tenant="acme")


def api_delete(s: Api) -> Expect:
    s.ran("app", "chat", f"{TEXT}-delete", "d")
    s.call("ops", "DELETE", "/v1/conversations/api:acme:d?deployment=chat")
    return Expect(object="api:acme:d", tenant="acme")


def api_prune(s: Api) -> Expect:
    s.call("ops", "POST", "/v1/conversations:prune", json={"olderThan": "30d"})
    return Expect(object=None, tenant="acme")


def api_memory(s: Api) -> Expect:
    s.call("ops", "PUT", "/v1/memory/blocks/prefs", json={"value": f"{TEXT}-memory"})
    return Expect(object="prefs", tenant="acme")


def api_schedule_add(s: Api) -> Expect:
    body = {"name": "digest", "deployment": "chat", "every": "1h", "input": f"{TEXT}-schedule"}
    s.call("app", "POST", "/v1/schedules", json=body)
    return Expect(object="digest", tenant="acme")


def api_schedule_remove(s: Api) -> Expect:
    s.call("app", "DELETE", "/v1/schedules/digest")
    return Expect(object="digest", tenant="acme")


def api_resource_export(s: Api) -> Expect:
    s.ran("app", "chat", f"{TEXT}-ada", "ada", resourceId=WHO)
    s.call("app", "GET", f"/v1/resources/{quote(WHO, safe='')}/export")
    return Expect(object=audit.resource_object("acme", WHO), tenant="acme")


def api_resource_erase(s: Api) -> Expect:
    s.call("app", "DELETE", f"/v1/resources/{quote(WHO, safe='')}")
    return Expect(
        object=audit.resource_object("acme", WHO),
        tenant="acme",
        detail={"counts": ANY},
    )


def _conversation_x(s: Api) -> str:
    found = s.rt.store.find_conversation("chat", "api:acme", "x", tenant="acme")
    assert found is not None
    return f"conversation:{found}"


def api_conversation_export(s: Api) -> Expect:
    s.ran("app", "chat", f"{TEXT}-x", "x")
    s.call("app", "GET", "/v1/conversations:export?deployment=chat&conversationKey=api:acme:x")
    return Expect(object=_conversation_x(s), tenant="acme")


def api_conversation_erase(s: Api) -> Expect:
    named = _conversation_x(s)  # (gone once erased)
    body = {"deployment": "chat", "conversationKey": "api:acme:x"}
    s.call("app", "POST", "/v1/conversations:erase", json=body)
    return Expect(object=named, tenant="acme", detail={"counts": ANY})


def api_key_refused(s: Api) -> Expect:
    r = s.client.get("/v1/tasks", headers={"Authorization": f"Bearer {TEXT}-not-a-key"})
    s.said = str(r.status_code)
    return Expect(
        object="GET /v1/tasks", tenant=None, detail={"refusals": 1}, outcome="refused 401"
    )


#: (what, action, actor, how): every action through the API, once.
API_TABLE: list[tuple[str, str, str, Callable[[Any], Expect]]] = [
    ("cancel", "task.cancel", "caller:app", api_cancel),
    ("signal", "task.signal", "caller:app", api_signal),
    ("approve", "approval.decide", "caller:app", api_approve),
    ("reject", "approval.decide", "operator:ops", api_reject),
    ("event", "event.send", "caller:app", api_event),
    ("bulk retry", "bulk.start", "operator:ops", api_bulk_retry),
    ("bulk cancel", "bulk.start", "caller:app", api_bulk_cancel),
    ("reset", "conversation.reset", "operator:ops", api_reset),
    ("delete", "conversation.delete", "operator:ops", api_delete),
    ("prune", "conversation.prune", "operator:ops", api_prune),
    ("memory set", "memory.set", "operator:ops", api_memory),
    ("schedule add", "schedule.add", "caller:app", api_schedule_add),
    ("schedule remove", "schedule.remove", "caller:app", api_schedule_remove),
    ("resource export", "resource.export", "caller:app", api_resource_export),
    ("resource erase", "resource.erase", "caller:app", api_resource_erase),
    ("conversation export", "conversation.export", "caller:app", api_conversation_export),
    ("conversation erase", "conversation.erase", "caller:app", api_conversation_erase),
    ("refused key", audit.KEY_REFUSED, "unknown key", api_key_refused),
]


@dataclass
class Performed:
    rows: list[Row]
    listed: list[dict[str, Any]]  # the whole log as the surface lists it, newest first
    client: TestClient | None = None


@contextlib.contextmanager
def performed(
    root: Path,
    table: list[tuple[str, str, str, Callable[[Any], Expect]]],
    scene: Callable[[Runtime, TestClient], Any],
    **client_options: Any,
) -> Iterator[Performed]:
    """``table``'s rows performed in their ``scene`` over an app (a runtime in ``root`` that
    runs nothing by itself), the log listed by ``boss`` after each."""
    config = write_audit_config(root / "config", CALLERS)
    rt = build(Settings(home=root / "home", config_dir=config))
    try:
        app = create_app(rt, run_embedded=False)
        with TestClient(app, raise_server_exceptions=False, **client_options) as client:

            def listed() -> list[dict[str, Any]]:
                r = client.get("/v1/audit", params={"limit": 1000}, headers=auth(KEYS, "boss"))
                assert r.status_code == 200, r.text
                return r.json()["entries"]

            rows = run_rows(table, scene(rt, client), listed)
            yield Performed(rows, listed(), client)
    finally:
        rt.close()


@pytest.fixture(scope="module")
def api_done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Performed]:
    with performed(tmp_path_factory.mktemp("api"), API_TABLE, Api) as done:
        yield done


def test_the_api_records_every_action_with_its_actor(api_done: Performed) -> None:
    assert {action for _, action, _, _ in API_TABLE} == EVERY_ACTION, "an action with no row"
    problems = [p for row in api_done.rows for p in core_problems(row)]
    assert not problems, "\n".join(problems)
    listed = api_done.listed
    assert len(listed) == len(API_TABLE)
    assert {e["action"] for e in listed} == EVERY_ACTION
    assert {e["address"] for e in listed} == {"testclient"}
    # acme's operator sees every entry but the refused key's (no tenant's)
    assert api_done.client is not None
    r = api_done.client.get("/v1/audit", params={"limit": 1000}, headers=auth(KEYS, "ops"))
    assert r.status_code == 200, r.text
    assert r.json()["entries"] == [e for e in listed if e["action"] != audit.KEY_REFUSED]


def test_the_apis_entries_name_their_object_tenant_and_detail(api_done: Performed) -> None:
    problems = [p for row in api_done.rows for p in detail_problems(row)]
    assert not problems, "\n".join(problems)


def test_no_api_entry_holds_a_resource_id_a_key_or_text(api_done: Performed) -> None:
    dumped = json.dumps(api_done.listed)
    assert TEXT not in dumped and "ada@" not in dumped and "ada%40" not in dumped
    assert not any(key in dumped for key in KEYS.values())


# -- the CLI on the store --------------------------------------------------------------------


class Cli:
    """The CLI's scene: ``fleet ARGS`` on the store (no server), and the runtime of that store."""

    def __init__(self, rt: Runtime) -> None:
        self.rt, self.said = rt, "-"

    def fleet(self, *args: str, stdin: str = "") -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        was = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(list(args))
        finally:
            sys.stdin = was
        self.said = f"exit {code}: {err.getvalue().strip()[:300]}"
        return code, out.getvalue()

    def ran(self, deployment: str, text: str, key: str, **kw: Any) -> Task:
        task = self.rt.dispatcher.submit(deployment, text, key=key, **kw).task
        self.rt.dispatcher.drain(task.conversation_id)
        return self.rt.store.get_task(task.id)

    def parked(self, key: str) -> tuple[Task, str]:
        task = self.ran("shop", ASK, key)
        assert task.status == TaskStatus.WAITING, task
        (wait,) = self.rt.store.waits_of(task.id, pending=True)
        return task, str(wait.id)

    def conversation(self, key: str) -> str:
        found = self.rt.store.find_conversation("chat", "api", key, tenant="default")
        assert found is not None
        return f"conversation:{found}"


def _job(out: str) -> str | None:
    try:
        return json.loads(out).get("id")
    except ValueError:
        return None


def cli_cancel(s: Cli) -> Expect:
    task = s.rt.dispatcher.submit("chat", f"{TEXT}-cancel", key="c").task
    s.fleet("tasks", "cancel", str(task.id))
    return Expect(object=str(task.id), tenant="default")


def cli_approve(s: Cli) -> Expect:
    task, approval = s.parked("a1")
    s.fleet("approvals", "approve", str(task.id), approval)
    return Expect(object=str(task.id), tenant="default", detail={"decision": "approve"})


def cli_reject(s: Cli) -> Expect:
    task, approval = s.parked("a2")
    s.fleet("approvals", "reject", str(task.id), approval, "--reason", f"{TEXT}-reason")
    return Expect(object=str(task.id), tenant="default", detail={"decision": "reject"})


def cli_event(s: Cli) -> Expect:
    s.fleet("events", "send", "payment.cleared", "--key", "o-1", "--data", f'"{TEXT}-event"')
    return Expect(tenant="default")  # (the docs name no object for an event)


def cli_bulk_retry(s: Cli) -> Expect:
    failed = s.ran("step", FAILS, "f")
    assert failed.status == TaskStatus.FAILED, failed
    _, out = s.fleet("tasks", "retry", "--deployment", "step", "--yes", "--json")
    return Expect(object=f"bulk:{_job(out)}", tenant="default", detail={"bulk": "retry"})


def cli_bulk_cancel(s: Cli) -> Expect:
    s.rt.dispatcher.submit("once", f"{TEXT}-bulk", key="b")  # queued
    _, out = s.fleet("tasks", "cancel", "--deployment", "once", "--yes", "--json")
    return Expect(object=f"bulk:{_job(out)}", tenant="default", detail={"bulk": "cancel"})


def cli_reset(s: Cli) -> Expect:
    s.ran("chat", f"{TEXT}-reset", "r")
    s.fleet("conversations", "reset", "api:r", "-d", "chat")
    return Expect(object="api:r", tenant="default")


def cli_delete(s: Cli) -> Expect:
    s.ran("chat", f"{TEXT}-delete", "d")
    s.fleet("conversations", "delete", "api:d", "-d", "chat")
    return Expect(object="api:d", tenant="default")


def cli_prune(s: Cli) -> Expect:
    s.fleet("conversations", "prune", "--older-than", "30d")
    return Expect(object=None)  # (every tenant's)


def cli_memory(s: Cli) -> Expect:
    s.fleet("memory", "set", "prefs", stdin=f"{TEXT}-memory")
    return Expect(object="prefs", tenant="default")


def cli_schedule_add(s: Cli) -> Expect:
    s.fleet("schedules", "add", "digest", "-d", "chat", "-i", f"{TEXT}-schedule", "--every", "1h")
    return Expect(object="digest", tenant="default")


def cli_schedule_remove(s: Cli) -> Expect:
    s.fleet("schedules", "rm", "digest")
    return Expect(object="digest", tenant="default")


def cli_resource_export(s: Cli) -> Expect:
    s.ran("chat", f"{TEXT}-ada", "ada", resource_id=WHO)
    s.fleet("export", "--resource", WHO)
    return Expect(object=audit.resource_object("default", WHO), tenant="default")


def cli_resource_erase(s: Cli) -> Expect:
    s.fleet("erase", "--resource", WHO, "--yes")
    return Expect(object=audit.resource_object("default", WHO), tenant="default")


def cli_conversation_export(s: Cli) -> Expect:
    s.ran("chat", f"{TEXT}-x", "x")
    s.fleet("export", "--conversation", "api:x", "-d", "chat")
    return Expect(object=s.conversation("x"), tenant="default")


def cli_conversation_erase(s: Cli) -> Expect:
    named = s.conversation("x")
    s.fleet("erase", "--conversation", "api:x", "-d", "chat", "--yes")
    return Expect(object=named, tenant="default")


CLI = f"cli:{os_user()}"
#: (what, action, actor, how): every action a CLI command performs, on the store, once.
CLI_TABLE: list[tuple[str, str, str, Callable[[Any], Expect]]] = [
    ("fleet tasks cancel ID", "task.cancel", CLI, cli_cancel),
    ("fleet approvals approve", "approval.decide", CLI, cli_approve),
    ("fleet approvals reject", "approval.decide", CLI, cli_reject),
    ("fleet events send", "event.send", CLI, cli_event),
    ("fleet tasks retry -d step --yes", "bulk.start", CLI, cli_bulk_retry),
    ("fleet tasks cancel -d once --yes", "bulk.start", CLI, cli_bulk_cancel),
    ("fleet conversations reset", "conversation.reset", CLI, cli_reset),
    ("fleet conversations delete", "conversation.delete", CLI, cli_delete),
    ("fleet conversations prune", "conversation.prune", CLI, cli_prune),
    ("fleet memory set", "memory.set", CLI, cli_memory),
    ("fleet schedules add", "schedule.add", CLI, cli_schedule_add),
    ("fleet schedules rm", "schedule.remove", CLI, cli_schedule_remove),
    ("fleet export --resource", "resource.export", CLI, cli_resource_export),
    ("fleet erase --resource --yes", "resource.erase", CLI, cli_resource_erase),
    ("fleet export --conversation", "conversation.export", CLI, cli_conversation_export),
    ("fleet erase --conversation --yes", "conversation.erase", CLI, cli_conversation_erase),
]


@pytest.fixture(scope="module")
def cli_done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Performed]:
    root = tmp_path_factory.mktemp("cli")
    config = write_audit_config(root / "config", {})  # no callers: the CLI needs none
    with pytest.MonkeyPatch.context() as mp:
        for name in ("FLEET_DATABASE_URL", "FLEET_REDIS_URL", "FLEET_SERVER", "FLEET_API_KEY"):
            mp.delenv(name, raising=False)
        mp.setenv("FLEET_HOME", str(root / "home"))
        mp.setenv("FLEET_CONFIG_DIR", str(config))
        mp.setenv("FLEET_TEST_COUNTER", str(root / "side-effects.txt"))
        rt = build(Settings(home=root / "home", config_dir=config))
        try:
            scene = Cli(rt)

            def stored() -> list[dict[str, Any]]:
                return [entry_json(e) for e in rt.store.audit_entries(AuditFilter(limit=1000))]

            rows = run_rows(CLI_TABLE, scene, stored)
            code, out = scene.fleet("audit", "ls", "--json", "--limit", "1000")
            assert code == 0, scene.said
            yield Performed(rows, json.loads(out))
        finally:
            rt.close()


def test_the_cli_on_the_store_records_every_action_with_its_actor(cli_done: Performed) -> None:
    assert {action for _, action, _, _ in CLI_TABLE} == EVERY_ACTION - NOT_CLI
    problems = [p for row in cli_done.rows for p in core_problems(row)]
    assert not problems, "\n".join(problems)
    listed = cli_done.listed  # what `fleet audit ls --json` prints
    assert len(listed) == len(CLI_TABLE)
    assert {(e["action"], e["actor"]) for e in listed} == {
        (action, CLI) for action in EVERY_ACTION - NOT_CLI
    }
    assert {e["address"] for e in listed} == {"local"}


def test_the_clis_entries_name_their_object_tenant_and_detail(cli_done: Performed) -> None:
    problems = [p for row in cli_done.rows for p in detail_problems(row)]
    assert not problems, "\n".join(problems)


def test_no_cli_entry_holds_a_resource_id_or_text(cli_done: Performed) -> None:
    dumped = json.dumps(cli_done.listed)
    assert TEXT not in dumped and "ada@" not in dumped


# -- the UI ----------------------------------------------------------------------------------


class Ui:
    """The UI's scene: ``ops`` (acme's operator) signed in."""

    def __init__(self, rt: Runtime, client: TestClient) -> None:
        self.rt, self.client, self.said = rt, client, "-"
        r = client.post("/ui/login", data={"key": KEYS["ops"], "next": "/ui"})
        assert r.status_code == 303, r.text

    def ran(self, deployment: str, text: str, key: str) -> Task:
        task = self.queued(deployment, text, key)
        self.rt.dispatcher.drain(task.conversation_id, tenant="acme")
        return self.rt.store.get_task(task.id)

    def queued(self, deployment: str, text: str, key: str) -> Task:
        adm = self.rt.dispatcher.submit(deployment, text, scope="api:acme", key=key, tenant="acme")
        return adm.task

    def csrf(self, page: str) -> str:
        r = self.client.get(page)
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', r.text)
        assert found, r.text
        return found.group(1)

    def post(self, url: str, page: str, **form: str) -> Any:
        r = self.client.post(url, data={"csrf": self.csrf(page), **form})
        self.said = f"{r.status_code} {r.headers.get('location', r.text[:300])}"
        return r


def _job_of(r: Any) -> str | None:
    found = parse_qs(urlsplit(r.headers.get("location", "")).query).get("job")
    return found[0] if found else None


def ui_cancel(s: Ui) -> Expect:
    task = s.queued("chat", f"{TEXT}-cancel", "c")
    page = f"/ui/conversations/{task.conversation_id}"
    s.post(f"/ui/tasks/{task.id}/cancel", page, confirmed="yes")
    return Expect(object=str(task.id), tenant="acme")


def ui_reset(s: Ui) -> Expect:
    task = s.ran("chat", f"{TEXT}-reset", "r")
    page = f"/ui/conversations/{task.conversation_id}"
    s.post(f"{page}/reset", page, confirmed="yes")
    assert s.rt.dispatcher.lifecycle.show("chat", "api:acme:r", tenant="acme").generation == 1
    return Expect(object=str(task.conversation_id), tenant="acme")


def ui_decide(s: Ui) -> Expect:
    task = s.ran("shop", ASK, "a1")
    assert task.status == TaskStatus.WAITING, task
    (wait,) = s.rt.store.waits_of(task.id, pending=True)
    s.post(f"/ui/tasks/{task.id}/approvals/{wait.id}", "/ui/approvals", decision="reject")
    return Expect(object=str(task.id), tenant="acme", detail={"decision": "reject"})


def ui_retry(s: Ui) -> Expect:
    failed = s.ran("step", FAILS, "f")
    assert failed.status == TaskStatus.FAILED, failed
    form = {"errorClass": "step_limit", "hours": "24"}
    r = s.post("/ui/failures/retry", "/ui/failures", **form)
    return Expect(object=f"bulk:{_job_of(r)}", tenant="acme", detail={"bulk": "retry"})


def ui_bulk_cancel(s: Ui) -> Expect:
    s.queued("once", f"{TEXT}-bulk", "b")
    form = {"deployment": "once", "status": "queued"}
    r = s.post("/ui/failures/cancel", "/ui/failures", **form)
    return Expect(object=f"bulk:{_job_of(r)}", tenant="acme", detail={"bulk": "cancel"})


#: (what, action, actor, how): every form of the UI that acts, once.
UI_TABLE: list[tuple[str, str, str, Callable[[Any], Expect]]] = [
    ("POST /ui/tasks/{task_id}/cancel", "task.cancel", "operator:ops", ui_cancel),
    (
        "POST /ui/conversations/{conversation_id}/reset",
        "conversation.reset",
        "operator:ops",
        ui_reset,
    ),
    (
        "POST /ui/tasks/{task_id}/approvals/{approval_id}",
        "approval.decide",
        "operator:ops",
        ui_decide,
    ),
    ("POST /ui/failures/retry", "bulk.start", "operator:ops", ui_retry),
    ("POST /ui/failures/cancel", "bulk.start", "operator:ops", ui_bulk_cancel),
]


@pytest.fixture(scope="module")
def ui_done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Performed]:
    with performed(tmp_path_factory.mktemp("ui"), UI_TABLE, Ui, follow_redirects=False) as done:
        yield done


def test_the_uis_forms_record_their_actions_with_the_operator(ui_done: Performed) -> None:
    assert {route for route, _, _, _ in UI_TABLE} == UI_ROUTES, "a form with no row"
    problems = [p for row in ui_done.rows for p in core_problems(row)]
    assert not problems, "\n".join(problems)
    assert len(ui_done.listed) == len(UI_TABLE)


def test_the_uis_entries_name_their_object_tenant_and_detail(ui_done: Performed) -> None:
    problems = [p for row in ui_done.rows for p in detail_problems(row)]
    assert not problems, "\n".join(problems)
    assert TEXT not in json.dumps(ui_done.listed)
