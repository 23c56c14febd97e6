"""The operator UI's approvals on an embedded SQLite runtime: the Approvals page and a waiting
task's run and conversation pages list pending approvals with Approve / Reject; the actions
need the CSRF token, name the operator who decided, and reach only the operator's tenants (an
approval of another tenant is "not found", and nothing changes)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.support.approvals import (
    KEYS,
    approvals_runtime,
    auth,
    park,
    pending_ids,
    resume,
    write_approvals_config,
)


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("FLEET_TEST_COUNTER", str(tmp_path / "side-effects.txt"))
    runtime = approvals_runtime(tmp_path)
    yield runtime
    runtime.close()


@pytest.fixture
def api(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(
        create_app(rt, run_embedded=False), raise_server_exceptions=False, follow_redirects=False
    ) as client:
        yield client


@pytest.fixture
def browser(api: TestClient) -> Iterator[TestClient]:
    """Another client of the same app, for the operator's UI session."""
    with TestClient(api.app, raise_server_exceptions=False, follow_redirects=False) as c:
        yield c


def sign_in(client: TestClient, who: str) -> str:
    """Sign ``who`` in; the CSRF token of its session."""
    r = client.post("/ui/login", data={"key": KEYS[who], "next": "/ui/approvals"})
    assert r.status_code == 303, r.text
    return csrf(client.get("/ui/approvals").text)


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


def decide_url(task_id: object, approval_id: object) -> str:
    return f"/ui/tasks/{task_id}/approvals/{approval_id}"


def counted(tmp_path: Path) -> int:
    path = tmp_path / "side-effects.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_approvals_page_lists_whats_pending_with_its_buttons(rt, api, browser) -> None:
    alpha, bravo = park(rt, api, "alpha"), park(rt, api, "bravo")
    sign_in(browser, "boss")
    page = browser.get("/ui/approvals")
    assert page.status_code == 200 and 'aria-current="page">Approvals' in page.text
    for task in (alpha, bravo):
        (approval,) = pending_ids(rt, task)
        assert f'action="{decide_url(task.id, approval)}"' in page.text
        assert f'href="/ui/tasks/{task.id}"' in page.text
    assert page.text.count('value="approve"') == 2 and page.text.count('value="reject"') == 2
    assert page.text.count('name="reason"') == 2 and "<code>count</code>" in page.text
    shop = browser.get("/ui").text.split(">shop</a></th>")[1].split("</tr>")[0]
    cells = re.findall(r'<td class="num">([^<]*)</td>', shop)
    assert cells[:4] == ["0", "0", "0", "2"]  # queued, running, interrupted, waiting
    (approval,) = pending_ids(rt, alpha)
    rt.dispatcher.waiting.decide(alpha, uuid.UUID(approval), "approve", by="x")
    rt.dispatcher.waiting.decide(bravo, uuid.UUID(pending_ids(rt, bravo)[0]), "reject", by="x")
    assert "No approvals are waiting" in browser.get("/ui/approvals").text


def test_approve_needs_the_csrf_token_and_names_the_operator(rt, api, browser, tmp_path) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    token = sign_in(browser, "alpha-ops")
    url = decide_url(task.id, approval)
    assert browser.post(url, data={"decision": "approve"}).status_code == 403
    assert browser.post(url, data={"decision": "approve", "csrf": "0" * 32}).status_code == 403
    assert pending_ids(rt, task) == [approval]
    done = browser.post(url, data={"csrf": token, "decision": "approve", "next": "https://evil"})
    assert done.status_code == 303 and done.headers["location"] == "/ui"  # never another site
    (decided,) = rt.store.waits_of(task.id)
    assert (decided.status, decided.decided_by) == ("approved", "alpha-ops")
    assert resume(rt, task).status == TaskStatus.SUCCEEDED and counted(tmp_path) == 1
    again = browser.post(url, data={"csrf": token, "decision": "reject"})
    assert again.status_code == 409 and "a decision is final" in again.text


def test_reject_with_a_reason_from_the_run_page(rt, api, browser, tmp_path) -> None:
    task = park(rt, api, "bravo")
    (approval,) = pending_ids(rt, task)
    (run,) = rt.store.list_runs(task.id)
    token = sign_in(browser, "boss")
    page = browser.get(f"/ui/runs/{run.id}").text
    assert "Waiting for approval" in page and f'action="{decide_url(task.id, approval)}"' in page
    assert '<span class="badge waiting"' in page
    form = {
        "csrf": token,
        "decision": "reject",
        "reason": " not today ",
        "next": f"/ui/runs/{run.id}",
    }
    done = browser.post(decide_url(task.id, approval), data=form)
    assert done.status_code == 303 and done.headers["location"] == f"/ui/runs/{run.id}"
    (decided,) = rt.store.waits_of(task.id)
    assert (decided.status, decided.decided_by, decided.reason) == ("rejected", "boss", "not today")
    assert resume(rt, task).status.terminal and counted(tmp_path) == 0
    assert "Waiting for approval" not in browser.get(f"/ui/runs/{run.id}").text


def test_the_conversation_page_of_a_waiting_task_has_the_buttons(rt, api, browser) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    sign_in(browser, "alpha-ops")
    page = browser.get(f"/ui/conversations/{task.conversation_id}").text
    live = page.split('<section id="live"')[1].split("</section>")[0]
    assert 'class="badge waiting"' in live and f'action="{decide_url(task.id, approval)}"' in live
    assert f'value="/ui/conversations/{task.conversation_id}"' in live  # back here after


