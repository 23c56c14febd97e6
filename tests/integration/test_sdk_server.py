"""The Python SDK against a real `fleet serve` (embedded, and in a fleet) and in fleet mode."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet import Fleet, TaskFailed
from fleet.domain.values import TaskStatus
from fleet.errors import Forbidden, InputError
from tests.conftest import write_config
from tests.support.fleet import Proc, running_fleet, wait_for
from tests.support.readme import ROOT, run_sdk_example, sdk_example

pytestmark = [pytest.mark.timeout(240)]

WAIT_20S = '/tool wait {"seconds": 20}'


def test_the_readme_example_runs_against_an_embedded_fleet_serve(tmp_path: Path) -> None:
    _, expected = sdk_example()
    with running_fleet(
        tmp_path,
        database_url=f"sqlite:///{tmp_path / 'serve.db'}",
        redis_url="",  # embedded: the server runs the tasks on its own threads
        config_dir=ROOT / "config",
    ) as served:
        url = served.serve()
        assert run_sdk_example(tmp_path, FLEET_SERVER=url) == expected


@pytest.mark.fleet
def test_the_readme_example_runs_against_a_fleet_serve(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    _, expected = sdk_example()
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=ROOT / "config"
    ) as fleet:
        fleet.worker("w1", concurrency=2)
        url = fleet.serve()
        assert run_sdk_example(tmp_path, FLEET_SERVER=url) == expected


@pytest.mark.fleet
def test_the_readme_example_runs_in_fleet_mode(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    """With FLEET_REDIS_URL, Fleet() admits into the fleet's store and a worker runs the tasks."""
    _, expected = sdk_example()
    with running_fleet(
        tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=ROOT / "config"
    ) as fleet:
        fleet.worker("w1", concurrency=2)
        out = run_sdk_example(tmp_path, FLEET_REDIS_URL=redis_url, FLEET_DATABASE_URL=pg_url)
        assert out == expected


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    config = write_config(
        tmp_path / "config",
        {
            "echo": 'model = "echo"\n',
            "tools": 'model = "echo"\ntools = ["wait", "current_time"]\nmax_steps = 4\n',
            "streamer": '[model]\nprovider = "echo"\nstream_ms = 40\n',
        },
        {"chat": 'agent = "echo"\n', "tooly": 'agent = "tools"\n', "talk": 'agent = "streamer"\n'},
    )
    with running_fleet(
        tmp_path,
        database_url=f"sqlite:///{tmp_path / 'serve.db'}",
        redis_url="",
        config_dir=config,
    ) as served:
        yield served.serve()
        served.kill()  # the test is over: no graceful stop to wait for


def test_server_mode_runs_resumes_and_reads(server: str) -> None:
    with Fleet(server=server) as sdk:
        assert sdk.mode == "server"
        conv = sdk.conversation("chat")
        assert conv.messages() == []
        assert conv.run("one", labels={"via": "sdk"}) == "echo: one [history: 0]"
        assert conv.key is not None and conv.key.startswith("api:")
        handle = sdk.conversation("chat", key=conv.key).submit("two", idempotency_key="i-2")
        assert conv.submit("two", idempotency_key="i-2").duplicate
        assert handle.wait(30) == "echo: two [history: 2]"
        assert handle.info().labels == {}
        assert [m.content for m in handle.messages()] == ["two", "echo: two [history: 2]"]
        assert len(conv.messages()) == 4
        assert sdk.task(handle.id).wait(1) == "echo: two [history: 2]"


def test_server_mode_raises_the_errors_the_store_would(server: str) -> None:
    with Fleet(server=server) as sdk:
        with pytest.raises(InputError, match="no deployment named 'nope'"):
            sdk.conversation("nope").run("x")
        with pytest.raises(InputError, match="delivery"):
            sdk.conversation("chat", key="k").run("x", delivery="loud")
        with pytest.raises(Forbidden, match="scope"):
            sdk.conversation("chat", key="webhook:gh:k").run("x")
        with pytest.raises(InputError, match="resource"):
            sdk.conversation("chat", resource="a\x00b").run("x")
        with pytest.raises(TaskFailed) as caught:
            sdk.conversation("tooly", key="loop").run("/loop current_time {}")
        assert caught.value.task.status == TaskStatus.FAILED
        assert caught.value.error is not None and "step limit" in caught.value.error


