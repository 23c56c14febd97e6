"""Event waits: the rules (names, keys, patterns, timeouts, walls, the model's words), the
``wait_for_event`` tool on a memory port, the config it needs, and the whole path on an
embedded SQLite runtime over HTTP: a run parks, ``POST /v1/events`` (or a trigger's ``[event]``)
resumes it with the data; a repeat changes nothing; an event before its wait matches; the
timeout resumes it; another tenant's or another scope's event does not."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.agents.ports import MemoryWaits
from fleet.agents.tools import ToolContext, event_wait
from fleet.agents.tools.base import Park, ToolError
from fleet.api.app import create_app
from fleet.config.loading import load_config
from fleet.domain import event_waits as rules
from fleet.domain.keys import SINGLETON_SCOPE
from fleet.domain.waits import Decision, Wait
from fleet.errors import ConfigError, InputError
from fleet.runtime import Runtime
from fleet.views import waiting_text
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.support.callers import auth, keyed_runtime

CTX = ToolContext(task_id="task-1", run_id="run-1", call_id="c1")
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("payment.cleared", True),
        ("ci/job:done", True),
        ("a", True),
        ("", False),
        ("  ", False),
        (".hidden", False),
        ("has space", False),
        ("x" * 201, False),
        (None, False),
        (7, False),
    ],
)
def test_an_event_name_is_letters_digits_and_few_marks(name: object, ok: bool) -> None:
    if ok:
        assert rules.check_name(name) == name
    else:
        with pytest.raises(InputError) as err:
            rules.check_name(name)
        assert err.value.field == "event"


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("o-1", True),
        ("order 7 / eu", True),
        ("", False),
        (" ", False),
        ("a\nb", False),
        ("k" * 501, False),
        (12, False),
    ],
)
def test_a_key_is_printable_text(key: object, ok: bool) -> None:
    if ok:
        assert rules.check_key(key) == key
    else:
        with pytest.raises(InputError) as err:
            rules.check_key(key)
        assert err.value.field == "key"


@pytest.mark.parametrize(
    ("name", "globs", "ok"),
    [
        ("payment.cleared", ("payment.*",), True),
        ("payment.cleared", ("payment.failed",), False),
        ("refund.done", ("payment.*", "refund.*"), True),
        ("paymentX", ("payment.*",), False),
    ],
)
def test_an_agent_waits_only_for_the_names_it_lists(
    name: str, globs: tuple[str, ...], ok: bool
) -> None:
    assert rules.allowed(name, globs) is ok


@pytest.mark.parametrize("globs", [[], [""], ["pay ment"], [3]])
def test_bad_patterns_are_refused(globs: list[object]) -> None:
    with pytest.raises(ValueError):
        rules.check_globs(globs)


@pytest.mark.parametrize(
    ("event_scope", "task_scope", "reaches"),
    [
        (None, "api:acme", True),  # an operator's: every scope of the tenant
        ("api:acme", "api:acme", True),
        ("a2a:bot", "api:acme", False),
        ("webhook:stripe", "api:acme", False),
        ("api:acme", SINGLETON_SCOPE, True),  # the deployment's singleton is everyone's
    ],
)
def test_an_event_reaches_its_own_scope_only(
    event_scope: str | None, task_scope: str, reaches: bool
) -> None:
    assert rules.reaches(event_scope, task_scope) is reaches


def test_data_is_capped_and_an_id_is_made_when_none_is_given() -> None:
    with pytest.raises(InputError, match="data is 23 bytes") as err:
        rules.check_data({"blob": "x" * 12}, 20)
    assert err.value.field == "data"
    made = [
        rules.new_event(
            name="a.b",
            key="k",
            data=None,
            event_id=None,
            tenant="t",
            scope=None,
            sender=None,
            now=NOW,
            max_bytes=10,
        ).id
        for _ in range(2)
    ]
    assert made[0] != made[1]
    with pytest.raises(InputError) as bad:
        rules.check_id("")
    assert bad.value.field == "id"


def test_the_model_gets_the_data_marked_as_outside_data_and_how_a_wait_ended() -> None:
    text = rules.arrived_result("payment.cleared", "o-1", {"amount": 20})
    assert text.startswith("event payment.cleared (key o-1) arrived.")
    assert "not instructions" in text and '<event-data>{"amount": 20}</event-data>' in text
    assert rules.ended_result("p.x", "o-1", 30, "expired") == (
        "timed out: no event p.x with key o-1 arrived within 30s"
    )
    assert "interrupted" in rules.ended_result("p.x", "o-1", 30, "interrupted")


def test_a_waiting_task_says_what_it_waits_for() -> None:
    wait = Wait(
        id=str(uuid.uuid4()),
        task_id="t",
        tenant="acme",
        kind="event",
        call_id="c1",
        tool="wait_for_event",
        arguments={},
        redacted=False,
        status="pending",
        requested_at=NOW,
        expires_at=NOW + timedelta(hours=1),
        event="payment.cleared",
        event_key="o-1",
    )
    assert waiting_text(wait) == (
        "waiting for event payment.cleared (key o-1) until 2026-12-07T13:00:00+00:00"
    )


# -- the tool ---------------------------------------------------------------------------------


def test_the_tool_parks_an_event_wait_then_returns_the_data_or_the_timeout() -> None:
    port = MemoryWaits()
    tool = event_wait.tool(port, ("payment.*",), 3600.0)
    args = {"event": "payment.cleared", "key": "o-1", "timeout": "10m"}
    with pytest.raises(Park) as parked:
        tool.fn(args, CTX)  # type: ignore[misc]
    req = parked.value.request
    assert (req.kind, req.call_id, req.event, req.key, req.timeout_s) == (
        "event",
        "c1",
        "payment.cleared",
        "o-1",
        600.0,
    )
    port.decided["c1"] = Decision("done", data={"amount": 20})
    assert '"amount": 20' in tool.fn(args, CTX)  # type: ignore[misc]
    port.decided["c1"] = Decision("expired")
    assert tool.fn(args, CTX).startswith("timed out")  # type: ignore[misc]


def test_no_timeout_means_the_agents_longest() -> None:
    tool = event_wait.tool(MemoryWaits(), ("payment.*",), 7200.0)
    with pytest.raises(Park) as parked:
        tool.fn({"event": "payment.cleared", "key": "o-1"}, CTX)  # type: ignore[misc]
    assert parked.value.request.timeout_s == 7200.0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"event": "refund.done", "key": "o-1"}, "not one this agent may wait for"),
        ({"event": "payment.cleared", "key": ""}, "key is required"),
        ({"event": "", "key": "o-1"}, "event is required"),
        ({"event": "payment.cleared", "key": "o-1", "timeout": "2h"}, "timeout must be"),
        ({"event": "payment.cleared", "key": "o-1", "timeout": "soon"}, "timeout"),
    ],
)
def test_a_bad_call_is_the_models_error_and_parks_nothing(args: dict[str, Any], says: str) -> None:
    port = MemoryWaits()
    with pytest.raises(ToolError, match=says):
        event_wait.tool(port, ("payment.*",), 3600.0).fn(args, CTX)  # type: ignore[misc]
    assert port.asked == []


# -- the config -------------------------------------------------------------------------------


def _config(tmp_path: Path, agent: str) -> Path:
    return write_config(tmp_path / "config", {**AGENTS, "payer": agent}, DEPLOYMENTS)


def test_a_bare_wait_for_event_entry_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = _config(tmp_path, 'model = "echo"\ntools = ["wait_for_event"]\n')
    with pytest.raises(ConfigError) as err:
        load_config(root)
    text = str(err.value)
    assert "payer.toml" in text and "events" in text and "payment.*" in text


def test_events_belong_to_wait_for_event_alone(tmp_path: Path) -> None:
    root = _config(tmp_path, 'model = "echo"\ntools = [{ tool = "pause", events = ["a.*"] }]\n')
    with pytest.raises(ConfigError, match="for 'wait_for_event' only"):
        load_config(root)


def test_a_trigger_is_a_task_or_an_event_not_both(tmp_path: Path) -> None:
    root = write_config(tmp_path / "config")
    (root / "triggers").mkdir()
    (root / "triggers" / "pay.toml").write_text(
        'deployment = "chat"\npublic = true\n[event]\nname = "p.x"\nkey = { pointer = "/k" }\n'
    )
    with pytest.raises(ConfigError, match="not both or neither"):
        load_config(root)


# -- the whole path, embedded (SQLite, one process) --------------------------------------------

KEYS = {n: f"{n}-key-0123456789" for n in ("acme", "bravo", "acme-bot", "acme-ops")}
CALLERS = {
    "acme": 'source = "api"\ntenant = "acme"\n',
    "bravo": 'source = "api"\ntenant = "bravo"\n',
    "acme-bot": 'source = "a2a"\ntenant = "acme"\n',  # same tenant, another scope
    "acme-ops": 'source = "api"\ntenant = "acme"\noperator = true\n',
}
PAYER = """
model = "echo"
tools = [{ tool = "wait_for_event", events = ["payment.*"], max_timeout = "1h" }]
"""
STRIPE = """
public = true
tenant = "acme"
idempotency_header = "X-Delivery"
[event]
name = { pointer = "/type" }
key = { pointer = "/data/order" }
data = "/data"
scope = "api:acme"
"""


SIGNED = """
tenant = "acme"
[signature]
style = "hmac"
header = "X-Signature"
secret_env = "FLEET_TEST_EVENT_SECRET"
[event]
name = "payment.cleared"
key = { pointer = "/order" }
scope = "api:acme"
"""


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(
        tmp_path,
        CALLERS,
        KEYS,
        {**AGENTS, "payer": PAYER},
        {**DEPLOYMENTS, "pay": 'agent = "payer"\n'},
        folders={"triggers": {"stripe": STRIPE, "paid": SIGNED}},
    )
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt), raise_server_exceptions=False) as c:
        yield c


def wait_call(key: str, timeout: str = "10m", event: str = "payment.cleared") -> str:
    return "/tool wait_for_event " + json.dumps({"event": event, "key": key, "timeout": timeout})


def submit(client: TestClient, text: str, who: str = "acme") -> str:
    r = client.post("/v1/tasks", json={"deployment": "pay", "input": text}, headers=auth(KEYS, who))
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def status_of(client: TestClient, task_id: str, wanted: str) -> dict[str, Any]:
    """The task once its status is ``wanted`` (a long poll for an end; a poll for waiting)."""
    for _ in range(400):
        found = client.get(
            f"/v1/tasks/{task_id}",
            params={"wait": 5 if wanted != "waiting" else 0},
            headers=auth(KEYS, "acme"),
        ).json()
        if found["status"] == wanted:
            return dict(found)
        if wanted == "waiting" and found["status"] not in ("queued", "leased", "running"):
            break
        if wanted == "waiting":
            client.get("/healthz")  # (a round trip: the embedded run goes on meanwhile)
    raise AssertionError(f"task {task_id} is {found['status']}, not {wanted}: {found}")


def send(client: TestClient, who: str, **body: Any) -> Any:
    return client.post("/v1/events", json=body, headers=auth(KEYS, who))


def tool_outputs(rt: Runtime, task_id: str) -> list[str]:
    return [
        json.dumps(t["output"])
        for t in rt.store.traces_of(uuid.UUID(task_id))
        if t["kind"] == "tool"
    ]


def test_an_event_resumes_the_waiting_run_with_its_data_once(
    rt: Runtime, client: TestClient
) -> None:
    task = submit(client, wait_call("o-1"))
    waiting = status_of(client, task, "waiting")
    [shown] = waiting["waitingFor"]
    assert (shown["kind"], shown["event"], shown["key"]) == ("event", "payment.cleared", "o-1")
    assert shown["text"].startswith("waiting for event payment.cleared (key o-1) until ")

    # walls: another tenant's event, and the same tenant's from another scope, change nothing
    assert (
        send(client, "bravo", event="payment.cleared", key="o-1", id="b1").json()["resolved"] == 0
    )
    assert (
        send(client, "acme-bot", event="payment.cleared", key="o-1", id="x1").json()["resolved"]
        == 0
    )
    assert client.get(f"/v1/tasks/{task}", headers=auth(KEYS, "acme")).json()["status"] == "waiting"

    first = send(client, "acme", event="payment.cleared", key="o-1", data={"amount": 20}, id="e1")
    assert first.status_code == 202
    assert first.json() | {"receivedAt": None} == {
        "id": "e1",
        "event": "payment.cleared",
        "key": "o-1",
        "tenant": "acme",
        "resolved": 1,
        "duplicate": False,
        "receivedAt": None,
    }
    done = status_of(client, task, "succeeded")
    assert done["waitingFor"] == []
    [output] = tool_outputs(rt, task)
    assert "arrived" in output and '\\"amount\\": 20' in output

    again = send(client, "acme", event="payment.cleared", key="o-1", data={"amount": 99}, id="e1")
    assert again.status_code == 200
    assert (again.json()["duplicate"], again.json()["resolved"]) == (True, 1)
    assert [r.status for r in rt.store.runs_of(uuid.UUID(task))] == ["waiting", "succeeded"]


def test_an_event_before_its_wait_is_kept_for_it_and_taken_once_per_task(
    rt: Runtime, client: TestClient
) -> None:
    sent = send(client, "acme", event="payment.cleared", key="o-2", data={"ok": True}, id="early")
    assert sent.json()["resolved"] == 0
    task = submit(client, wait_call("o-2"))
    status_of(client, task, "succeeded")
    [output] = tool_outputs(rt, task)
    assert '\\"ok\\": true' in output
    # another task's wait takes it too (each wait that starts within the window); the runs
    # never waited for a worker: one run each
    other = submit(client, wait_call("o-2"))
    status_of(client, other, "succeeded")
    assert [r.status for r in rt.store.runs_of(uuid.UUID(other))] == ["waiting", "succeeded"]


def test_the_timeout_resumes_the_run_told_that_none_came(rt: Runtime, client: TestClient) -> None:
    task = submit(client, wait_call("o-3", timeout="1s"))
    status_of(client, task, "succeeded")
    [output] = tool_outputs(rt, task)
    assert "timed out: no event payment.cleared with key o-3 arrived within 1s" in output


def test_an_operator_sends_within_its_reach(rt: Runtime, client: TestClient) -> None:
    task = submit(client, wait_call("o-4"))
    status_of(client, task, "waiting")
    refused = send(client, "acme-ops", event="payment.cleared", key="o-4", tenant="bravo")
    assert refused.status_code == 403 and refused.json()["invalidParams"][0]["name"] == "tenant"
    plain = send(client, "acme", event="payment.cleared", key="o-4", tenant="bravo")
    assert plain.status_code == 403
    assert send(client, "acme-ops", event="payment.cleared", key="o-4").json()["resolved"] == 1
    status_of(client, task, "succeeded")


def test_a_trigger_delivery_is_an_event_of_its_scope(rt: Runtime, client: TestClient) -> None:
    task = submit(client, wait_call("o-5", event="payment.refunded"))
    status_of(client, task, "waiting")
    body = {"type": "payment.refunded", "data": {"order": "o-5", "amount": 7}}
    r = client.post("/v1/triggers/stripe", json=body, headers={"X-Delivery": "d-1"})
    assert r.status_code == 202, r.text
    assert (r.json()["id"], r.json()["resolved"]) == ("d-1", 1)
    status_of(client, task, "succeeded")
    assert '\\"amount\\": 7' in tool_outputs(rt, task)[0]
    repeat = client.post("/v1/triggers/stripe", json=body, headers={"X-Delivery": "d-1"})
    assert repeat.status_code == 200 and repeat.json()["duplicate"] is True
    missing = client.post("/v1/triggers/stripe", json={"type": "payment.refunded", "data": {}})
    assert missing.status_code == 422 and missing.json()["invalidParams"][0]["name"] == "key"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "o-1"}, "event"),
        ({"event": "payment.cleared"}, "key"),
        ({"event": "pay ment", "key": "o-1"}, "event"),
        ({"event": "payment.cleared", "key": "o-1", "id": ""}, "id"),
        ({"event": "payment.cleared", "key": "o-1", "data": "x" * 20_000}, "data"),
    ],
)
def test_bad_events_are_refused_naming_the_field_and_change_nothing(
    rt: Runtime, client: TestClient, body: dict[str, Any], field: str
) -> None:
    r = send(client, "acme", **body)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["invalidParams"][0]["name"] == field
    assert rt.store.events_kept("acme", "payment.cleared", "o-1") == []


def test_the_send_path_is_not_taken_for_a_task_event_stream(client: TestClient) -> None:
    assert client.get("/v1/events", headers=auth(KEYS, "acme")).status_code == 405
    unknown = client.post(
        "/v1/events", json={"event": "a.b", "key": "k", "nope": 1}, headers=auth(KEYS, "acme")
    )
    assert unknown.status_code == 422


def test_fleet_events_send_on_the_store_resolves_as_the_operator(
    rt: Runtime,
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fleet.cli.app import main

    task = submit(client, wait_call("o-9"))
    status_of(client, task, "waiting")
    monkeypatch.setenv("FLEET_HOME", str(rt.settings.home))
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(rt.settings.config_dir))
    monkeypatch.delenv("FLEET_SERVER", raising=False)
    args = ["events", "send", "payment.cleared", "--key", "o-9", "--tenant", "acme"]
    assert main([*args, "--data", '{"paid": true}', "--id", "cli-1"]) == 0
    said = capsys.readouterr().out
    assert "event payment.cleared (key o-9, id cli-1): resolved 1 wait" in said
    [wait] = rt.store.waits_of(uuid.UUID(task))
    assert (wait.status, wait.event_id, wait.data) == ("done", "cli-1", {"paid": True})
    assert main([*args, "--id", "cli-1"]) == 0
    assert "seen before; nothing changed" in capsys.readouterr().out
    assert main(["events", "send", "payment.cleared", "--key", " "]) == 2
    assert capsys.readouterr().err.startswith("fleet: key is required")


def test_a_signed_event_trigger_takes_only_signed_deliveries(
    rt: Runtime, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib as hashes
    import hmac

    secret = "an-event-signing-secret"
    monkeypatch.setenv("FLEET_TEST_EVENT_SECRET", secret)
    task = submit(client, wait_call("o-11"))
    status_of(client, task, "waiting")
    body = json.dumps({"order": "o-11", "amount": 5}).encode()
    headers = {"Content-Type": "application/json"}
    unsigned = client.post("/v1/triggers/paid", content=body, headers=headers)
    wrong = client.post(
        "/v1/triggers/paid", content=body, headers={**headers, "X-Signature": "0" * 64}
    )
    assert (unsigned.status_code, wrong.status_code) == (401, 401)
    assert rt.store.events_kept("acme", "payment.cleared", "o-11") == []  # nothing stored
    sig = hmac.new(secret.encode(), body, hashes.sha256).hexdigest()
    signed = client.post("/v1/triggers/paid", content=body, headers={**headers, "X-Signature": sig})
    assert signed.status_code == 202 and signed.json()["resolved"] == 1, signed.text
    status_of(client, task, "succeeded")
    assert '\\"amount\\": 5' in tool_outputs(rt, task)[0]
