"""The Python SDK in embedded mode: one Conversation object is one conversation (issue 12)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import fleet
from fleet import Fleet, TaskFailed
from fleet.domain.values import TaskStatus
from fleet.errors import FleetError, Forbidden, InputError
from tests.conftest import write_config
from tests.support.fleet import wait_for
from tests.support.readme import run_sdk_example, sdk_example

AGENTS = {
    "echo": 'model = "echo"\n',
    "slow": '[model]\nprovider = "echo"\ndelay_ms = 300\n',
    "tools": 'model = "echo"\ntools = ["wait", "current_time"]\nmax_steps = 4\n',
    "streamer": '[model]\nprovider = "echo"\nstream_ms = 30\n',
}
DEPLOYMENTS = {
    "talk": 'agent = "streamer"\n',
    "chat": 'agent = "echo"\n',
    "slow": 'agent = "slow"\n',
    "tooly": 'agent = "tools"\n',
    "burst": 'agent = "echo"\n[conversations]\nqueue_mode = "collect"\ndebounce = "10s"\n',
    "solo": 'agent = "echo"\nkind = "singleton"\n',
}
WAIT_20S = '/tool wait {"seconds": 20}'


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def sdk(tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    for name in ("FLEET_REDIS_URL", "FLEET_SERVER", "FLEET_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with Fleet(home=tmp_path / "home", config_dir=config) as f:
        yield f


def running(handle: fleet.TaskHandle) -> bool:
    return handle.info().status == TaskStatus.RUNNING


def test_the_readme_example_runs_embedded(tmp_path: Path) -> None:
    _, expected = sdk_example()
    assert run_sdk_example(tmp_path) == expected


def test_the_public_surface() -> None:
    for name in ("Fleet", "Conversation", "TaskHandle", "TaskFailed"):
        assert name in fleet.__all__ and hasattr(fleet, name)
    assert (Path(fleet.__file__).parent / "py.typed").exists()


def test_a_conversation_is_continued_and_resumed_by_key(
    tmp_path: Path, config: Path, sdk: Fleet
) -> None:
    assert sdk.mode == "embedded"
    conv = sdk.conversation("chat", key="ticket-4711")
    assert conv.run("one") == "echo: one [history: 0]"
    assert conv.run("two") == "echo: two [history: 2]"
    assert conv.key == "api:ticket-4711"
    sdk.close()
    with Fleet(home=tmp_path / "home", config_dir=config) as again:
        resumed = again.conversation("chat", key="api:ticket-4711")
        assert resumed.run("three") == "echo: three [history: 4]"
        assert [m.content for m in resumed.messages()] == [
            "one",
            "echo: one [history: 0]",
            "two",
            "echo: two [history: 2]",
            "three",
            "echo: three [history: 4]",
        ]


def test_a_keyless_conversation_keeps_the_key_its_first_run_got(sdk: Fleet) -> None:
    conv = sdk.conversation("chat")
    assert conv.key is None and conv.messages() == []
    assert conv.run("first") == "echo: first [history: 0]"
    key = conv.key
    assert key is not None and key.startswith("api:")
    assert conv.run("second") == "echo: second [history: 2]"
    assert conv.key == key
    assert sdk.conversation("chat", key=key).run("third") == "echo: third [history: 4]"


def test_a_keyless_conversations_first_submissions_from_threads_join_one_conversation(
    sdk: Fleet,
) -> None:
    conv = sdk.conversation("chat")
    handles: list[fleet.TaskHandle] = []
    threads = [
        threading.Thread(target=lambda i=i: handles.append(conv.submit(f"m{i}"))) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len({h.conversation for h in handles}) == 1
    assert sorted(h.seq for h in handles) == [1, 2, 3, 4, 5, 6]
    for h in handles:
        h.wait(30)


def test_submit_returns_a_handle_to_wait_on_and_read(sdk: Fleet) -> None:
    conv = sdk.conversation("chat", key="k")
    handle = conv.submit("hi", labels={"team": "support"})
    assert (handle.conversation, handle.seq, handle.duplicate) == ("api:k", 1, False)
    assert handle.wait(30) == "echo: hi [history: 0]"
    info = handle.info()
    assert info.status == TaskStatus.SUCCEEDED and info.labels == {"team": "support"}
    assert info.started_at is not None and info.finished_at is not None
    assert [(m.role, m.content) for m in handle.messages()] == [
        ("user", "hi"),
        ("assistant", "echo: hi [history: 0]"),
    ]
    assert sdk.task(handle.id).wait(1) == "echo: hi [history: 0]"


def test_a_conversations_resource_goes_with_each_submission(sdk: Fleet) -> None:
    from fleet.sdk.backends import StoreBackend

    conv = sdk.conversation("chat", key="r", resource="user-42")
    handle = conv.submit("hi")
    assert "resource='user-42'" in repr(conv)
    backend = sdk._backend
    assert isinstance(backend, StoreBackend)
    assert backend.rt.store.get_task(uuid.UUID(handle.id)).resource_id == "user-42"
    handle.wait(30)


def test_an_idempotency_key_returns_the_first_task(sdk: Fleet) -> None:
    conv = sdk.conversation("chat", key="k")
    first = conv.submit("once", idempotency_key="order-1")
    again = conv.submit("once", idempotency_key="order-1")
    assert again.duplicate and again.id == first.id
    assert conv.run("after") == "echo: after [history: 2]"


def test_delivery_chooses_the_queue_mode_of_one_submission(sdk: Fleet) -> None:
    conv = sdk.conversation("tooly", key="busy")
    first = conv.submit(WAIT_20S)
    wait_for(lambda: running(first), 20, what="the first task to run")
    steered = conv.submit("also this", delivery="steer")
    assert steered.delivered_to == "run" and steered.id == first.id
    # on a busy machine the run (its wait ended by the steered message) may end before the
    # cancel arrives
    said = first.cancel()
    assert said in ("requested", "finished"), said
    if said == "requested":
        with pytest.raises(TaskFailed):
            first.wait(20)


def test_collect_answers_with_the_task_it_merged_into(sdk: Fleet) -> None:
    conv = sdk.conversation("burst", key="b")
    first = conv.submit("a")
    merged = conv.submit("b")
    assert merged.merged and merged.id == first.id
    assert first.cancel() == "cancelled"


def test_run_raises_task_failed_with_the_task_and_its_error(sdk: Fleet) -> None:
    conv = sdk.conversation("tooly", key="loop")
    with pytest.raises(TaskFailed) as caught:
        conv.run("/loop current_time {}")
    exc = caught.value
    assert exc.task.status == TaskStatus.FAILED and exc.task_id == exc.task.id
    assert exc.error is not None and "step limit" in exc.error
    assert str(exc).startswith(f"task {exc.task_id} failed: ")
    assert isinstance(exc, FleetError)


def test_a_cancelled_task_raises_task_failed(sdk: Fleet) -> None:
    conv = sdk.conversation("tooly", key="c")
    running_one = conv.submit(WAIT_20S)
    queued = conv.submit("next")
    assert queued.cancel() == "cancelled"
    with pytest.raises(TaskFailed) as caught:
        queued.wait(5)
    assert caught.value.task.status == TaskStatus.CANCELLED
    wait_for(lambda: running(running_one), 20, what="the first task to run")
    assert running_one.cancel() == "requested"
    with pytest.raises(TaskFailed):
        running_one.wait(20)
    assert running_one.cancel() == "finished"


def test_a_wait_that_times_out_leaves_the_task_going(sdk: Fleet) -> None:
    handle = sdk.conversation("tooly", key="t").submit(WAIT_20S)
    with pytest.raises(TimeoutError, match="wait again, or cancel it"):
        handle.wait(0.2)
    assert not handle.info().status.terminal
    handle.cancel()


def test_arun_lets_the_event_loop_go_on_while_a_task_runs(sdk: Fleet) -> None:
    """A coroutine cancels the task arun waits for: that only works if arun yields the loop
    (blocking, it would see the 20 s tool finish first and the cancel would come too late)."""
    conv = sdk.conversation("tooly", key="async")

    async def cancel_when_running() -> str:
        handle = await conv.asubmit(WAIT_20S, idempotency_key="once")  # arun's task
        while not await asyncio.to_thread(running, handle):
            await asyncio.sleep(0.02)
        return handle.cancel()

    async def main() -> tuple[BaseException | str, str]:
        ran, cancelled = await asyncio.gather(
            conv.arun(WAIT_20S, idempotency_key="once"),
            cancel_when_running(),
            return_exceptions=True,
        )
        assert isinstance(cancelled, str)
        return ran, cancelled

    ran, cancelled = asyncio.run(asyncio.wait_for(main(), 15))
    assert cancelled == "requested"
    assert isinstance(ran, TaskFailed) and ran.task.status == TaskStatus.CANCELLED


def test_a_handle_is_awaitable(sdk: Fleet) -> None:
    async def main() -> str:
        handle = await sdk.conversation("chat", key="aw").asubmit("hey")
        return await handle

    assert asyncio.run(main()) == "echo: hey [history: 0]"


def test_two_conversations_run_at_once_through_the_sdk(
    tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    monkeypatch.delenv("FLEET_SERVER", raising=False)
    with Fleet(home=tmp_path / "home", config_dir=config, concurrency=2) as sdk:
        a, b = sdk.conversation("slow", key="a"), sdk.conversation("slow", key="b")
        handles = [a.submit("a1"), b.submit("b1"), a.submit("a2"), b.submit("b2")]
        for h in handles:
            h.wait(30)
        infos = [h.info() for h in handles]
    a1, b1, a2, b2 = ((i.started_at, i.finished_at) for i in infos)
    assert a1[1] <= a2[0] and b1[1] <= b2[0]  # type: ignore[operator]
    assert any(
        x[0] < y[1] and y[0] < x[1]  # type: ignore[operator]
        for x in (a1, a2)
        for y in (b1, b2)
    )


def test_a_singleton_has_one_conversation(sdk: Fleet) -> None:
    one = sdk.conversation("solo")
    assert one.run("x") == "echo: x [history: 0]"
    assert one.key == "deployment:singleton"
    assert sdk.conversation("solo", key="anything").run("y") == "echo: y [history: 2]"


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda f: f.conversation("nope"), InputError, "no deployment named 'nope'"),
        (lambda f: f.conversation("chat", key="k").run("x", delivery="loud"), InputError, "loud"),
        (lambda f: f.conversation("chat", key="webhook:gh:k").run("x"), Forbidden, "scope"),
        (lambda f: f.task("not-an-id"), InputError, "not a UUID"),
        (lambda f: f.conversation("chat", resource="a\x00b").run("x"), InputError, "resource"),
        (lambda f: f.conversation("chat", key="k").run("x", labels={"": "v"}), InputError, "label"),
        # an empty key is not "no key" (that would start a new conversation every time)
        (lambda f: f.conversation("chat", key=""), InputError, "conversation key '' is empty"),
        (lambda f: f.conversation("chat", key="  "), InputError, "conversation key '  ' is blank"),
    ],
)
def test_bad_input_raises_a_clear_fleet_error(
    sdk: Fleet, call: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        call(sdk)  # type: ignore[operator]


def test_bad_settings_and_a_closed_fleet_are_refused(
    tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    with pytest.raises(InputError, match="concurrency must be 1 to 32"):
        Fleet(home=tmp_path / "home", config_dir=config, concurrency=0)
    with pytest.raises(InputError, match="concurrency is for embedded mode"):
        Fleet("http://127.0.0.1:1", concurrency=2)
    with pytest.raises(InputError, match="not an http"):
        Fleet("ftp://example.com")
    f = Fleet(home=tmp_path / "home", config_dir=config)
    f.close()
    f.close()  # a second close is harmless
    with pytest.raises(FleetError, match="closed"):
        f.conversation("chat")


def test_close_stops_the_threads(tmp_path: Path, config: Path) -> None:
    with Fleet(home=tmp_path / "home", config_dir=config) as f:
        f.conversation("chat", key="k").run("x")
        assert any(t.name.startswith("fleet-drain-") for t in threading.enumerate())
    assert not any(t.name.startswith("fleet-drain-") for t in threading.enumerate())


def test_a_handle_streams_the_text_as_it_is_written(sdk: Fleet) -> None:
    """Embedded: the text comes from this process's runs, sync and async; what the chunks join
    to is the reply."""
    words = " ".join(f"w{i}" for i in range(12))
    handle = sdk.conversation("talk").submit(words)
    chunks = list(handle.stream(timeout=30))
    assert len(chunks) > 5 and "".join(str(c) for c in chunks) == handle.wait(5)
    assert {(c.attempt, c.step) for c in chunks} == {(1, 1)}

    async def go() -> tuple[list[str], str]:
        later = await sdk.conversation("talk").asubmit(words)
        return [c.text async for c in later.astream(timeout=30)], await later

    texts, reply = asyncio.run(go())
    assert len(texts) > 5 and "".join(texts) == reply
