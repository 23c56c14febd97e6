"""Task ids as typed: whole UUIDs, prefixes of at least 6 hex digits, and what is neither."""

from __future__ import annotations

import uuid

import pytest

from fleet.domain import ids
from fleet.errors import InputError

FULL = "67bdb609-1a2b-4c3d-8e4f-0123456789ab"


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (FULL, uuid.UUID(FULL)),
        (FULL.upper(), uuid.UUID(FULL)),
        (FULL.replace("-", ""), uuid.UUID(FULL)),
        (f" {FULL} ", uuid.UUID(FULL)),
        ("67bdb6", "67bdb6"),
        ("67BDB609", "67bdb609"),
        ("67bdb609-1a2b", "67bdb6091a2b"),  # dashes past the first 8 characters
        ("67bdb609-", "67bdb609"),
        ("67bdb609-1a2b-4c3d-8e4f-0123", "67bdb6091a2b4c3d8e4f0123"),
        ("67bdb609…", "67bdb609"),  # copied from an older, cut listing
    ],
)
def test_parse_ref(typed, expected):
    got = ids.parse_ref(typed)
    if isinstance(expected, uuid.UUID):
        assert got == expected
    else:
        assert isinstance(got, ids.IdPrefix)
        assert (got.typed, got.hex) == (typed.strip(), expected)


@pytest.mark.parametrize(
    "typed",
    ["", "67bdb", "67-bdb", "xyz", "67bdbg09", "67bdb609 1a2b", "0" * 33, "…", "-" * 10],
)
def test_neither_a_uuid_nor_a_prefix(typed):
    with pytest.raises(InputError, match="is not a UUID or a prefix of one") as info:
        ids.parse_ref(typed)
    assert "at least 6 hex characters" in info.value.message
    assert info.value.field == "id"


def test_bounds_span_every_id_with_the_prefix():
    low, high = ids.hex_prefix("67bdb609-1A").bounds()
    assert (str(low), str(high)) == (
        "67bdb609-1a00-0000-0000-000000000000",
        "67bdb609-1aff-ffff-ffff-ffffffffffff",
    )
    whole = ids.hex_prefix(FULL).bounds()
    assert whole == (uuid.UUID(FULL), uuid.UUID(FULL))


def test_short_ids_are_prefixes_show_accepts():
    assert ids.short(FULL) == "67bdb609"
    assert ids.parse_ref(ids.short(FULL)) == ids.IdPrefix("67bdb609", "67bdb609")
