"""The operator UI in a real browser: Playwright drives Debian's Chromium (headless) against
`fleet serve` (embedded: it runs the tasks it admits). Screenshots go to artifacts/ui/.

Chromium missing: the tests skip locally and fail under CI=true (`.ci/run` installs it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import AGENTS, DEPLOYMENTS, need, write_config
from tests.support.fleet import Proc, wait_for

# timing-bound: `make test` runs it alone
pytestmark = [pytest.mark.timeout(240), pytest.mark.serial]

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "ui"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
OPERATOR, APP = "operator-key-0123456789abcdef", "app-key-0123456789abcdef"
WIDTHS = {"desktop": 1280, "phone": 390}
#: ``/tool count {}`` waits for a person's approval.
SHOP_AGENT = """
    model = "echo"
    tools = ["wait", { tool = "tests.support.shop_tools:count", approval = "required" }]
"""
#: The echo model writing its reply a word every 80 ms: fifty words, about 4 s a reply.
STREAMER = '[model]\nprovider = "echo"\nstream_ms = 80\n'
WORDS = " ".join(f"w{i}" for i in range(50))


def chromium() -> str:
    path = os.environ.get("FLEET_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        need("Chromium", f"no browser at {path} (apt-get install -y chromium)")
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("ui")
    config = write_config(
        tmp / "config",
        {**AGENTS, "shop": SHOP_AGENT, "streamer": STREAMER},
        {**DEPLOYMENTS, "shop": 'agent = "shop"\n', "talk": 'agent = "streamer"\n'},
    )
    (config / "callers").mkdir()
    for name, key, extra in (
        ("ops", OPERATOR, 'operator = true\ntenants = ["*"]\n'),
        ("app", APP, ""),
    ):
        digest = hashlib.sha256(key.encode()).hexdigest()
        (config / "callers" / f"{name}.toml").write_text(
            f'source = "api"\nkey_sha256 = "{digest}"\n{extra}'
        )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(
        FLEET_CONFIG_DIR=str(config),
        FLEET_HOME=str(tmp / "home"),
        FLEET_TEST_COUNTER=str(tmp / "side-effects.txt"),
    )
    argv = [sys.executable, "-m", "fleet.cli", "serve", "--port", str(port)]
    server = Proc("api", [*argv, "--loglevel", "warning"], env, tmp / "api.log")
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if server.popen.poll() is not None:
            raise AssertionError(f"fleet serve exited:\n{server.log()[-3000:]}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, interval=0.1, what="fleet serve to answer")
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def api(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {APP}"}) as c:
        yield c


def page_at(browser: Any, base: str, width: int = WIDTHS["desktop"]) -> Any:
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=base)
    context.set_default_timeout(20_000)
    return context.new_page()


def sign_in(page: Any) -> None:
    first = page.goto("/ui")
    assert first.status == 401
    page.get_by_label("Operator key").fill(OPERATOR)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Overview").wait_for()


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def fits(page: Any) -> bool:
    """Nothing wider than the window: wide tables scroll inside their own box."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def submit(api: httpx.Client, deployment: str, text: str, key: str) -> dict[str, Any]:
    r = api.post(
        "/v1/tasks", json={"deployment": deployment, "input": text, "conversationKey": key}
    )
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


def steps_stored(api: httpx.Client, task_id: str) -> int:
    runs = api.get(f"/v1/tasks/{task_id}/runs").json()["runs"]
    if not runs:
        return 0
    return len(api.get(f"/v1/runs/{runs[-1]['id']}").json()["steps"])


def first_run(api: httpx.Client, task_id: str) -> str:
    runs: list[dict[str, Any]] = wait_for(
        lambda: api.get(f"/v1/tasks/{task_id}/runs").json()["runs"], 30, what="the task's run"
    )
    return str(runs[0]["id"])


def writing_caught(page: Any, api: httpx.Client, item: str, task_id: str, reply: str) -> None:
    """The *writing…* element ``item`` holds a part of ``reply`` while the task runs, then
    grows: the page shows the step's text as the model writes it."""
    text = f"{item} .text"
    page.locator(text).filter(has_text="w1").wait_for()
    label, shown = page.locator(item).evaluate(
        "el => [el.textContent, el.querySelector('.text').textContent]"
    )
    assert api.get(f"/v1/tasks/{task_id}").json()["status"] == "running"
    assert reply.startswith(shown) and len(shown) < len(reply), shown
    assert "writing\u2026" in label
    page.wait_for_function(
        "([text, n]) => (document.querySelector(text)?.textContent.length ?? 0) > n",
        arg=[text, len(shown)],
    )


def seen_to_succeed(page: Any) -> None:
    """The page heard its task's ``end`` event (it announces it)."""
    announced = page.locator("#announce").filter(has_text="Task finished: succeeded")
    announced.wait_for(state="attached")


