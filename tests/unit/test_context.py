"""Context selection: newest whole records within item and byte limits, and why others were left."""

from __future__ import annotations

import pytest

from fleet.constants import PREVIEW_CHARS
from fleet.domain.context import Record, Selection, provenance, select


def rec(id: int, size: int, role: str = "user") -> Record:
    return Record(id=id, role=role, content="x" * size)


def ids(records) -> list[int]:
    return [r.id for r in records]


def test_record_size_counts_utf8_bytes():
    assert Record(1, "user", "é✓").size == 5
    assert Record(1, "user", "").size == 0


@pytest.mark.parametrize(
    "sizes,max_items,max_bytes,selected,dropped,used",
    [
        # sizes are given newest first with ids 1..n; `selected` is oldest first
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
        rec(1, 150),  # its task is gone: no seq
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
