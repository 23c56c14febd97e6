"""Change hints on real Redis: a hinted idle task is read at once (not at its next scheduled
read), hints lost with the subscription fall back to the short clock, a change nobody hints
(on the real PostgreSQL store) still reaches its follower by the next idle read, and a real
worker publishes a hint for each commit that gives its task an event."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from typing import Any

import pytest
import redis

from fleet.api.event_hub import POLL_IDLE_S, EventHub
from fleet.dispatch.hints import RedisHints, channel
from fleet.domain.redaction import Redactor
from fleet.store import Store
from tests.integration.test_events_fleet import fleet  # noqa: F401  (the fixture: one worker)
from tests.integration.test_store import T0, sub
from tests.support.fleet import Fleet

pytestmark = pytest.mark.timeout(120)

TASK = uuid.uuid4()


class FakeStore:
    """Marks the test sets; every read recorded."""

    def __init__(self) -> None:
        self.marks: dict[uuid.UUID, tuple[str, int, int, int]] = {TASK: ("queued", 0, 0, 0)}
        self.reads = 0

    def event_marks(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
        self.reads += 1
        return {t: self.marks[t] for t in ids if t in self.marks}


async def _until(condition: Any, what: str) -> None:
    """Until ``condition()`` (``what``: what is awaited; the test's timeout bounds it)."""
    while not condition():
        await asyncio.sleep(0.01)


def _backed_off(hub: EventHub, beyond: float) -> bool:
    """The task's reads are ``beyond`` seconds apart or more (past the no-hints cap)."""
    w = hub._watches.get(TASK)
    return bool(hub.hints and hub.hints.live and w is not None and w.interval >= beyond)


def test_a_hinted_idle_task_is_read_before_its_next_scheduled_read(redis_url: str) -> None:
    store = FakeStore()
    hub = EventHub(store, min_s=0.01, max_s=0.04, idle_s=3600, hints_url=redis_url)  # type: ignore[arg-type]
    hints = RedisHints(redis.Redis.from_url(redis_url))

    async def go() -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(60), hub.watch(TASK) as follower:
            follower.changed = False
            await follower.wait()  # the first read
            follower.changed = False
            # with hints live an idle task backs off far past max_s (0.04 s)
            await _until(lambda: _backed_off(hub, 1.28), "backed off")
            w = hub._watches[TASK]
            scheduled, reads = w.due, store.reads
            store.marks[TASK] = ("running", 1, 0, 0)
            hints.changed(TASK)
            await follower.wait()
            assert follower.changed, "the follower was told"
            assert loop.time() < scheduled, "by the hint, not by the scheduled read"
            assert store.reads == reads + 1
            assert hub.hints is not None and hub.hints.hints >= 1
        assert hub.watched == 0
        await hub.close()

    asyncio.run(go())


def _kill_subscriptions(client: redis.Redis, pid_name: str) -> int:
    killed = 0
    for c in client.client_list(_type="pubsub"):
        if c.get("name") == pid_name:
            killed += client.client_kill_filter(_id=c["id"])
    return killed


def test_hints_lost_with_the_subscription_fall_back_to_the_short_clock(redis_url: str) -> None:
    store = FakeStore()
    hub = EventHub(store, min_s=0.01, max_s=0.04, idle_s=3600, hints_url=redis_url)  # type: ignore[arg-type]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    hints = RedisHints(redis.Redis.from_url(redis_url))
    ups: list[bool] = []

    async def go() -> None:
        assert hub.hints is not None
        listener = hub.hints
        on_live = listener._on_live
        listener._on_live = lambda up: (ups.append(up), on_live(up))  # type: ignore[method-assign]
        async with asyncio.timeout(60), hub.watch(TASK) as follower:
            follower.changed = False
            await follower.wait()
            follower.changed = False
            await _until(lambda: _backed_off(hub, 0.64), "backed off")
            assert _kill_subscriptions(client, listener.name) == 1
            await _until(lambda: ups[-1:] == [False] or len(ups) > 2, "went down")
            assert ups[:2] == [True, False]
            # a change with no hint at all (sent in the gap): read on the short clock or by the
            # read of everything once the subscription is back
            store.marks[TASK] = ("running", 1, 0, 0)
            await follower.wait()
            assert follower.changed
            follower.changed = False
            await _until(lambda: _backed_off(hub, 0.64), "back and backed off again")
            assert ups[-1] is True, "subscribed again"
            w = hub._watches[TASK]
            scheduled = w.due
            store.marks[TASK] = ("running", 1, 1, 0)
            hints.changed(TASK)
            await follower.wait()
            assert asyncio.get_running_loop().time() < scheduled, "hints work again"
        await hub.close()

    asyncio.run(go())


class FreezableProxy:
    """A TCP proxy to Redis that can stop forwarding without closing anything: a half-open
    connection as a vanished host or a dead network path leaves it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.frozen = False
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                while self.frozen:  # hold it: nothing goes through, nothing is closed
                    await asyncio.sleep(0.01)
                dst.write(data)
                await dst.drain()

        await asyncio.gather(
            pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
        )

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()
        await self.server.wait_closed()


def test_a_subscription_that_stops_answering_counts_as_dropped(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.api import event_hints

    monkeypatch.setattr(event_hints, "PING_S", 0.1)
    monkeypatch.setattr(event_hints, "DEAD_S", 0.5)
    parsed = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs
    proxy = FreezableProxy(parsed.get("host", "127.0.0.1"), parsed.get("port", 6379))
    store = FakeStore()
    ups: list[bool] = []

    async def go() -> None:
        port = await proxy.start()
        url = f"redis://127.0.0.1:{port}/{parsed.get('db', 0)}"
        hub = EventHub(store, min_s=0.01, max_s=0.04, idle_s=3600, hints_url=url)  # type: ignore[arg-type]
        assert hub.hints is not None
        on_live = hub.hints._on_live
        hub.hints._on_live = lambda up: (ups.append(up), on_live(up))  # type: ignore[method-assign]
        async with asyncio.timeout(60), hub.watch(TASK):
            await _until(lambda: ups == [True], "subscribed")
            proxy.frozen = True  # no FIN, no RST: only silence
            await _until(lambda: ups == [True, False], "taken for dead")
            proxy.frozen = False
            await _until(lambda: ups == [True, False, True], "subscribed again")
        await hub.close()
        await proxy.close()

    asyncio.run(go())


#: serial: a health check has 1 s to answer here; with other test processes on the two cores
#: one took longer than 0.3 s, and the quiet was taken for dead.
@pytest.mark.serial
def test_a_quiet_spell_with_nothing_watched_is_not_taken_for_dead(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.api import event_hints

    monkeypatch.setattr(event_hints, "PING_S", 0.05)
    monkeypatch.setattr(event_hints, "DEAD_S", 1.0)
    hub = EventHub(FakeStore(), min_s=0.01, max_s=0.04, hints_url=redis_url)  # type: ignore[arg-type]
    ups: list[bool] = []

    async def go() -> None:
        listener = hub.hints
        assert listener is not None
        on_live = listener._on_live
        listener._on_live = lambda up: (ups.append(up), on_live(up))  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(30):
            async with hub.watch(TASK):
                await _until(lambda: ups == [True], "subscribed")
            await _until(lambda: not listener._subscribed, "nothing watched")
            await asyncio.sleep(3.2)  # the quiet itself: over three times DEAD_S, no channel
            again = loop.time()
            async with hub.watch(uuid.uuid4()):
                await _until(lambda: listener._last_heard > again, "subscribed again")
            assert ups == [True], "the same subscription carried on"
        await hub.close()

    asyncio.run(go())


def test_a_read_that_misses_a_hinted_commit_reads_again(redis_url: str) -> None:
    """A hint that comes while a read is under way (the read may predate the commit) puts the
    task back on the short clock rather than its backed-off one."""
    gate, entered = threading.Event(), threading.Event()

    class SlowStore(FakeStore):
        hold = False

        def event_marks(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
            marks = super().event_marks(ids)  # read before the commit below
            if self.hold:
                entered.set()
                gate.wait(30)
            return marks

    store = SlowStore()
    hub = EventHub(store, min_s=0.01, max_s=0.04, idle_s=3600, hints_url=redis_url)  # type: ignore[arg-type]

    async def go() -> None:
        async with asyncio.timeout(60), hub.watch(TASK) as follower:
            follower.changed = False
            await follower.wait()
            follower.changed = False
            await _until(lambda: _backed_off(hub, 0.32), "backed off")
            store.hold = True
            hub._hinted(TASK)  # a first hint: the read starts and is held after reading
            await asyncio.to_thread(entered.wait, 30)
            store.hold = False
            store.marks[TASK] = ("running", 1, 0, 0)  # committed after that read
            hub._hinted(TASK)  # ... and its hint comes during the read
            gate.set()
            await follower.wait()
            assert follower.changed, "read again and found the change"
            assert hub._watches[TASK].interval < 0.32, "on the short clock"
        await hub.close()

    asyncio.run(go())


def test_a_change_nobody_hints_reaches_its_follower_within_the_idle_interval(
    pg_url: str, redis_url: str
) -> None:
    """A lost hint's worst case, on the real store and Redis with the default clocks: the task
    is idle, its changes covered by hints (so read every 5-10 s only), and a change is committed
    with no hint (a writer that sends none; a process killed between its commit and its
    publish). The follower hears of it at the next idle read: within ``POLL_IDLE_S`` of the
    last read, never lost."""
    store = Store.open(pg_url, Redactor(()))
    task = store.admit(sub("x"), T0).task
    hub = EventHub(store, hints_url=redis_url)
    assert hub.idle_s == POLL_IDLE_S
    spy = redis.Redis.from_url(redis_url).pubsub()
    spy.subscribe(channel(task.id))  # to show that no hint went out

    def idle(w: Any) -> bool:
        return bool(w is not None and w.covered and w.interval == hub.idle_s)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(45), hub.watch(task.id) as follower:
            follower.changed = False
            await follower.wait()  # the first read
            follower.changed = False
            await _until(lambda: idle(hub._watches.get(task.id)), "idle, covered by hints")
            last_read, reads = hub._last_poll, hub.polls
            done = await asyncio.to_thread(store.cancel, task.id, T0)  # commits; no hint
            assert done.effect == "cancelled"
            await follower.wait()
            assert follower.changed, "the follower was told"
            heard = loop.time()
            assert hub.polls == reads + 1, "by the next scheduled read"
            assert heard - last_read <= hub.idle_s + 0.5, f"{heard - last_read:.1f}s after"
        await hub.close()

    try:
        asyncio.run(go())
        sent = []
        while (m := spy.get_message(timeout=0.1)) is not None:
            sent.append(m["type"])
        assert "message" not in sent, f"a hint was published: {sent}"
    finally:
        spy.close()
        store.dispose()


@pytest.mark.fleet
def test_a_worker_hints_the_commits_that_give_its_task_events(
    fleet: Fleet,  # noqa: F811 (the imported fixture)
    redis_url: str,
) -> None:
    """From a real worker process, on the task's own channel: the claim (running) at once, then
    the journal commits of tool calls a second apart and the settle (hints within one 50 ms
    window go out once)."""
    from fleet.sdk.client import FleetClient

    base = fleet.serve()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    pubsub = client.pubsub()
    pubsub.psubscribe(channel("*"))
    assert pubsub.get_message(timeout=5) is not None  # the subscription's confirmation
    with FleetClient(base) as api:
        task = api.submit("tooly", '/tool wait {"seconds": 1}\n/tool wait {"seconds": 1}')
        done = api.wait(task["id"], 60)
        assert done["status"] == "succeeded", done
    got: list[str] = []
    while (m := pubsub.get_message(timeout=2)) is not None:
        if m["type"] == "pmessage":
            got.append(m["channel"])
    mine = [c for c in got if c == channel(task["id"])]
    assert len(mine) >= 3, got  # the claim, the first wait's commit, the second's and settle
    pubsub.close()
    client.close()
