"""Text deltas: their ids among a task's events, their wire form, the sink's numbering, and
which of them a stream sends (``Cursor``)."""

from __future__ import annotations

import time
import uuid

import pytest

from fleet.domain.deltas import Cursor, Delta, decode, encode, joined
from fleet.domain.events import DELTA, END, LAST_DELTA, Position
from fleet.errors import InputError
from fleet.streaming.redis import RedisChannel, key
from fleet.streaming.sink import Passthrough, RunDeltas

RUN = str(uuid.UUID(int=7))


def d(attempt: int, step: int, seq: int, text: str = "x", reset: bool = False) -> Delta:
    return Delta(Position.delta(attempt, step, seq), RUN, text, reset)


# -- ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1.3.d1", Position(1, 3, DELTA, 1)),
        ("2.5.d17", Position(2, 5, DELTA, 17)),
        ("1.3.0", Position(1, 3, 0)),
    ],
)
def test_delta_ids_round_trip(text: str, want: Position) -> None:
    assert Position.parse(text) == want
    assert str(want) == text


def test_deltas_sort_after_the_step_before_and_before_their_own_step() -> None:
    assert Position(1, 2, 0) < Position.delta(1, 3, 1) < Position.delta(1, 3, 2) < Position(1, 3)
    assert Position.delta(1, 3, LAST_DELTA) < Position(1, 3)
    assert Position(1, 3) < Position.delta(1, 4, 1) < Position(1, END, 0)


@pytest.mark.parametrize("text", ["1.3.x9", "2.5.d0a", "1.3.12", "1.3.d", "1.end.later_kind"])
def test_an_id_of_a_later_release_resumes_at_its_step(text: str) -> None:
    """Not a 422 (a browser's EventSource would stop reconnecting): the step's event comes
    again, its deltas do not."""
    attempt, step, _ = text.split(".")
    n = END if step == "end" else int(step)
    assert Position.parse(text) == Position.delta(int(attempt), n, LAST_DELTA)


@pytest.mark.parametrize("text", ["", "x", "1.3", "1.3.", "a.b.c", "1.3.0.0", "1.3.d 1"])
def test_other_ids_are_still_refused(text: str) -> None:
    with pytest.raises(InputError):
        Position.parse(text)


# -- wire ------------------------------------------------------------------------------------


def test_wire_round_trip_and_unreadable_entries_left_out() -> None:
    ds = [d(1, 2, 1, "héllo "), d(1, 2, 2, "", reset=True)]
    assert decode(encode(ds)) == ds
    raw = encode(ds)[:-1] + ',["1.2.0","r","t",0],["nope"],["1.2.d3","r","t",0,"later"]]'
    assert [x.id for x in decode(raw)] == ["1.2.d1", "1.2.d2", "1.2.d3"]
    assert decode("{not json") == []
    assert decode('{"a": 1}') == []


def test_joined_starts_again_at_each_reset() -> None:
    assert joined([d(1, 1, 1, "ab"), d(1, 1, 2, "c")]) == "abc"
    assert joined([d(1, 1, 1, "ab"), d(1, 1, 2, "X", reset=True), d(1, 1, 3, "Y")]) == "XY"


# -- the sink --------------------------------------------------------------------------------


class Recorded:
    def __init__(self) -> None:
        self.sent: list[Delta] = []

    def publish(self, task_id: uuid.UUID, delta: Delta) -> None:
        self.sent.append(delta)


def test_sink_numbers_per_step_and_marks_resets() -> None:
    ch = Recorded()
    sink = RunDeltas(ch, uuid.uuid4(), uuid.UUID(RUN), 1, Passthrough)
    sink.text(1, "He")
    sink.text(1, "llo")
    sink.end(1)
    sink.text(3, "a")
    sink.reset(3)
    sink.text(3, "b")
    sink.end(3)
    assert [(x.id, x.text, x.reset) for x in ch.sent] == [
        ("1.1.d1", "He", False),
        ("1.1.d2", "llo", False),
        ("1.3.d1", "a", False),
        ("1.3.d2", "b", True),
    ]


