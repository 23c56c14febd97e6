"""The HTTP client maps answers to CLI errors: 4xx → FleetError (exit 2), 5xx/down → exit 1."""

from __future__ import annotations

import socket

import httpx
import pytest

from fleet.cli import main
from fleet.errors import Conflict, Forbidden, InputError, NotFound, QueueFull, Unavailable
from fleet.sdk.client import ApiError, FleetClient

TASK = {"id": "7b0c7f37-5d5e-4f55-9e2b-3f1f4bfa6d43", "status": "running"}


def client_for(handler) -> FleetClient:
    return FleetClient("http://fleet.test/", "k3y", transport=httpx.MockTransport(handler))


def problem(status: int, detail: str, field: str | None = None) -> httpx.Response:
    body: dict = {"type": "about:blank", "title": "t", "status": status, "detail": detail}
    if field:
        body["invalidParams"] = [{"name": field, "reason": detail}]
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


def test_requests_carry_the_key_and_the_documented_names():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "GET" and request.url.path == "/v1/tasks":
            return httpx.Response(200, json={"tasks": []})
        return httpx.Response(202, json=TASK)

    with client_for(handler) as c:
        c.submit("chat", "hi", conversation_key="api:k", labels={"a": "b"}, idempotency_key="i")
        c.get_task(TASK["id"], wait=90)
        c.messages("org/repo#1", "chat")
        c.list_tasks(id_prefix="67bdb609", limit=11)
    submit, get, messages, listed = seen
    assert dict(listed.url.params) == {"idPrefix": "67bdb609", "limit": "11"}
    assert submit.headers["authorization"] == "Bearer k3y"
    assert submit.url.path == "/v1/tasks"
    assert submit.read() == (
        b'{"deployment":"chat","input":"hi","conversationKey":"api:k",'
        b'"labels":{"a":"b"},"idempotencyKey":"i"}'
    )
    assert get.url.params["wait"] == "60"  # capped at the server's maximum
    assert messages.url.raw_path.startswith(b"/v1/conversations/org%2Frepo%231/messages")


def test_wait_repeats_long_polls_until_the_task_is_finished():
    answers = iter(["running", "running", "succeeded"])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**TASK, "status": next(answers)})

    with client_for(handler) as c:
        assert c.wait(TASK["id"], timeout=120)["status"] == "succeeded"


def test_without_a_timeout_wait_long_polls_until_the_task_is_finished():
    answers = iter(["running", "running", "succeeded"])
    waits: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        waits.append(request.url.params["wait"])
        return httpx.Response(200, json={**TASK, "status": next(answers)})

    with client_for(handler) as c:
        assert c.wait(TASK["id"], None)["status"] == "succeeded"
    assert waits == ["60", "60", "60"]  # each long-poll as long as the server allows


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, InputError),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, InputError),
        (422, InputError),
        (429, QueueFull),
    ],
)
def test_a_4xx_is_also_the_error_the_store_raises(status, error):
    """The SDK's server mode raises what its store modes raise for the same request."""
    c = client_for(lambda _: problem(status, "refused", "id"))
    with c, pytest.raises(error) as info:
        c.get_task(TASK["id"])
    assert isinstance(info.value, ApiError) and info.value.status == status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_4xx_is_an_api_error_with_the_problems_detail(status):
    c = client_for(lambda _: problem(status, "no task with id x\nmore", "id"))
    with c, pytest.raises(ApiError) as info:
        c.get_task(TASK["id"])
    assert (info.value.status, info.value.message, info.value.field) == (
        status,
        "no task with id x",
        "id",
    )


def test_a_5xx_or_a_non_problem_answer_is_unavailable():
    c = client_for(lambda _: problem(503, "database unavailable: refused"))
    with c, pytest.raises(Unavailable, match="database unavailable"):
        c.list_tasks()
    c = client_for(lambda _: httpx.Response(502, text="<html>Bad gateway</html>"))
    with c, pytest.raises(Unavailable, match="server answered 502"):
        c.list_tasks()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_cli_exits_1_when_the_server_cannot_be_reached(capsys, monkeypatch):
    monkeypatch.setenv("FLEET_SERVER", f"http://127.0.0.1:{closed_port()}")
    assert main(["tasks", "show", TASK["id"]]) == 1
    assert capsys.readouterr().err.startswith("fleet: cannot reach http://127.0.0.1:")


def test_without_a_key_a_401_tells_to_set_fleet_api_key(capsys, monkeypatch):
    """Issue 33: the CLI user was told to send an Authorization header."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert "authorization" not in request.headers
        return problem(401, "send the API key as 'Authorization: Bearer <key>'")

    monkeypatch.delenv("FLEET_API_KEY", raising=False)
    mock = httpx.MockTransport(handler)
    real = FleetClient.__init__

    def keyless(self, base_url, api_key=None, **kw):  # the CLI's client, on the mock server
        real(self, base_url, api_key, transport=mock)

    monkeypatch.setattr(FleetClient, "__init__", keyless)
    assert main(["--server", "http://fleet.test", "tasks", "ls"]) == 2
    assert capsys.readouterr().err == (
        "fleet: http://fleet.test needs an API key: set FLEET_API_KEY to your caller's key\n"
    )


def test_with_a_key_a_401_says_what_the_server_said():
    with client_for(lambda r: problem(401, "unknown API key")) as c, pytest.raises(ApiError) as e:
        c.get_task(TASK["id"])
    assert (e.value.status, e.value.message) == (401, "unknown API key")


def test_the_cli_refuses_a_bad_id_before_calling_the_server(capsys):
    assert main(["--server", "http://127.0.0.1:1", "tasks", "cancel", "nope"]) == 2
    assert "is not a UUID" in capsys.readouterr().err
