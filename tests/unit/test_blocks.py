"""Block edits and note rules: a table of what each edit does or why it is refused."""

from __future__ import annotations

import pytest

from fleet.domain.blocks import Edit, apply, check_block_name, check_note
from fleet.errors import Conflict, InputError


@pytest.mark.parametrize(
    ("current", "version", "edit", "expected"),
    [
        ("", 0, Edit("replace", "new"), "new"),
        ("old", 3, Edit("replace", "new", expected_version=3), "new"),
        ("", 0, Edit("append", "first"), "first"),
        ("line", 1, Edit("append", "next"), "line\nnext"),
        ("line\n", 1, Edit("append", "next"), "line\nnext"),
        ("a cat sat", 1, Edit("str_replace", "dog", old="cat"), "a dog sat"),
        ("a cat sat", 1, Edit("str_replace", "", old=" sat"), "a cat"),
    ],
)
def test_apply(current: str, version: int, edit: Edit, expected: str) -> None:
    assert apply(current, version, edit) == expected


@pytest.mark.parametrize(
    ("current", "version", "edit", "error", "message"),
    [
        ("x", 2, Edit("replace", "y", expected_version=1), Conflict, "version 2, not 1"),
        ("a a", 1, Edit("str_replace", "b", old="a"), InputError, "occurs 2 times"),
        ("abc", 1, Edit("str_replace", "b", old="z"), InputError, "does not occur"),
        ("abc", 1, Edit("str_replace", "b", old=""), InputError, "needs the text"),
        ("", 0, Edit("replace", "x" * 70_000), InputError, "at most 65536"),
    ],
)
def test_apply_refuses(
    current: str, version: int, edit: Edit, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        apply(current, version, edit)


@pytest.mark.parametrize("name", ["prefs", "user-prefs", "a.b_c", "x" * 100])
def test_good_block_names(name: str) -> None:
    assert check_block_name(name) == name


@pytest.mark.parametrize("name", ["", "Caps", "with space", "-lead", "x" * 101, "a\n"])
def test_bad_block_names(name: str) -> None:
    with pytest.raises(InputError):
        check_block_name(name)


@pytest.mark.parametrize(
    ("key", "body", "ok"),
    [
        ("k", "v", True),
        ("k" * 128, "", True),
        ("", "v", False),
        ("k" * 129, "v", False),
        ("a\tb", "v", False),
        ("k", "é" * 1024, True),
        ("k", "é" * 1025, False),
    ],
)
def test_note_rules(key: str, body: str, ok: bool) -> None:
    if ok:
        check_note(key, body)
    else:
        with pytest.raises(InputError):
            check_note(key, body)
