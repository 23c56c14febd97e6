"""Label rules: what validate_labels, parse_label_args and merge_labels accept and refuse."""

from __future__ import annotations

import copy
from types import MappingProxyType

import pytest

from fleet.constants import MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_BYTES, MAX_LABELS
from fleet.domain.labels import merge_labels, parse_label_args, validate_labels
from fleet.errors import InputError

FULL = {f"k{i:02d}": "v" for i in range(MAX_LABELS)}
LONG_KEY = "k" * MAX_LABEL_KEY_CHARS
ALL_KEY_CHARS = "azAZ09._/-"


@pytest.mark.parametrize(
    "labels,expected",
    [
        (None, {}),
        ({}, {}),
        ({"team": "search"}, {"team": "search"}),
        ({"b": "2", "a": "1", "c": "3"}, {"a": "1", "b": "2", "c": "3"}),
        (MappingProxyType({"env": "prod"}), {"env": "prod"}),
        (FULL, FULL),
        ({LONG_KEY: "x"}, {LONG_KEY: "x"}),
        ({"k": "x"}, {"k": "x"}),
        ({ALL_KEY_CHARS: "x"}, {ALL_KEY_CHARS: "x"}),
        ({"app.kubernetes.io/name": "fleet"}, {"app.kubernetes.io/name": "fleet"}),
        ({"empty": ""}, {"empty": ""}),
        ({"v": "x" * MAX_LABEL_VALUE_BYTES}, {"v": "x" * MAX_LABEL_VALUE_BYTES}),
        # 2-byte characters: exactly at the byte limit.
        ({"v": "é" * (MAX_LABEL_VALUE_BYTES // 2)}, {"v": "é" * (MAX_LABEL_VALUE_BYTES // 2)}),
        ({"v": "spaces and ünïcödé ✓"}, {"v": "spaces and ünïcödé ✓"}),
        # Emoji ZWJ sequence: U+200D is a format character (Cf), not a control character.
        ({"v": "👩\u200d💻"}, {"v": "👩\u200d💻"}),
        ({"v": "a=b:c,d;e"}, {"v": "a=b:c,d;e"}),
    ],
)
def test_validate_labels_accepts(labels, expected):
    result = validate_labels(labels)
    assert result == expected
    assert list(result) == sorted(result)


@pytest.mark.parametrize(
    "labels,field,fragments",
    [
        (
            {f"k{i}": "v" for i in range(MAX_LABELS + 1)},
            "labels",
            [str(MAX_LABELS + 1), str(MAX_LABELS), "remove 1"],
        ),
        ({"": "v"}, "labels.", ["empty", "give the label a name"]),
        (
            {"k" * (MAX_LABEL_KEY_CHARS + 1): "v"},
            "labels." + "k" * MAX_LABEL_KEY_CHARS,
            [str(MAX_LABEL_KEY_CHARS + 1), str(MAX_LABEL_KEY_CHARS), "shorter key"],
        ),
        ({"bad key": "v"}, "labels.bad key", ["'bad key'", "' '", "'bad-key'", "rename"]),
        ({"a:b": "v"}, "labels.a:b", ["':'", "letters, digits and '._/-'"]),
        ({"a=b": "v"}, "labels.a=b", ["'='"]),
        ({"café": "v"}, "labels.café", ["'é'", "ASCII"]),
        ({"tab\tkey": "v"}, "labels.tab\tkey", ["'\\t'"]),
        ({1: "v"}, "labels.1", ["int", "must be strings"]),
        ({None: "v"}, "labels.None", ["NoneType", "must be strings"]),
        ({"n": 1}, "labels.n", ["'n'", "type int", "must be strings", "'1'"]),
        ({"n": 1.5}, "labels.n", ["type float"]),
        ({"n": True}, "labels.n", ["type bool", "'True'"]),
        ({"n": None}, "labels.n", ["type NoneType"]),
        ({"n": b"x"}, "labels.n", ["type bytes"]),
        ({"n": ["x"]}, "labels.n", ["type list"]),
        (
            {"v": "x" * (MAX_LABEL_VALUE_BYTES + 1)},
            "labels.v",
            [f"{MAX_LABEL_VALUE_BYTES + 1} UTF-8 bytes", "shorten"],
        ),
        (
            {"v": "é" * (MAX_LABEL_VALUE_BYTES // 2 + 1)},
            "labels.v",
            [f"{MAX_LABEL_VALUE_BYTES + 2} UTF-8 bytes"],
        ),
        ({"v": "line\nbreak"}, "labels.v", ["U+000A", "remove line breaks"]),
        ({"v": "a\tb"}, "labels.v", ["U+0009"]),
        ({"v": "nul\x00"}, "labels.v", ["U+0000"]),
        ({"v": "del\x7f"}, "labels.v", ["U+007F"]),
        ({"v": "c1\x85"}, "labels.v", ["U+0085"]),
        ({"v": "\x1b[31mred"}, "labels.v", ["U+001B"]),
        ({"v": "lone \ud800"}, "labels.v", ["surrogate", "UTF-8"]),
        (["team=search"], "labels", ["list", "object of string keys"]),
        ("team=search", "labels", ["str"]),
    ],
)
def test_validate_labels_refuses(labels, field, fragments):
    with pytest.raises(InputError) as exc_info:
        validate_labels(labels)
    err = exc_info.value
    assert err.field == field
    assert err.status == 422
    for fragment in fragments:
        assert fragment in err.message


@pytest.mark.parametrize(
    "labels,field,expected_field",
    [
        ({"bad key": "v"}, "spec.labels", "spec.labels.bad key"),
        ({"ok": 1}, "defaults", "defaults.ok"),
        ({f"k{i}": "v" for i in range(MAX_LABELS + 1)}, "spec.labels", "spec.labels"),
    ],
)
def test_validate_labels_field_prefix(labels, field, expected_field):
    with pytest.raises(InputError) as exc_info:
        validate_labels(labels, field=field)
    assert exc_info.value.field == expected_field


def test_validate_labels_clips_huge_values_in_messages():
    with pytest.raises(InputError) as exc_info:
        validate_labels({"v": "x" * 100_000})
    assert len(exc_info.value.message) < 300
    assert "100000 characters" in exc_info.value.message


def test_validate_labels_returns_new_dict_and_does_not_mutate():
    labels = {"b": "2", "a": "1"}
    before = copy.deepcopy(labels)
    result = validate_labels(labels)
    assert result is not labels
    assert labels == before
    assert list(labels) == ["b", "a"]
    result["c"] = "3"
    assert "c" not in labels


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], {}),
        (["team=search"], {"team": "search"}),
        (["b=2", "a=1"], {"a": "1", "b": "2"}),
        (["expr=a=b"], {"expr": "a=b"}),  # split on the first '=' only
        (["empty="], {"empty": ""}),
        (["v= spaced "], {"v": " spaced "}),
        (("tuple=ok",), {"tuple": "ok"}),
        ([f"k{i}=v" for i in range(MAX_LABELS)], {f"k{i}": "v" for i in range(MAX_LABELS)}),
    ],
)
def test_parse_label_args_accepts(args, expected):
    result = parse_label_args(args)
    assert result == expected
    assert list(result) == sorted(result)


@pytest.mark.parametrize(
    "args,field,fragments",
    [
        (["team"], "labels", ["'team'", "no '='", "--label key=value"]),
        (["=search"], "labels", ["'=search'", "empty key", "--label key=value"]),
        (["="], "labels", ["empty key", "--label key=value"]),
        ([""], "labels", ["no '='", "--label key=value"]),
        (["a=1", "a=2"], "labels.a", ["'a=2'", "repeats key 'a'", "once"]),
        (["a=1", "b=2", "a=1"], "labels.a", ["repeats key 'a'"]),
        (["bad key=v"], "labels.bad key", ["' '"]),
        (["v=a\nb"], "labels.v", ["U+000A"]),
        ([f"k{i}=v" for i in range(MAX_LABELS + 1)], "labels", [str(MAX_LABELS)]),
    ],
)
def test_parse_label_args_refuses(args, field, fragments):
    with pytest.raises(InputError) as exc_info:
        parse_label_args(args)
    assert exc_info.value.field == field
    for fragment in fragments:
        assert fragment in exc_info.value.message


def test_parse_label_args_refuses_a_bare_string():
    with pytest.raises(TypeError, match="not one string"):
        parse_label_args("team=search")


@pytest.mark.parametrize(
    "base,extra,expected",
    [
        (None, None, {}),
        ({}, {}, {}),
        ({"a": "1"}, None, {"a": "1"}),
        (None, {"a": "1"}, {"a": "1"}),
        ({"a": "1", "b": "2"}, {"b": "3", "c": "4"}, {"a": "1", "b": "3", "c": "4"}),
        ({"z": "1"}, {"a": "2"}, {"a": "2", "z": "1"}),
        (
            {f"k{i}": "v" for i in range(MAX_LABELS)},
            {"k0": "override"},
            {**{f"k{i}": "v" for i in range(MAX_LABELS)}, "k0": "override"},
        ),
    ],
)
def test_merge_labels(base, extra, expected):
    result = merge_labels(base, extra)
    assert result == expected
    assert list(result) == sorted(result)


@pytest.mark.parametrize(
    "base,extra,field",
    [
        ({f"a{i}": "v" for i in range(20)}, {f"b{i}": "v" for i in range(20)}, "labels"),
        ({"bad key": "v"}, {}, "labels.bad key"),
        ({}, {"n": 1}, "labels.n"),
        ({"ok": "v"}, ["not", "a", "mapping"], "labels"),
    ],
)
def test_merge_labels_validates_the_result(base, extra, field):
    with pytest.raises(InputError) as exc_info:
        merge_labels(base, extra)
    assert exc_info.value.field == field


def test_merge_labels_does_not_mutate_inputs():
    base = {"a": "1", "b": "2"}
    extra = {"b": "3"}
    result = merge_labels(base, extra)
    assert base == {"a": "1", "b": "2"}
    assert extra == {"b": "3"}
    assert result is not base
    assert result is not extra
