"""``fleet keys hash``: the key from stdin or a hidden prompt, never from the command line."""

from __future__ import annotations

import hashlib
import io

import pytest

from fleet.cli.keys import read_key
from fleet.errors import InputError


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("piped", "key"),
    [("ops-key-123", "ops-key-123"), ("ops-key-123\n", "ops-key-123"), ("  k-1  \r\n", "k-1")],
)
def test_a_piped_key_is_its_one_line(piped: str, key: str) -> None:
    assert read_key(io.StringIO(piped)) == key


@pytest.mark.parametrize("piped", ["", "\n", "   "])
def test_no_key_is_refused(piped: str) -> None:
    with pytest.raises(InputError, match="no key given"):
        read_key(io.StringIO(piped))


def test_two_lines_are_refused() -> None:
    with pytest.raises(InputError, match="more than one line"):
        read_key(io.StringIO("one\ntwo\n"))


def test_at_a_terminal_the_key_is_typed_at_a_prompt_that_hides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def hidden(prompt: str) -> str:
        asked.append(prompt)
        return "typed-key-1\n"

    monkeypatch.setattr("getpass.getpass", hidden)
    assert read_key(Terminal("not read")) == "typed-key-1"
    assert asked == ["API key (not shown): "]


def test_the_hash_is_what_the_api_compares() -> None:
    from fleet.api.auth import hash_key

    assert hash_key(read_key(io.StringIO("ops-key-123\n"))) == (
        hashlib.sha256(b"ops-key-123").hexdigest()
    )