def reply_once(page: Any, reply: str) -> None:
    """Once the page has seen the task end: no growing text, and the reply shown once."""
    seen_to_succeed(page)
    page.wait_for_function(
        "reply => !document.querySelector('[data-writing]')"
        " && document.body.innerText.split(reply).length === 2",
        arg=reply,
    )


def test_sign_in_then_the_overview_at_both_widths(browser: Any, base: str) -> None:
    page = page_at(browser, base)
    wrong = page.goto("/ui/login")
    assert wrong is not None and wrong.status == 200
    page.get_by_label("Operator key").fill(APP)  # a key, but not an operator's
    page.get_by_role("button", name="Sign in").click()
    assert "is not an operator" in page.get_by_role("alert").inner_text()
    sign_in(page)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    table = page.get_by_role("table")
    assert table.get_by_role("rowheader", name="tooly").is_visible()
    shoot(page, "overview-1280")
    phone = page_at(browser, base, WIDTHS["phone"])
    sign_in(phone)
    assert fits(phone)
    shoot(phone, "overview-390")


def test_a_running_conversation_shows_steps_live_and_a_queued_task_is_cancelled(
    browser: Any, base: str, api: httpx.Client
) -> None:
    running = submit(api, "tooly", '/tool current_time {}\n/tool wait {"seconds": 8}', "live-1")
    queued = submit(api, "tooly", "after the wait", "live-1")
    wait_for(lambda: steps_stored(api, running["id"]) >= 2, 30, what="the run's first steps")

    page = page_at(browser, base)
    sign_in(page)
    page.get_by_role("link", name="Conversations").click()
    row = page.get_by_role("row").filter(has_text="api:app:live-1")
    assert "running" in row.inner_text()
    row.get_by_role("link", name="api:app:live-1").click()
    page.get_by_role("heading", name="api:app:live-1").wait_for()
    steps = page.get_by_role("list", name="Steps of task #1")
    steps.get_by_text("step 2: tool current_time").wait_for()

    # cancel the queued task #2: a dialog asks first
    page.get_by_role("button", name="Cancel task #2").click()
    dialog = page.get_by_role("dialog")
    assert "Cancel task #2 (queued)?" in dialog.inner_text()
    dialog.get_by_role("button", name="Confirm").click()
    page.get_by_role("heading", name="api:app:live-1").wait_for()
    status = page.locator(f'[data-status-of="{queued["id"]}"]')
    status.filter(has_text="cancelled").wait_for()
    assert api.get(f"/v1/tasks/{queued['id']}").json()["status"] == "cancelled"

    # the wait tool's step appears without a reload (a marker set now survives)
    page.evaluate("window.fleetMarker = 'same page'")
    assert steps_stored(api, running["id"]) == 2, "the wait is still going on"
    page.get_by_role("list", name="Steps of task #1").get_by_text("step 3: tool wait").wait_for()
    assert page.evaluate("window.fleetMarker") == "same page"
    shoot(page, "conversation-live-1280")
    # when the task ends the page updates its sections: the reply is in the transcript
    page.get_by_role("region", name="Transcript").get_by_text("echo: /tool current_time").wait_for()
    assert page.evaluate("window.fleetMarker") == "same page"


def test_the_run_page_shows_provenance_and_the_timeline(
    browser: Any, base: str, api: httpx.Client
) -> None:
    first = submit(api, "tooly", "Where is order 1234?", "run-1")
    wait_for(lambda: api.get(f"/v1/tasks/{first['id']}?wait=5").json()["status"] == "succeeded", 30)
    task = submit(api, "tooly", '/tool current_time {}\n/tool wait {"seconds": 0.2}', "run-1")
    done = api.get(f"/v1/tasks/{task['id']}?wait=30").json()
    assert done["status"] == "succeeded", done
    (run,) = api.get(f"/v1/tasks/{task['id']}/runs").json()["runs"]

    for width in WIDTHS.values():
        page = page_at(browser, base, width)
        sign_in(page)
        page.goto(f"/ui/runs/{run['id']}")
        page.get_by_role("heading", name="Context provenance").wait_for()
        rows = page.locator("#step-rows tr")
        assert rows.count() == 4
        assert "current_time" in rows.nth(1).inner_text()
        injected = page.get_by_role("heading", name="Injected").locator("xpath=..")
        assert "Where is order 1234?" in injected.inner_text()
        assert fits(page)
        shoot(page, f"run-{width}")


