"""The SSE response of task event streams, driven as an ASGI app: keep-alive comments on a quiet
stream, and a stream that ends (freeing its follower) when the client goes away, when the server
shuts down or at its limit."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from fleet.api.event_hub import EventHub
from fleet.api.event_stream import BEAT_STEPS, _next_beat
from fleet.api.events import EventStream
from tests.support.asgi import StreamClient

TASK = uuid.UUID(int=7)


class QuietStore:
    """A queued task that never changes."""

    def __init__(self) -> None:
        self.reads = 0

    def event_marks(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
        return {t: ("queued", 0, 0, 0) for t in ids}

    def task_events(self, task_id: uuid.UUID, after: Any) -> tuple[Any, list[Any]]:
        self.reads += 1
        return SimpleNamespace(status=SimpleNamespace(terminal=False)), []


async def _serve(
    hub: EventHub, *, max_s: float = 30.0, beat_s: float = 15.0, gone: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """Run one stream to its end; the client disconnects once ``gone`` is set."""
    client = StreamClient(gone)
    scope = {"type": "http", "method": "GET"}
    await EventStream(hub, TASK, None, max_s, beat_s)(scope, client.receive, client.send)
    return client.sent


def _body(sent: list[dict[str, Any]]) -> str:
    return b"".join(m.get("body", b"") for m in sent[1:]).decode()


def test_a_quiet_stream_sends_keep_alives_and_ends_at_its_limit() -> None:
    store = QuietStore()
    hub = EventHub(store, min_s=0.01, max_s=0.02)  # type: ignore[arg-type]

    async def go() -> list[dict[str, Any]]:
        async with asyncio.timeout(10):
            sent = await _serve(hub, max_s=0.4, beat_s=0.05)
            assert hub.followers == 0 and hub.watched == 0
            await hub.close()
            return sent

    sent = asyncio.run(go())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert dict(sent[0]["headers"])[b"content-type"].startswith(b"text/event-stream")
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    body = _body(sent)
    assert body.startswith(f": task {TASK}\nretry: 1000\n\n")
    assert 2 <= body.count(": ping\n\n") <= 18  # every 0.023-0.05 s for 0.4 s
    # its first read, and one after the hub's first poll (which reports every task once)
    assert store.reads == 2, "the hub's later polls found nothing new: no reads"


def test_a_client_that_goes_away_ends_its_stream() -> None:
    hub = EventHub(QuietStore(), min_s=0.01, max_s=0.02)  # type: ignore[arg-type]

    async def go() -> None:
        async with asyncio.timeout(10):
            gone = asyncio.Event()
            stream = asyncio.create_task(_serve(hub, gone=gone))
            while hub.followers == 0:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            assert not stream.done()
            gone.set()
            sent = await stream
            assert sent[-1]["more_body"] is False
            assert hub.followers == 0 and hub.watched == 0
            await hub.close()

    asyncio.run(go())


def test_streams_end_when_the_server_shuts_down() -> None:
    exiting = False
    hub = EventHub(QuietStore(), min_s=0.01, max_s=0.02, exiting=lambda: exiting)  # type: ignore[arg-type]

    async def go() -> None:
        nonlocal exiting
        async with asyncio.timeout(10):
            streams = [asyncio.create_task(_serve(hub)) for _ in range(3)]
            while hub.followers < 3:
                await asyncio.sleep(0.01)
            exiting = True
            for sent in await asyncio.gather(*streams):
                assert sent[-1]["more_body"] is False
            assert hub.followers == 0
            late = await _serve(hub)  # one opened now ends at once
            assert late[-1]["more_body"] is False
            await hub.close()

    asyncio.run(go())


def test_head_answers_the_headers_only() -> None:
    hub = EventHub(QuietStore())  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        raise AssertionError("not read")

    scope = {"type": "http", "method": "HEAD"}
    asyncio.run(EventStream(hub, TASK, None, 30.0, 15.0)(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["body"] == b"" and hub.followers == 0


@pytest.mark.parametrize("beat_s", [15.0, 60.0, 0.05])
@pytest.mark.parametrize("now", [0.0, 1234.567, 98765.4321])
def test_keep_alives_fall_due_on_a_shared_grid_within_the_interval(
    beat_s: float, now: float
) -> None:
    step = beat_s / BEAT_STEPS
    dues = [_next_beat(now, beat_s) for _ in range(500)]
    for due in dues:
        assert now + beat_s / 2 - step < due <= now + beat_s, (now, due)
        assert abs(due / step - round(due / step)) < 1e-6, "on the grid"
    # spread over the interval's second half (streams opened together do not write together),
    # yet on few distinct instants: many streams share each of the loop's wake-ups
    assert BEAT_STEPS // 2 - 2 <= len(set(dues)) <= BEAT_STEPS // 2 + 1


def test_idle_streams_share_their_keep_alive_timers() -> None:
    """200 idle streams wait for ~16 instants of the keep-alive grid: that many timer handles
    on the loop, not one a stream; each stream still gets its keep-alive."""
    hub = EventHub(QuietStore(), min_s=0.01, max_s=0.02)  # type: ignore[arg-type]

    async def go() -> None:
        async with asyncio.timeout(20):
            gone = asyncio.Event()
            streams = [
                asyncio.create_task(_serve(hub, gone=gone, beat_s=1.0, max_s=60.0))
                for _ in range(200)
            ]
            while hub.alarms.waiting < 200:  # every stream read once, waits for its keep-alive
                await asyncio.sleep(0.01)
            # at most one instant a grid step, however long a busy machine took to open them
            assert 1 <= len(hub.alarms) <= BEAT_STEPS
            # the loop's own heap (CPython's asyncio): the instants, the hub's, the test's
            scheduled = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
            assert len([h for h in scheduled if not h.cancelled()]) < 40
            await asyncio.sleep(1.1)  # past every stream's first keep-alive
            gone.set()
            for sent in await asyncio.gather(*streams):
                assert ": ping\n\n" in _body(sent)
            assert len(hub.alarms) == 0 and hub.followers == 0
            await hub.close()

    asyncio.run(go())