@pytest.mark.parametrize(
    ("form", "status", "says"),
    [
        ({"decision": "maybe"}, 422, "decision must be"),
        ({"decision": "reject", "reason": "x" * 501}, 422, "at most 500"),
        ({"decision": ""}, 422, "decision must be"),
    ],
)
def test_bad_input_is_an_error_page_and_changes_nothing(
    rt, api, browser, form, status, says
) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    token = sign_in(browser, "boss")
    r = browser.post(decide_url(task.id, approval), data={"csrf": token, **form})
    assert r.status_code == status and says in r.text and "Traceback" not in r.text
    assert pending_ids(rt, task) == [approval]
    missing = browser.post(decide_url(task.id, uuid.uuid4()), data={"csrf": token, **form})
    assert missing.status_code in (404, 422)
    bad_id = browser.post(decide_url(task.id, "nope"), data={"csrf": token, **form})
    assert bad_id.status_code == 422 and "Traceback" not in bad_id.text


def test_an_operator_cannot_list_or_decide_another_tenants_approvals(rt, api, browser) -> None:
    """Bravo's operator names alpha's task and approval: the same 404 page as a missing task,
    nothing listed, and alpha's approval stays pending."""
    alpha = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, alpha)
    (run,) = rt.store.list_runs(alpha.id)
    token = sign_in(browser, "bravo-ops")
    listed = browser.get("/ui/approvals").text
    assert str(alpha.id) not in listed and approval not in listed
    assert "No approvals are waiting" in listed
    missing_task = browser.post(
        decide_url(uuid.uuid4(), approval), data={"csrf": token, "decision": "approve"}
    )
    assert missing_task.status_code == 404
    for decision in ("approve", "reject"):
        theirs = browser.post(
            decide_url(alpha.id, approval), data={"csrf": token, "decision": decision}
        )
        assert (theirs.status_code, theirs.text) == (404, missing_task.text)
    assert browser.get(f"/ui/runs/{run.id}").status_code == 404
    assert pending_ids(rt, alpha) == [approval]
    assert rt.store.get_task(alpha.id).status == TaskStatus.WAITING
    # alpha's own operator sees it
    with TestClient(api.app, follow_redirects=False) as own:
        sign_in(own, "alpha-ops")
        assert approval in own.get("/ui/approvals").text


def test_an_open_api_decides_as_operator(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FLEET_TEST_COUNTER", str(tmp_path / "side-effects.txt"))
    config = write_approvals_config(tmp_path / "config")
    for caller in (config / "callers").iterdir():
        caller.unlink()
    runtime = build(Settings(home=tmp_path / "home", config_dir=config))
    try:
        task = runtime.dispatcher.submit("shop", "/tool count {}", scope="api", key="k").task
        runtime.dispatcher.drain(task.conversation_id)
        (approval,) = pending_ids(runtime, task)
        with TestClient(create_app(runtime, run_embedded=False), follow_redirects=False) as c:
            page = c.get("/ui/approvals").text
            r = c.post(
                decide_url(task.id, approval), data={"csrf": csrf(page), "decision": "approve"}
            )
            assert r.status_code == 303
        assert runtime.store.waits_of(task.id)[0].decided_by == "operator"
    finally:
        runtime.close()


def test_over_the_api_an_operator_decides_approvals_of_the_tenants_it_reaches(rt, api) -> None:
    """An operator key lists and decides approvals of every scope of the tenants it reaches;
    another tenant's operator gets not found, and nothing changes."""
    task = park(rt, api, "alpha")
    [approval] = pending_ids(rt, task)
    listed = api.get("/v1/approvals", headers=auth("alpha-ops"))
    assert [a["id"] for a in listed.json()["approvals"]] == [approval]
    assert api.get("/v1/approvals", headers=auth("bravo-ops")).json()["approvals"] == []
    url = f"/v1/tasks/{task.id}/approvals/{approval}"
    refused = api.post(url, json={"decision": "approve"}, headers=auth("bravo-ops"))
    assert refused.status_code == 404 and pending_ids(rt, task) == [approval]
    done = api.post(url, json={"decision": "approve"}, headers=auth("alpha-ops"))
    assert done.status_code == 200, done.text
    assert done.json()["approval"]["decidedBy"] == "alpha-ops"


def test_a_waiting_conversation_shows_as_waiting_on_the_overview_and_conversations(
    rt, api, browser
) -> None:
    task = park(rt, api, "alpha")
    behind = {"deployment": "shop", "input": "still there?", "conversationKey": "k"}
    assert api.post("/v1/tasks", json=behind, headers=auth("alpha")).status_code == 202
    sign_in(browser, "boss")
    tenants = browser.get("/ui").text.split('<h2 id="tenants">')[1]
    alpha = tenants.split('<th scope="row">alpha</th>')[1].split("</tr>")[0]
    cells = re.findall(r'<td class="num[^"]*"[^>]*>([^<]*)</td>', alpha)
    assert cells[:6] == ["1", "0", "0", "1", "1", "\u2013"]  # … queued, waiting, oldest due: none
    listed = browser.get("/ui/conversations").text
    row = listed.split(f'href="/ui/conversations/{task.conversation_id}"')[0].rsplit("<tr", 1)[1]
    assert '<span class="badge waiting">waiting</span>' in row and "stuck" not in row
    assert "badge waiting" in browser.get("/ui/conversations?state=waiting").text
