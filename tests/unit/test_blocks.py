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


@pytest.mark.parametrize(
    ("mode", "ops"),
    [("read", ()), ("append", ("append",)), ("write", ("replace", "append", "str_replace"))],
)
def test_modes_gate_the_edits(mode: str, ops: tuple[str, ...]) -> None:
    from fleet.domain.blocks import allowed_ops

    assert allowed_ops(mode) == ops


def test_a_refused_str_replace_shows_the_current_value() -> None:
    with pytest.raises(InputError) as info:
        apply("tea, tea", 4, Edit("str_replace", "coffee", old="tea"))
    assert "occurs 2 times" in info.value.message
    assert "current value (version 4) is:\ntea, tea" in info.value.message


@pytest.mark.parametrize(
    ("current", "text", "cap", "ok"),
    [
        ("", "x" * 10, 10, True),  # at the cap
        ("", "x" * 11, 10, False),  # above
        ("", "é" * 5, 10, True),  # 10 bytes of multibyte text
        ("é" * 3 + "\n", "é", 10, True),  # 7 + 2 bytes
        ("é" * 4 + "\n", "é", 10, False),  # 9 + 2 bytes
    ],
)
def test_the_size_cap_counts_utf8_bytes(current: str, text: str, cap: int, ok: bool) -> None:
    edit = Edit("append", text) if current else Edit("replace", text)
    if ok:
        assert len(apply(current, 1, edit, max_bytes=cap).encode()) <= cap + 1
        return
    with pytest.raises(InputError) as info:
        apply(current, 1, edit, max_bytes=cap)
    assert f"at most {cap} bytes" in info.value.message
    assert f"now {len(current.encode())}" in info.value.message


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("ä" * 128, True),  # 128 characters, 256 bytes
        ("ä" * 129, False),
        ("a\x7fb", False),
        ("a\u0085b", False),  # a C1 control character
        ("a b", True),
        ("emoji 🎉", True),
    ],
)
def test_note_keys(key: str, ok: bool) -> None:
    if ok:
        check_note(key, "body")
    else:
        with pytest.raises(InputError):
            check_note(key, "body")