def test_a_reset_with_nothing_after_it_is_sent_on_its_own() -> None:
    ch = Recorded()
    sink = RunDeltas(ch, uuid.uuid4(), uuid.UUID(RUN), 1, Passthrough)
    sink.text(1, "partial")
    sink.reset(1)
    sink.end(1)  # every retry failed
    assert [(x.id, x.text, x.reset) for x in ch.sent] == [
        ("1.1.d1", "partial", False),
        ("1.1.d2", "", True),
    ]
    assert joined(ch.sent) == ""


def test_a_later_run_starts_with_a_reset() -> None:
    ch = Recorded()
    sink = RunDeltas(ch, uuid.uuid4(), uuid.UUID(RUN), 2, Passthrough)
    sink.reset(4)  # nothing shown yet: nothing to void
    sink.text(4, "again")
    assert [(x.id, x.reset) for x in ch.sent] == [("2.4.d1", True)]


# -- what a stream sends ---------------------------------------------------------------------


def test_live_deltas_in_sequence_are_sent_once() -> None:
    c = Cursor()
    after = Position(1, 1)
    first = d(1, 3, 1)
    assert c.verdict(first, after) == "sync", "a new step: the store is read first"
    assert c.catch_up([first], after) == [first]
    assert c.verdict(d(1, 3, 1), first.position) == "drop"
    assert c.verdict(d(1, 3, 2), first.position) == "send"
    c.sent(d(1, 3, 2))
    assert c.verdict(d(1, 3, 4), d(1, 3, 2).position) == "sync", "a gap: the buffer has it"
    assert c.verdict(d(1, 3, 3), Position(1, 3)) == "drop", "its step's event came already"


def test_a_steps_first_delta_right_after_the_event_before_it_is_sent_at_once() -> None:
    """Nothing lies between step n - 1's event (the run's start for step 1) and step n's
    first delta: no store or buffer read before it."""
    assert Cursor().verdict(d(1, 1, 1), Position(1, 0)) == "send", "after the run's start"
    assert Cursor().verdict(d(1, 3, 1), Position(1, 2)) == "send", "after the step before"
    assert Cursor().verdict(d(2, 1, 1, reset=True), Position(2, 0)) == "send", "a later run"
    assert Cursor().verdict(d(1, 3, 2), Position(1, 2)) == "sync", "its first delta was missed"
    assert Cursor().verdict(d(1, 3, 1), Position(1, 1)) == "sync", "step 2's event not sent"
    assert Cursor().verdict(d(2, 1, 1), Position(1, END, 1)) == "sync", "run 2's start not sent"
    assert Cursor().verdict(d(1, 1, 1), None) == "sync", "nothing sent yet"


def test_joining_mid_step_gets_the_text_so_far() -> None:
    buffer = [d(1, 1, 1, "old"), d(1, 2, 1, "He"), d(1, 2, 2, "llo")]
    got = Cursor().catch_up(buffer, Position(1, 1))  # step 1's event was sent
    assert [x.text for x in got] == ["He", "llo"]


def test_resuming_within_a_step_sends_only_what_follows() -> None:
    buffer = [d(1, 2, 1, "a"), d(1, 2, 2, "b"), d(1, 2, 3, "c")]
    c = Cursor()
    assert [x.text for x in c.catch_up(buffer, Position.delta(1, 2, 2))] == ["c"]
    assert c.verdict(d(1, 2, 4), Position.delta(1, 2, 3)) == "send"


def test_joining_after_a_reset_starts_at_the_reset() -> None:
    buffer = [d(1, 2, 1, "bad"), d(1, 2, 2, "good", reset=True), d(1, 2, 3, "!")]
    got = Cursor().catch_up(buffer, Position(1, 1))
    assert joined(got) == "good!"


