"""Context selection: newest whole turns within item, byte and token limits, and why others were
left."""

from __future__ import annotations

import pytest

from fleet.constants import PREVIEW_CHARS
from fleet.domain.context import Record, Selection, provenance, select, turns


def rec(id: int, size: int, role: str = "user", seq: int | None = None) -> Record:
    """A record that is a turn of its own unless ``seq`` says otherwise."""
    return Record(id=id, role=role, content="x" * size, seq=id if seq is None else seq)


def ids(records) -> list[int]:
    return [r.id for r in records]


def test_record_size_counts_utf8_bytes():
    assert Record(1, "user", "é✓").size == 5
    assert Record(1, "user", "").size == 0


@pytest.mark.parametrize(
    "sizes,max_items,max_bytes,selected,dropped,used",
    [
        # sizes are given newest first with ids 1..n, each record a turn of its own (the turns
        # below: several records); `selected` is oldest first
        ([], 5, 100, [], [], 0),
        ([10, 10, 10], 5, 100, [3, 2, 1], [], 30),
        # item limit: the newest max_items, the rest dropped as item_limit
        ([10, 10, 10, 10], 2, 100, [2, 1], [(3, "item_limit"), (4, "item_limit")], 20),
        ([10], 1, 100, [1], [], 10),
        # byte limit exactly reached is fine
        ([40, 60], 5, 100, [2, 1], [], 100),
        # the first that does not fit in what is left ends selection (history stays contiguous)
        ([40, 61, 10], 5, 100, [1], [(2, "byte_limit"), (3, "byte_limit")], 40),
        # larger than the whole budget: omitted as oversized, selection goes on
        ([10, 101, 20], 5, 100, [3, 1], [(2, "oversized")], 30),
        ([101, 102], 5, 100, [], [(1, "oversized"), (2, "oversized")], 0),
        # once stopped, every older record carries the stopping reason, even an oversized one
        (
            [60, 50, 500, 5],
            5,
            100,
            [1],
            [(2, "byte_limit"), (3, "byte_limit"), (4, "byte_limit")],
            60,
        ),
        ([10, 10, 500], 2, 100, [2, 1], [(3, "item_limit")], 20),
        # the item limit is checked before the size
        ([10, 10, 90], 2, 100, [2, 1], [(3, "item_limit")], 20),
        # oversized records do not count towards the item limit
        ([10, 200, 10, 10], 2, 100, [3, 1], [(2, "oversized"), (4, "item_limit")], 20),
        # empty records take an item but no bytes
        ([0, 0, 0], 2, 0, [2, 1], [(3, "item_limit")], 0),
    ],
)
def test_select(sizes, max_items, max_bytes, selected, dropped, used):
    records = [rec(i + 1, size) for i, size in enumerate(sizes)]
    sel = select(records, max_items=max_items, max_bytes=max_bytes)
    assert ids(sel.selected) == selected
    assert [(r.id, why) for r, why in sel.dropped] == dropped
    assert sel.bytes == used
    assert sel.bytes == sum(r.size for r in sel.selected)
    assert sel.older_unseen is False


@pytest.mark.parametrize("more_exist", [True, False])
def test_select_passes_on_older_unseen(more_exist):
    sel = select([rec(1, 1)], max_items=1, max_bytes=10, more_exist=more_exist)
    assert sel.older_unseen is more_exist


def test_select_keeps_whole_records_and_roles():
    newest_first = [Record(2, "assistant", "echo: hi"), Record(1, "user", "hi")]
    sel = select(newest_first, max_items=10, max_bytes=1000)
    assert sel.selected == (Record(1, "user", "hi"), Record(2, "assistant", "echo: hi"))


def test_provenance():
    long = Record(3, "user", "y" * (PREVIEW_CHARS + 5), seq=2)
    records = [
        Record(4, "assistant", "ok", seq=2),
        long,
        Record(2, "user", "z" * 500, seq=1),
        Record(1, "user", "x" * 150),  # its task is gone: no seq
    ]
    sel = select(records, max_items=3, max_bytes=200, more_exist=True)
    assert provenance(sel, max_items=3, max_bytes=200) == {
        "limits": {"max_items": 3, "max_bytes": 200},
        "injected": [
            {
                "id": 3,
                "seq": 2,
                "role": "user",
                "bytes": PREVIEW_CHARS + 5,
                "preview": "y" * PREVIEW_CHARS + "…",
            },
            {"id": 4, "seq": 2, "role": "assistant", "bytes": 2, "preview": "ok"},
        ],
        "injected_bytes": PREVIEW_CHARS + 7,
        "dropped": [
            {
                "id": 2,
                "seq": 1,
                "role": "user",
                "bytes": 500,
                "preview": "z" * PREVIEW_CHARS + "…",
                "reason": "oversized",
            },
            {
                "id": 1,
                "seq": None,
                "role": "user",
                "bytes": 150,
                "preview": "x" * PREVIEW_CHARS + "…",
                "reason": "byte_limit",
            },
        ],
        "older_unseen": True,
    }