def test_reset_conversation_asks_first_then_starts_a_new_generation(
    browser: Any, base: str, api: httpx.Client
) -> None:
    first = submit(api, "chat", "remember this", "reset-1")
    assert api.get(f"/v1/tasks/{first['id']}?wait=30").json()["status"] == "succeeded"
    page = page_at(browser, base)
    sign_in(page)
    page.goto("/ui/conversations?deployment=chat")
    page.get_by_role("link", name="api:app:reset-1").click()
    page.get_by_role("heading", name="api:app:reset-1").wait_for()
    page.get_by_role("button", name="Reset conversation").click()
    dialog = page.get_by_role("dialog")
    assert "Reset api:app:reset-1?" in dialog.inner_text()
    dialog.get_by_role("button", name="Confirm").click()
    page.locator("dl.facts").filter(has_text="Generation1").wait_for()
    after = submit(api, "chat", "anything before?", "reset-1")
    done = api.get(f"/v1/tasks/{after['id']}?wait=30").json()
    assert done["reply"] == "echo: anything before? [history: 0]"


def test_a_task_that_starts_waiting_shows_its_approval_buttons_without_a_reload(
    browser: Any, base: str, api: httpx.Client
) -> None:
    """The conversation page follows a running task that then stops to wait for an approval:
    its Approve / Reject buttons appear on the same page. Approve resumes it; another one is
    rejected, with a reason, from the Approvals page."""
    # (the wait outlasts signing in on a busy machine: the page sees the task running)
    asking = submit(api, "shop", '/tool wait {"seconds": 8}\n/tool count {}', "ask-1")
    wait_for(lambda: steps_stored(api, asking["id"]) >= 1, 30, what="the task's first step")
    page = page_at(browser, base)
    sign_in(page)
    page.goto(f"/ui/tasks/{asking['id']}")
    page.get_by_role("heading", name="api:app:ask-1").wait_for()
    assert api.get(f"/v1/tasks/{asking['id']}").json()["status"] == "running"
    page.evaluate("window.fleetMarker = 'same page'")
    live = page.get_by_role("region", name="Now: task #1")
    live.get_by_role("button", name="Approve count").wait_for()
    assert page.evaluate("window.fleetMarker") == "same page"
    live.locator(f'[data-status-of="{asking["id"]}"]').filter(has_text="waiting").wait_for()
    shoot(page, "approval-waiting-1280")
    live.get_by_role("button", name="Approve count").click()
    page.get_by_role("heading", name="api:app:ask-1").wait_for()
    done = api.get(f"/v1/tasks/{asking['id']}?wait=30").json()
    assert done["status"] == "succeeded", done

    third = submit(api, "shop", "/tool count {}", "ask-2")
    wait_for(
        lambda: api.get(f"/v1/tasks/{third['id']}").json()["status"] == "waiting",
        30,
        what="the third task to wait",
    )
    page.get_by_role("link", name="Approvals").click()
    page.get_by_role("heading", name="Approvals").wait_for()
    row = page.get_by_role("row").filter(has_text="api:app:ask-2")
    row.get_by_label("Reason for rejecting count").fill("not today")
    row.get_by_role("button", name="Reject count").click()
    page.get_by_text("No approvals are waiting for a decision.").wait_for()
    done = api.get(f"/v1/tasks/{third['id']}?wait=30").json()
    assert done["status"] == "succeeded", done  # the run went on, told "not run"
    phone = page_at(browser, base, WIDTHS["phone"])
    sign_in(phone)
    phone.goto("/ui/approvals")
    assert fits(phone)


def test_a_model_step_shows_its_text_growing_while_it_runs(
    browser: Any, base: str, api: httpx.Client
) -> None:
    """Token streaming: the run page shows the model's text growing in a "writing…" row of its
    timeline before the task ends; the step's own row then stands for it (the reply once, no
    growing text left). The conversation page shows it in its live steps the same way."""
    reply = f"echo: {WORDS} [history: 0]"
    assert len(reply) < 400, "the step row shows it whole"
    page = page_at(browser, base)
    sign_in(page)

    task = submit(api, "talk", WORDS, "stream-1")
    run_id = first_run(api, task["id"])
    page.goto(f"/ui/runs/{run_id}")
    writing_caught(page, api, "#step-rows tr.writing", task["id"], reply)
    assert api.get(f"/v1/tasks/{task['id']}?wait=30").json()["reply"] == reply
    reply_once(page, reply)
    rows = page.locator("#step-rows tr")
    assert rows.count() == 1 and reply in rows.inner_text()

    task = submit(api, "talk", WORDS, "stream-2")
    first_run(api, task["id"])
    page.goto(f"/ui/tasks/{task['id']}")
    page.get_by_role("heading", name="api:app:stream-2").wait_for()
    writing_caught(page, api, "#live-steps li.writing", task["id"], reply)
    assert api.get(f"/v1/tasks/{task['id']}?wait=30").json()["reply"] == reply
    seen_to_succeed(page)
    steps = page.get_by_role("list", name="Steps of task #1")
    steps.get_by_text("reply: " + reply).wait_for()
    assert steps.locator("[data-writing]").count() == 0
    assert steps.get_by_text("step 1: model").count() == 1