def test_a_step_whose_start_is_gone_is_skipped_until_its_event() -> None:
    """The buffer kept only the newest deltas: no partial text, the step event carries it."""
    c = Cursor()
    assert c.catch_up([d(1, 2, 5), d(1, 2, 6)], Position(1, 1)) == []
    assert c.verdict(d(1, 2, 7), Position(1, 1)) == "drop"
    assert c.verdict(d(1, 3, 1), Position(1, 2)) == "send", "the next step streams again"


def test_a_stream_resuming_into_a_gap_skips_the_step() -> None:
    c = Cursor()
    assert c.catch_up([d(1, 2, 9), d(1, 2, 10)], Position.delta(1, 2, 3)) == []
    assert c.skipping


def test_catch_up_takes_steps_in_order_and_a_new_run_after_the_old() -> None:
    buffer = [d(2, 1, 1, "new", reset=True), d(1, 4, 1, "old")]
    got = Cursor().catch_up(buffer, Position(1, 3))
    assert [x.id for x in got] == ["1.4.d1", "2.1.d1"]


# -- the Redis channel -----------------------------------------------------------------------


class _Pipe:
    def __init__(self, sent: list[tuple[str, str]]) -> None:
        self.sent, self.calls = sent, []  # type: list[tuple[str, str]]

    def xadd(self, key: str, fields: dict[str, str], **_: object) -> None:
        self.calls.append(("xadd", fields["d"]))

    def expire(self, key: str, ttl: int) -> None:
        self.calls.append(("expire", key))

    def publish(self, channel: str, message: str) -> None:
        self.calls.append(("publish", message))

    def execute(self) -> None:
        self.sent.extend(self.calls)


class _Client:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def pipeline(self, transaction: bool = True) -> _Pipe:
        return _Pipe(self.sent)


def test_a_barrier_returns_once_what_came_before_it_was_sent_without_the_window() -> None:
    """A run ends its model call with a barrier: its last text reaches Redis before the step
    is journaled (after the step's event a stream would drop it), and at once."""
    client = _Client()
    channel = RedisChannel(client, buffer=10, ttl_s=60, window_s=30.0)
    channel.barrier()  # nothing published yet: returns at once
    task = uuid.uuid4()
    channel.publish(task, d(1, 1, 1, "last"))
    began = time.monotonic()
    channel.barrier()
    assert time.monotonic() - began < 5, "the barrier does not wait out the window"
    assert ("publish", encode([d(1, 1, 1, "last")])) in client.sent


def test_the_sink_ends_a_step_that_streamed_with_the_channels_barrier() -> None:
    class Barred(Recorded):
        barriers = 0

        def barrier(self) -> None:
            self.barriers += 1

    ch = Barred()
    sink = RunDeltas(ch, uuid.uuid4(), uuid.UUID(RUN), 1, Passthrough)
    sink.end(1)
    assert ch.barriers == 0, "nothing streamed: nothing to wait for"
    sink.text(2, "Hi")
    sink.end(2)
    assert ch.barriers == 1


def test_a_send_is_one_entry_and_one_message_a_task_and_renews_the_ttl_once_a_tenth() -> None:
    client = _Client()
    channel = RedisChannel(client, buffer=10, ttl_s=60, window_s=30.0)
    task = uuid.uuid4()
    two = [d(1, 1, 1, "a"), d(1, 1, 2, "b")]
    channel._send({task: two})
    channel._send({task: [d(1, 1, 3, "c")]})
    assert client.sent == [
        ("xadd", encode(two)),
        ("expire", key(task)),
        ("publish", encode(two)),
        ("xadd", encode([d(1, 1, 3, "c")])),
        ("publish", encode([d(1, 1, 3, "c")])),
    ], "the TTL set again only once a tenth of it passed"
    channel._renewed[task] -= 6.0  # a tenth of the TTL later
    channel._send({task: [d(1, 1, 4, "d")]})
    assert ("expire", key(task)) in client.sent[5:]
