"""The operator UI over an embedded SQLite runtime: who may look (operator keys, open API, off),
sessions, CSRF, what an operator sees, and the pages' content."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.api.ui_auth import COOKIE, UiAuth
from fleet.dispatch.embedded import run_until_done
from fleet.runtime import Runtime
from tests.support.callers import auth, keyed_runtime

KEYS = {
    "boss": "boss-key-0123456789",
    "narrow": "narrow-key-0123456789",
    "app": "app-key-0123456789",
    "acme-ops": "acme-ops-key-0123456789",
}
CALLERS = {
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
    "narrow": 'source = "api"\noperator = true\ntenants = ["*"]\ndeployments = ["chat"]\n',
    "app": 'source = "api"\n',
}


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS)
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(
        create_app(rt, run_embedded=False),
        raise_server_exceptions=False,
        follow_redirects=False,
    ) as c:
        yield c


def sign_in(client: TestClient, name: str) -> None:
    r = client.post("/ui/login", data={"key": KEYS[name], "next": "/ui"})
    assert r.status_code == 303 and r.headers["location"] == "/ui", r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert KEYS[name] not in cookie


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


def test_pages_refuse_without_a_session_and_offer_the_login_form(client: TestClient) -> None:
    for path in ("/ui", "/ui/conversations", f"/ui/runs/{uuid.uuid4()}"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert 'name="key"' in r.text and 'type="password"' in r.text
        assert 'name="next" value="' + path in r.text
    events = client.get(f"/ui/tasks/{uuid.uuid4()}/events")
    assert events.status_code == 401


@pytest.mark.parametrize(
    ("key", "status", "says"),
    [
        ("wrong-key", 401, "unknown key"),
        ("", 401, "unknown key"),
        (KEYS["app"], 403, "not an operator"),
    ],
)
def test_a_key_that_is_no_operators_is_refused(
    client: TestClient, key: str, status: int, says: str
) -> None:
    r = client.post("/ui/login", data={"key": key})
    assert r.status_code == status and says in r.text
    assert COOKIE not in r.headers.get("set-cookie", "")
    assert client.get("/ui").status_code == 401


def test_an_operator_sees_every_scope_of_its_deployments(rt: Runtime, client: TestClient) -> None:
    a2a = rt.dispatcher.submit("chat", "from a2a", scope="a2a:alice", key="c1").task
    hook = rt.dispatcher.submit("tooly", "from a hook", scope="webhook:gh", key="7").task
    sign_in(client, "boss")
    page = client.get("/ui/conversations").text
    assert "a2a:alice:c1" in page and "webhook:gh:7" in page
    overview = client.get("/ui").text
    assert ">chat</a>" in overview and ">tooly</a>" in overview

    narrow = TestClient(client.app, follow_redirects=False)
    with narrow:
        sign_in(narrow, "narrow")
        page = narrow.get("/ui/conversations").text
        assert "a2a:alice:c1" in page and "webhook:gh:7" not in page
        assert ">tooly</a>" not in narrow.get("/ui").text
        hidden = narrow.get(f"/ui/conversations/{hook.conversation_id}")
        assert hidden.status_code == 404
        assert narrow.get(f"/ui/tasks/{hook.id}/events").status_code == 404
        assert narrow.get(f"/ui/conversations/{a2a.conversation_id}").status_code == 200
        assert narrow.get("/ui/conversations?deployment=tooly").status_code == 404


def test_cancel_needs_the_csrf_token_and_a_confirmation(rt: Runtime, client: TestClient) -> None:
    task = rt.dispatcher.submit("chat", "wait for me", scope="api", key="k").task
    sign_in(client, "boss")
    page = client.get(f"/ui/conversations/{task.conversation_id}").text
    assert 'data-confirm="Cancel task #1 (queued)?' in page
    url = f"/ui/tasks/{task.id}/cancel"
    assert client.post(url, data={"confirmed": "yes"}).status_code == 403
    assert client.post(url, data={"csrf": "0" * 32, "confirmed": "yes"}).status_code == 403
    token = csrf(page)
    asked = client.post(url, data={"csrf": token})  # without JS: a page asks to confirm
    assert asked.status_code == 200 and 'name="confirmed" value="yes"' in asked.text
    assert rt.store.get_task(task.id).status == "queued"
    done = client.post(url, data={"csrf": token, "confirmed": "yes", "next": "https://evil"})
    assert done.status_code == 303 and done.headers["location"] == "/ui"
    assert rt.store.get_task(task.id).status == "cancelled"


def test_a_tampered_or_stale_session_is_refused(rt: Runtime, client: TestClient) -> None:
    sign_in(client, "boss")
    good = client.cookies[COOKIE]
    sig, _, body = good.partition(".")
    forged = f"{sig}.{body.replace('boss', 'narrow')}"
    client.cookies.clear()
    assert client.get("/ui", headers={"Cookie": f"{COOKIE}={good}"}).status_code == 200
    assert client.get("/ui", headers={"Cookie": f"{COOKIE}={forged}"}).status_code == 401
    later = UiAuth(client.app.state.keyring, b"x", clock=lambda: 10.0)  # type: ignore[attr-defined]
    cookie, _ = later.sign_in(KEYS["boss"])
    expired = UiAuth(client.app.state.keyring, b"x", clock=lambda: 10.0 + 13 * 3600)  # type: ignore[attr-defined]
    with pytest.raises(Exception, match="expired"):
        expired.viewer(cookie)


def test_run_page_shows_provenance_and_steps(rt: Runtime, client: TestClient) -> None:
    first = rt.dispatcher.submit("tooly", "hello", scope="api", key="k").task
    assert rt.local_waker is not None
    run_until_done(rt.dispatcher, rt.local_waker, first.id, 30)
    task = rt.dispatcher.submit("tooly", "/tool current_time {}", scope="api", key="k").task
    run_until_done(rt.dispatcher, rt.local_waker, task.id, 30)
    (run,) = rt.store.list_runs(task.id)
    sign_in(client, "boss")
    page = client.get(f"/ui/runs/{run.id}").text
    assert "Context provenance" in page and "Injected" in page and "Dropped" in page
    assert page.count('<tr data-step="') == 3
    assert "current_time" in page and "→ current_time" in page
    assert "echo: hello [history: 0]" in page  # an injected message's preview
    assert "data-events" not in page  # finished: nothing to follow
    conversation = client.get(f"/ui/conversations/{task.conversation_id}").text
    assert f'href="/ui/runs/{run.id}"' in conversation
    assert "echo: /tool current_time {} [history: 2]" in conversation  # the transcript


@pytest.mark.parametrize(("secret", "warned"), [("short-ui-secret", True), ("s" * 32, False)])
def test_a_short_ui_secret_is_warned_at_start_and_the_ui_still_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, secret: str, warned: bool
) -> None:
    """For one release a process upgraded with a short FLEET_UI_SECRET starts (`fleet check`
    refuses it): the start warns, naming the variable and never its value."""
    runtime = keyed_runtime(tmp_path, CALLERS, KEYS, ui_secret=secret)
    try:
        app = create_app(runtime, run_embedded=False)
        with (
            caplog.at_level("WARNING", logger="fleet"),
            TestClient(app, follow_redirects=False) as c,
        ):
            sign_in(c, "boss")
            assert c.get("/ui").status_code == 200
    finally:
        runtime.close()
    lines = [r.getMessage() for r in caplog.records if "FLEET_UI_SECRET" in r.getMessage()]
    if not warned:
        assert lines == []
        return
    assert lines == [
        "environment: FLEET_UI_SECRET: holds fewer than 32 bytes; give a longer secret, e.g. "
        "`openssl rand -hex 32` (a shorter one could be guessed, and operator UI sessions forged "
        "with it); starting anyway: `fleet check` refuses it, and the next release will refuse "
        "to start with it"
    ]
    assert secret not in caplog.text


def test_without_operators_the_ui_is_off(tmp_path: Path) -> None:
    runtime = keyed_runtime(tmp_path, {"app": CALLERS["app"]}, KEYS)
    try:
        with TestClient(create_app(runtime, run_embedded=False), follow_redirects=False) as c:
            assert c.get("/ui").status_code == 404
            assert "off" in c.get("/ui/login").text
            assert c.post("/ui/login", data={"key": KEYS["app"]}).status_code == 303
            assert c.get("/ui").status_code == 404
    finally:
        runtime.close()


def test_an_open_api_serves_the_ui_without_sign_in(tmp_path: Path) -> None:
    runtime = keyed_runtime(tmp_path)
    try:
        with TestClient(create_app(runtime, run_embedded=False), follow_redirects=False) as c:
            page = c.get("/ui")
            assert page.status_code == 200 and "Overview" in page.text
            assert "Sign out" not in page.text
            assert c.get("/ui/login").status_code == 303
            assert page.headers["content-security-policy"].startswith("default-src 'self'")
            task = runtime.dispatcher.submit("chat", "x", scope="api", key="k").task
            conv = c.get(f"/ui/conversations/{task.conversation_id}").text
            r = c.post(f"/ui/tasks/{task.id}/cancel", data={"csrf": csrf(conv), "confirmed": "yes"})
            assert r.status_code == 303
    finally:
        runtime.close()


def test_static_files_are_the_packaged_ones(client: TestClient) -> None:
    assert client.get("/ui/static/ui.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/static/ui.css").status_code == 200
    assert client.get("/ui/static/../api/ui.py").status_code == 404
    assert client.get("/ui/static/missing.js").status_code == 404


def test_reset_needs_the_csrf_token_and_a_confirmation(rt: Runtime, client: TestClient) -> None:
    adm = rt.dispatcher.submit("chat", "hello", scope="api", key="r")
    rt.dispatcher.drain(adm.task.conversation_id)
    queued = rt.dispatcher.submit("chat", "left over", scope="api", key="r").task
    sign_in(client, "boss")
    page = client.get(f"/ui/conversations/{adm.task.conversation_id}").text
    assert 'data-confirm="Reset api:r?' in page
    url = f"/ui/conversations/{adm.task.conversation_id}/reset"
    assert client.post(url, data={"confirmed": "yes"}).status_code == 403
    token = csrf(page)
    asked = client.post(url, data={"csrf": token})  # without JS: a page asks to confirm
    assert asked.status_code == 200 and "starts generation 1" in asked.text
    assert rt.dispatcher.lifecycle.show("chat", "r").generation == 0
    done = client.post(url, data={"csrf": token, "confirmed": "yes"})
    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/conversations/{adm.task.conversation_id}"
    assert rt.dispatcher.lifecycle.show("chat", "r").generation == 1
    assert rt.store.get_task(queued.id).status == "cancelled"
    shown = client.get(done.headers["location"]).text
    assert "<dt>Generation</dt><dd>1</dd>" in shown
    missing = client.post(f"/ui/conversations/{uuid.uuid4()}/reset", data={"csrf": token})
    assert missing.status_code == 404


def test_the_overview_shows_the_tenants_the_viewer_reaches(tmp_path: Path) -> None:
    # acme's operator reaches acme alone; boss reaches every tenant
    ops = 'source = "api"\ntenant = "acme"\noperator = true\n'
    runtime = keyed_runtime(tmp_path, {**CALLERS, "acme-ops": ops}, KEYS)
    try:
        for key in ("a", "b"):
            runtime.dispatcher.submit("chat", "x", scope="api:acme", key=key, tenant="acme")
        with TestClient(create_app(runtime, run_embedded=False), follow_redirects=False) as c:
            sign_in(c, "boss")
            every = c.get("/ui").text.split('<h2 id="tenants">')[1]
            rows = re.findall(r'<th scope="row">([a-z-]+)</th>', every)
            assert rows == ["acme", "app", "boss", "default", "narrow"]
            acme = every.split('<th scope="row">acme</th>')[1].split("</tr>")[0]
            cells = re.findall(r'<td class="num[^"]*"[^>]*>([^<]*)</td>', acme)
            assert cells[:4] == ["1", "0", "0", "2"]  # weight, running, conversations, queued
        with TestClient(create_app(runtime, run_embedded=False), follow_redirects=False) as c:
            sign_in(c, "acme-ops")
            own = c.get("/ui").text.split('<h2 id="tenants">')[1]
            assert re.findall(r'<th scope="row">([a-z-]+)</th>', own) == ["acme"]
    finally:
        runtime.close()


def test_the_overview_lists_schedules_with_their_next_tick(rt: Runtime, client: TestClient) -> None:
    from fleet.config.schedules import ScheduleSpec
    from fleet.dispatch import schedules

    daily = ScheduleSpec(deployment="chat", cron="0 8 * * *", input="digest")  # type: ignore[call-arg]
    made = schedules.create(
        rt.dispatcher, "digest", daily, tenant="acme", scope="api:acme", caller=None
    )
    hourly = ScheduleSpec(deployment="tooly", every=3600.0, input="check")  # type: ignore[call-arg]
    schedules.create(rt.dispatcher, "check", hourly, tenant="acme", scope="api:acme", caller=None)
    sign_in(client, "boss")
    page = client.get("/ui").text
    assert made.next_tick is not None
    next_tick = made.next_tick.isoformat().replace("+00:00", "Z")
    assert f'<time datetime="{next_tick}">{next_tick[:10]} 08:00:00</time>' in page
    assert "cron 0 8 * * *" in page and "every 1h" in page and "api:acme" in page

    narrow = TestClient(client.app, follow_redirects=False)
    with narrow:
        sign_in(narrow, "narrow")  # chat alone: tooly's schedule is not shown
        page = narrow.get("/ui").text
        assert "cron 0 8 * * *" in page and "every 1h" not in page


def test_the_uis_actions_are_in_the_audit_log_with_their_operator(
    rt: Runtime, client: TestClient
) -> None:
    task = rt.dispatcher.submit("chat", "wait for me", scope="api", key="k").task
    sign_in(client, "boss")
    page = client.get(f"/ui/conversations/{task.conversation_id}").text
    url = f"/ui/tasks/{task.id}/cancel"
    assert client.post(url, data={"csrf": "0" * 32, "confirmed": "yes"}).status_code == 403
    assert client.post(url, data={"csrf": csrf(page)}).status_code == 200  # only asks
    assert client.post(url, data={"csrf": csrf(page), "confirmed": "yes"}).status_code == 303
    r = client.get("/v1/audit", headers=auth(KEYS, "boss"))
    found = [(e["action"], e["actor"], e["object"], e["outcome"]) for e in r.json()["entries"]]
    assert found == [
        ("task.cancel", "operator:boss", str(task.id), "ok"),
        ("task.cancel", "operator:boss", str(task.id), "refused 403"),
    ]
    assert r.json()["entries"][0]["tenant"] == "default"
