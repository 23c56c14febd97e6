"""Submission inputs: text or parts, validated and measured in UTF-8 bytes."""

from __future__ import annotations

import pytest

from fleet.constants import MAX_IDEMPOTENCY_KEY_CHARS
from fleet.domain.inputs import idempotency_key, parse, part_bytes
from fleet.domain.values import DataPart, TextPart
from fleet.errors import InputError


@pytest.mark.parametrize(
    "value,parts,size",
    [
        ("hello", (TextPart(text="hello"),), 5),
        ("héllo ✓", (TextPart(text="héllo ✓"),), 10),
        ([{"type": "text", "text": "hi"}], (TextPart(text="hi"),), 2),
        ([{"type": "data", "data": {"a": 1}}], (DataPart(data={"a": 1}),), len('{"a": 1}')),
        # data is measured as sorted-key JSON
        ([{"type": "data", "data": {"b": 2, "a": 1}}], (DataPart(data={"a": 1, "b": 2}),), 16),
        # an empty data part is still an input
        ([{"type": "data", "data": {}}], (DataPart(data={}),), 2),
        (
            [{"type": "text", "text": "ab"}, {"type": "data", "data": {"k": "v"}}],
            (TextPart(text="ab"), DataPart(data={"k": "v"})),
            2 + len('{"k": "v"}'),
        ),
        # part objects are accepted as they are
        (
            [TextPart(text="x"), DataPart(data={"n": None})],
            (TextPart(text="x"), DataPart(data={"n": None})),
            1 + len('{"n": null}'),
        ),
        # an empty text part beside a non-empty one is kept
        (
            [{"type": "text", "text": ""}, {"type": "text", "text": "y"}],
            (TextPart(text=""), TextPart(text="y")),
            1,
        ),
        # any sequence of parts, not only a list
        (({"type": "text", "text": "tuple"},), (TextPart(text="tuple"),), 5),
    ],
)
def test_parse(value, parts, size):
    assert parse(value, 1000) == (parts, size)


@pytest.mark.parametrize("max_bytes,ok", [(5, True), (6, True), (4, False)])
def test_parse_size_limit(max_bytes, ok):
    if ok:
        assert parse("hello", max_bytes)[1] == 5
    else:
        with pytest.raises(InputError) as info:
            parse("hello", max_bytes)
        assert info.value.field == "input"
        assert "input is 5 bytes" in info.value.message
        assert f"at most {max_bytes}" in info.value.message


def test_parse_size_limit_counts_bytes_not_characters():
    with pytest.raises(InputError, match="input is 6 bytes"):
        parse("ééé", 5)


@pytest.mark.parametrize(
    "value",
    ["", "   ", "\n\t", [], [{"type": "text", "text": ""}], [{"type": "text", "text": " "}] * 2],
)
def test_parse_refuses_empty(value):
    with pytest.raises(InputError) as info:
        parse(value, 1000)
    assert info.value.field == "input"
    assert "input is empty" in info.value.message


@pytest.mark.parametrize(
    "value,where",
    [
        ([{"type": "text"}], "input part 0"),
        ([{"type": "image", "url": "x"}], "input part 0"),
        ([{"type": "data", "data": "not an object"}], "input part 0"),
        ([{"type": "text", "text": "ok"}, {"text": 5}], "input part 1"),
        (["bare string"], "input part 0"),
        ([42], "input part 0"),
    ],
)
def test_parse_refuses_bad_parts(value, where):
    with pytest.raises(InputError) as info:
        parse(value, 1000)
    assert info.value.field == "input"
    assert info.value.message.startswith(where)
    assert '{"type": "text", "text": "…"}' in info.value.message


@pytest.mark.parametrize(
    "part,size",
    [
        (TextPart(text=""), 0),
        (TextPart(text="✓"), 3),
        (DataPart(data={}), 2),
        (DataPart(data={"z": [1, 2], "a": True}), len('{"a": true, "z": [1, 2]}')),
    ],
)
def test_part_bytes(part, size):
    assert part_bytes(part) == size


@pytest.mark.parametrize(
    "value",
    [None, "k", "order-42 retry#1", "ü", "k" * MAX_IDEMPOTENCY_KEY_CHARS],
)
def test_idempotency_key_accepts(value):
    assert idempotency_key(value) == value


@pytest.mark.parametrize(
    "value",
    ["", "k" * (MAX_IDEMPOTENCY_KEY_CHARS + 1), "tab\t", "line\n", "nul\x00", "del\x7f"],
)
def test_idempotency_key_refuses(value):
    with pytest.raises(InputError) as info:
        idempotency_key(value)
    assert info.value.field == "idempotencyKey"
    assert f"1-{MAX_IDEMPOTENCY_KEY_CHARS} printable characters" in info.value.message