def test_preview_exactly_at_limit_is_not_marked_cut():
    r = Record(1, "user", "a" * PREVIEW_CHARS)
    assert r.ref()["preview"] == "a" * PREVIEW_CHARS


def test_provenance_of_empty_selection():
    assert provenance(Selection(selected=()), max_items=20, max_bytes=10) == {
        "limits": {"max_items": 20, "max_bytes": 10},
        "injected": [],
        "injected_bytes": 0,
        "dropped": [],
        "older_unseen": False,
    }


def turn(seq: int | None, *sizes: int, first_id: int) -> list[Record]:
    """One turn newest record first: the reply (when there are two or more), then user messages."""
    roles = ["assistant", *["user"] * (len(sizes) - 1)] if len(sizes) > 1 else ["user"]
    return [
        Record(first_id + len(sizes) - 1 - i, role, "x" * size, seq=seq)
        for i, (role, size) in enumerate(zip(roles, sizes, strict=True))
    ]


def test_turns_group_by_seq_and_without_it_by_reply():
    newest_first = [
        *turn(3, 10, 10, first_id=5),  # reply 6, input 5
        *turn(2, 10, 10, 10, first_id=2),  # reply 4, a steered message 3, input 2
        Record(1, "user", "failed, no reply", seq=1),
        *turn(None, 10, 10, first_id=-1),  # tasks gone: reply 0, input -1
        *turn(None, 10, 10, first_id=-3),
    ]
    assert [[r.id for r in t] for t in turns(newest_first)] == [
        [6, 5],
        [4, 3, 2],
        [1],
        [0, -1],
        [-2, -3],
    ]


#: Two turns of a reply and its question, newest first: ids 4 (reply), 3 | 2 (reply), 1.
TWO = [*turn(2, 40, 30, first_id=3), *turn(1, 20, 10, first_id=1)]


@pytest.mark.parametrize(
    "limits,selected,dropped",
    [
        ({"max_items": 4, "max_bytes": 100}, [1, 2, 3, 4], []),
        # the older turn does not fit whole: both of its records go, never its question alone
        ({"max_items": 3, "max_bytes": 100}, [3, 4], [(2, "item_limit"), (1, "item_limit")]),
        ({"max_items": 4, "max_bytes": 90}, [3, 4], [(2, "byte_limit"), (1, "byte_limit")]),
        # a turn larger than the whole budget is omitted whole; selection goes on
        ({"max_items": 4, "max_bytes": 60}, [1, 2], [(4, "oversized"), (3, "oversized")]),
        # a turn of more records than the item limit is larger than that budget: oversized
        ({"max_items": 1, "max_bytes": 100}, [], [(i, "oversized") for i in (4, 3, 2, 1)]),
        # an oversized turn does not end selection; the first that does not fit does
        ({"max_items": 3, "max_bytes": 60}, [1, 2], [(4, "oversized"), (3, "oversized")]),
    ],
)
def test_select_keeps_or_drops_whole_turns(limits, selected, dropped):
    sel = select(TWO, **limits)
    assert ids(sel.selected) == selected
    assert [(r.id, why) for r, why in sel.dropped] == dropped


def test_a_token_budget_drops_the_whole_turn_not_its_question_alone():
    """Issue 33: with context_tokens = 300 a turn's user message was dropped (token_limit)
    while its reply stayed, so the model saw an answer without its question."""
    newest_first = [
        Record(4, "assistant", "a" * 100, seq=2),
        Record(3, "user", "q" * 100, seq=2),
        Record(2, "assistant", "a" * 60, seq=1),
        Record(1, "user", "q" * 60, seq=1),
    ]
    sel = select(
        newest_first, max_items=20, max_bytes=10_000, max_tokens=300, cost=lambda r: r.size
    )
    assert ids(sel.selected) == [3, 4]
    assert [(r.id, why) for r, why in sel.dropped] == [(2, "token_limit"), (1, "token_limit")]
    assert sel.tokens == 200 and sel.priced == {4: 100, 3: 100, 2: 60, 1: 60}


def test_an_undelivered_reply_leaves_its_question_in_and_counts_nothing():
    sel = select(TWO, max_items=3, max_bytes=100, keep=lambda r: r.id != 2)
    assert ids(sel.selected) == [1, 3, 4]
    assert [(r.id, why) for r, why in sel.dropped] == [(2, "undelivered")]


def test_the_oldest_turn_read_may_be_cut_short_so_it_is_left_out():
    # the read stopped inside turn 1: its input may be older than what was read
    cut = [*turn(2, 10, 10, first_id=3), Record(2, "assistant", "x" * 10, seq=1)]
    sel = select(cut, max_items=10, max_bytes=100, more_exist=True)
    assert ids(sel.selected) == [3, 4]
    assert [(r.id, why) for r, why in sel.dropped] == [(2, "item_limit")]
    whole = select(cut, max_items=10, max_bytes=100, more_exist=False)
    assert ids(whole.selected) == [2, 3, 4]
