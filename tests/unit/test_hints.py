"""The hint publisher: after the caller's commit, off its thread, batched, never raising."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import redis

from fleet.dispatch.hints import NoHints, RedisHints, channel


class Recorder:
    """A client whose pipelines record what they publish (one list per pipeline sent)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.sent: list[list[str]] = []
        self.gate = gate

    def pipeline(self, transaction: bool = True) -> Any:
        outer = self

        class Pipe:
            def __init__(self) -> None:
                self.channels: list[str] = []

            def publish(self, name: str, message: bytes) -> None:
                self.channels.append(name)

            def execute(self) -> None:
                if outer.gate is not None:
                    outer.gate.wait(10)
                outer.sent.append(self.channels)

        return Pipe()


def _until(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_hints_go_out_on_each_tasks_channel() -> None:
    client = Recorder()
    hints = RedisHints(client)
    a, b = uuid.uuid4(), uuid.uuid4()
    hints.changed(a)
    _until(lambda: len(client.sent) == 1)
    hints.changed(b)
    _until(lambda: len(client.sent) == 2)
    assert client.sent == [[channel(a)], [channel(b)]]
    assert channel(a) == f"fleet:changed:{a}"


def test_what_piles_up_during_a_send_goes_out_in_one_pipeline_once_per_task() -> None:
    gate = threading.Event()
    client = Recorder(gate)
    hints = RedisHints(client)
    first, busy = uuid.uuid4(), uuid.uuid4()
    hints.changed(first)  # its pipeline waits at the gate
    _until(lambda: not hints._pending)
    for _ in range(5):
        hints.changed(busy)
    gate.set()
    _until(lambda: len(client.sent) == 2)
    assert client.sent[1] == [channel(busy)], "five hints for one task: one publish"


def test_close_sends_what_is_pending_without_waiting_for_the_window() -> None:
    client = Recorder()
    hints = RedisHints(client, window_s=30)  # a window no test would wait out
    task = uuid.uuid4()
    hints.changed(task)
    hints.close()
    assert client.sent == [[channel(task)]]


def test_threads_making_the_first_hint_together_start_one_publisher() -> None:
    client = Recorder()
    hints = RedisHints(client)
    before = sum(t.name == "fleet-hints" for t in threading.enumerate())
    go = threading.Barrier(8)
    tasks = [uuid.uuid4() for _ in range(8)]

    def first(task: uuid.UUID) -> None:
        go.wait()
        hints.changed(task)

    threads = [threading.Thread(target=first, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(t.name == "fleet-hints" for t in threading.enumerate()) == before + 1
    _until(lambda: sum(len(b) for b in client.sent) == 8)
    assert sorted(c for b in client.sent for c in b) == sorted(channel(t) for t in tasks)


def test_redis_away_loses_hints_without_raising() -> None:
    hints = RedisHints(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5))
    hints.changed(uuid.uuid4())  # returns at once; the thread's send fails
    _until(lambda: hints.lost == 1)


def test_embedded_mode_sends_nothing() -> None:
    assert NoHints().changed(uuid.uuid4()) is None