def test_server_mode_cancels_and_awaits_without_blocking(server: str) -> None:
    with Fleet(server=server) as sdk:
        conv = sdk.conversation("tooly", key="async")

        async def cancel_when_running() -> str:
            handle = await conv.asubmit(WAIT_20S, idempotency_key="once")  # arun's task
            while (await asyncio.to_thread(handle.info)).status != TaskStatus.RUNNING:
                await asyncio.sleep(0.05)
            return handle.cancel()

        async def main() -> list[object]:
            return await asyncio.gather(
                conv.arun(WAIT_20S, idempotency_key="once"),
                cancel_when_running(),
                return_exceptions=True,
            )

        ran, cancelled = asyncio.run(asyncio.wait_for(main(), 30))
        assert cancelled == "requested"
        assert isinstance(ran, TaskFailed) and ran.task.status == TaskStatus.CANCELLED
        slow = conv.submit(WAIT_20S)
        with pytest.raises(TimeoutError):
            slow.wait(0.5)
        wait_for(lambda: slow.info().status == TaskStatus.RUNNING, 20, what="the task to run")
        assert slow.cancel() == "requested"
        with pytest.raises(TaskFailed):
            slow.wait(20)


def test_embedded_serve_runs_conversations_at_once_each_in_order(tmp_path: Path) -> None:
    """`fleet serve --concurrency 2` without Redis: two keys' slow runs overlap, each in order."""
    config = write_config(
        tmp_path / "config",
        {"slow": '[model]\nprovider = "echo"\ndelay_ms = 400\n'},
        {"slow": 'agent = "slow"\n'},
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLEET_")},
        "FLEET_HOME": str(tmp_path / "home"),
        "FLEET_CONFIG_DIR": str(config),
    }
    argv = [sys.executable, "-m", "fleet.cli", "serve", "--port", str(port), "--concurrency", "2"]
    proc = Proc("api", argv, env, tmp_path / "api.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(proc, url), 30, what="fleet serve to answer")
        with Fleet(server=url) as sdk:
            a, b = sdk.conversation("slow", key="a"), sdk.conversation("slow", key="b")
            handles = [a.submit("a1"), b.submit("b1"), a.submit("a2"), b.submit("b2")]
            replies = [h.wait(30) for h in handles]
            infos = [h.info() for h in handles]
    finally:
        proc.stop()
    assert [r.split(" [")[1] for r in replies] == ["history: 0]"] * 2 + ["history: 2]"] * 2
    a1, b1, a2, b2 = ((i.started_at, i.finished_at) for i in infos)
    assert a1[1] <= a2[0] and b1[1] <= b2[0]  # type: ignore[operator]
    assert any(
        x[0] < y[1] and y[0] < x[1]  # type: ignore[operator]
        for x in (a1, a2)
        for y in (b1, b2)
    ), infos


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answers(proc: Proc, url: str) -> bool:
    if proc.popen.poll() is not None:
        raise AssertionError(f"fleet serve exited:\n{proc.log()[-3000:]}")
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_server_mode_streams_the_text_as_it_is_written(server: str) -> None:
    """Through an embedded ``fleet serve`` (SQLite, no Redis: the text buffered in its process),
    sync and async."""
    words = " ".join(f"w{i}" for i in range(12))
    with Fleet(server=server) as sdk:
        handle = sdk.conversation("talk").submit(words)
        chunks = list(handle.stream(timeout=30))
        assert len(chunks) > 5 and "".join(c.text for c in chunks) == handle.wait(5)
        assert {c.step for c in chunks} == {1} and not any(c.reset for c in chunks)

        async def go() -> tuple[list[str], str]:
            later = await sdk.conversation("talk").asubmit(words)
            return [c.text async for c in later.astream(timeout=30)], await later

        texts, reply = asyncio.run(go())
        assert len(texts) > 5 and "".join(texts) == reply
