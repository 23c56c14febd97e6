"""Streaming redaction: whatever the chunking, the pieces a StreamRedactor emits join to what the
journal stores (``Redactor.text`` of the whole text); no secret shows before then, not even one
split across chunks; text that cannot become a secret goes out as soon as its word ends."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.constants import REDACTED
from fleet.domain.redaction import DEFAULT, Redactor
from fleet.domain.stream_redaction import StreamRedactor
from tests.unit import test_redaction
from tests.unit.test_redaction import (
    ANTHROPIC,
    AWS_AKIA,
    GITHUB,
    GOOGLE,
    JWT,
    OPENAI,
    PEM_BODY,
    RSA_BEGIN,
    RSA_END,
    SLACK,
    STRIPE_LIVE,
)

R = REDACTED
EXTRA = "deploy-" + "Q9w8E7r6T5y4U3i2"
PHRASE = "correct horse battery staple"  # a known secret with spaces in it
QUOTED = 'pa"ss' + "w0rd!x"  # one with a quote in it
MULTILINE = "line-one\nline-two"
SECRETS = (EXTRA, PHRASE, QUOTED, MULTILINE)
REDACTOR = Redactor(SECRETS)


def stream(chunks: list[str], redactor: Redactor = REDACTOR) -> list[str]:
    """What each feed returned, then what the flush returned."""
    s = StreamRedactor(redactor)
    pieces = [s.feed(chunk) for chunk in chunks]
    pieces.append(s.flush())
    assert s.held == 0
    return pieces


def check(chunks: list[str], redactor: Redactor = REDACTOR) -> list[str]:
    """The invariant: the pieces join to the redaction of the joined chunks."""
    pieces = stream(chunks, redactor)
    assert "".join(pieces) == redactor.text("".join(chunks)), chunks
    return pieces


def two_ways(text: str) -> list[list[str]]:
    """Every split into two chunks, and one character a chunk."""
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


def before_flush(pieces: list[str]) -> list[str]:
    """Every concatenation of the pieces emitted before the flush (each prefix of the stream)."""
    return ["".join(pieces[:i]) for i in range(1, len(pieces))]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_known_secret_split_over_two_chunks_never_shows(secret):
    text = f"the value {secret} is configured\n"
    for chunks in two_ways(text):
        pieces = check(chunks)
        for emitted in before_flush(pieces):
            assert secret not in emitted
            # nothing of it goes out before the secret is whole (and then it goes as REDACTED)
            assert secret[:4] not in emitted


def test_a_known_secret_joined_by_what_follows_is_held():
    """A secret ending in a space could be followed by text its REDACTED would join."""
    redactor = Redactor(["tail spc "])
    for chunks in two_ways("https://u:tail spc @host/ x "):
        check(chunks, redactor)


@pytest.mark.parametrize(
    "token", [OPENAI, ANTHROPIC, GITHUB["ghp_"], SLACK["xoxb-"], AWS_AKIA, GOOGLE, STRIPE_LIVE, JWT]
)
def test_a_token_split_at_every_position_never_shows(token):
    text = f"use {token} for it "
    for chunks in two_ways(text):
        pieces = check(chunks)
        assert "".join(pieces) == f"use {R} for it "
        assert all(token[:8] not in emitted for emitted in before_flush(pieces))


def test_a_pem_block_split_across_chunks():
    block = f"{RSA_BEGIN}\n{PEM_BODY}\n{RSA_END}"
    text = f"here it is:\n{block}\nkeep it safe "
    body_line = PEM_BODY.splitlines()[0]
    for chunks in two_ways(text):
        pieces = check(chunks)
        assert "".join(pieces) == f"here it is:\n{RSA_BEGIN}\n{R}\n{RSA_END}\nkeep it safe "
        assert all(body_line[:12] not in emitted for emitted in before_flush(pieces))
    # Everything from BEGIN is held until the END line: no armour goes out on its own.
    lines = text.splitlines(keepends=True)
    pieces = check(lines)
    assert pieces[0] == "here it is:\n"
    assert pieces[1:4] == ["", "", ""]
    assert pieces[4] == f"{RSA_BEGIN}\n{R}\n{RSA_END}\n"


def test_an_unterminated_pem_block_is_held_and_redacted_to_the_end():
    text = f"log: {RSA_BEGIN}\n{PEM_BODY}\nand more words "
    for chunks in two_ways(text):
        pieces = check(chunks)
        assert pieces[-1].startswith(RSA_BEGIN)
        assert "".join(pieces) == f"log: {RSA_BEGIN}\n{R}"


@pytest.mark.parametrize(
    "text,expected,value",
    [
        ("password: hunter2 and more\n", f"password: {R} and more\n", "hunter2"),
        ("db_password = 'hunter2 x' then ", f"db_password = '{R}' then ", "hunter2 x"),
        ('{"api_key": "abc def ghi", "n": 1} ', f'{{"api_key": "{R}", "n": 1}} ', "abc def"),
        ('{"password": "hun\\" ter2"} ', f'{{"password": "{R}"}} ', 'hun\\" ter2'),
        (
            "Authorization: Basic dXNlcjpwYXNz more\nnext ",
            f"Authorization: Basic {R}\nnext ",
            "dXNlcjpwYXNz",
        ),
        ("Cookie: a=1; b=2\nAccept: */* ", f"Cookie: {R}\nAccept: */* ", "a=1; b"),
        ("token:  bearer  abc123 ok ", f"token:  bearer  {R} ok ", "abc123"),
        ("sent Bearer abcdefghij1234567890XYZ ok ", f"sent Bearer {R} ok ", "abcdefghij12"),
        ("the token is fine ", "the token is fine ", None),
    ],
)
def test_a_key_value_split_at_every_position(text, expected, value):
    for chunks in two_ways(text):
        pieces = check(chunks)
        assert "".join(pieces) == expected
        if value is not None:
            assert all(value not in emitted for emitted in before_flush(pieces))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("clone https://bob:s3cr3t@example.com/x ok ", f"clone https://bob:{R}@example.com/x ok "),
        ("at postgres://u:p%40ss@db:5432/app\n", f"at postgres://u:{R}@db:5432/app\n"),
        ("hooks.slack.com/services/T0/B1/XyZ123 ", f"hooks.slack.com/services/{R} "),
    ],
)
def test_url_credentials_split_at_every_position(text, expected):
    for chunks in two_ways(text):
        pieces = check(chunks)
        assert "".join(pieces) == expected
        assert all("s3cr3t" not in emitted for emitted in before_flush(pieces))


def test_text_without_secrets_goes_out_promptly():
    s = StreamRedactor(REDACTOR)
    assert s.feed("The worker claims ") == "The worker claims "
    assert s.feed("a run and cal") == "a run and "
    assert s.held == 3
    assert s.feed("ls the model") == "calls the "
    assert s.feed(".\nThen") == "model.\n"
    assert s.feed(" it stores\tthe_reply") == "Then it stores\t"
    assert s.flush() == "the_reply"
    assert s.flush() == ""
    assert s.feed("") == ""


@pytest.mark.parametrize(
    "held,then",
    [
        ("password ", "is long "),  # a key, perhaps with its separator still to come
        ("password: ", "hunter2 "),  # its value to come
        ('password: "hunter2 ', 'x" '),  # a quoted value, until its quote
        ("Authorization: Basic abc ", "def\n"),  # a header value, until the end of the line
        ("Bearer ", "abcdefghij1234567890XYZ "),  # a Bearer token to come
        ("-----BEGIN RSA ", "PRIVATE KEY-----\n"),  # PEM armour, not whole yet
        ("correct horse ", "battery staple "),  # the beginning of a known secret
    ],
)
def test_what_could_still_change_is_held(held, then):
    s = StreamRedactor(REDACTOR)
    emitted = s.feed("start " + held)
    assert emitted == "start "
    assert s.held == len(held)
    rest = s.feed(then) + s.flush()
    assert emitted + rest == REDACTOR.text("start " + held + then)


def test_reset_drops_what_is_held():
    s = StreamRedactor(REDACTOR)
    assert s.feed("partial answer pass") == "partial answer "
    s.reset()
    assert s.held == 0
    assert s.feed("second try ") == "second try "
    assert s.flush() == ""


def test_a_redaction_on_the_left_that_opens_a_value_is_caught():
    """The left side is checked again once redacted: a URL password holding a quote, gone,
    leaves a quoted value open (and a header value running on)."""
    for text in (
        'password: "x http://u:pa"ss@host more" tail ',
        "Cookie: abc http://u:x'y@h more\nnext ",
        f'{QUOTED[:3]}x password: "a {QUOTED} b" z ',
    ):
        for chunks in two_ways(text):
            check(chunks, REDACTOR)


def test_the_redaction_corpus_streams_as_a_whole():
    """Every case of the redaction tests, split everywhere, streams to its redaction."""
    (mark,) = test_redaction.test_text_redacts.pytestmark
    for text, expected in mark.args[1]:
        for chunks in two_ways(text):
            assert "".join(stream(chunks, DEFAULT)) == expected


def test_a_bound_on_the_hold_could_not_keep_the_invariant():
    """Why the hold has no size limit: until a run ends, its future decides its redaction."""
    run = "http://user:" + "x" * 5_000
    at, space = DEFAULT.text(run + "@host/ "), DEFAULT.text(run + " ")
    assert at == f"http://user:{R}@host/ "
    assert space == run + " "
    # All that the two futures share is "http://user:" (and the stream holds the whole run).
    s = StreamRedactor(DEFAULT)
    assert s.feed("see ") == "see "
    assert all(s.feed(c) == "" for c in run)
    assert s.held == len(run)
    assert s.feed("@host/ ") == at


def test_the_redacted_part_is_only_what_can_still_change():
    """Cost: each character reaches Redactor.text once, in the window since the last cut."""
    seen: list[int] = []

    class Counting(Redactor):
        __slots__ = ()

        def text(self, s: str) -> str:
            seen.append(len(s))
            return super().text(s)

    redactor = Counting(SECRETS)
    text = " ".join(["word", f"key={OPENAI}", PHRASE, "x\n"] * 500)
    chunks = [text[i : i + 5] for i in range(0, len(text), 5)]
    check(chunks, redactor)
    assert sum(seen[:-1]) == len(text)  # the stream's calls, then check's own for the whole


def test_ends_in_secret():
    redactor = Redactor(["abcdefgh", "with space inside"])
    assert redactor.ends_in_secret("x abcd", 6)
    assert redactor.ends_in_secret("x abcdefgh", 10)  # whole: REDACTED would meet what follows
    assert not redactor.ends_in_secret("x abcdefgh ", 11)
    assert redactor.ends_in_secret("say with space ", 15)
    assert not redactor.ends_in_secret("say without space ", 18)
    assert not redactor.ends_in_secret("abc", 0)
    assert not DEFAULT.ends_in_secret("abcdefgh", 8)


def test_a_key_in_letters_that_fold_is_redacted_without_a_hint_elsewhere():
    """re's IGNORECASE reads long s as s and dotted/dotless I as i: the cheap pre-test must
    too, or the redaction of one part would depend on a secret word in another part."""
    for key in ("pas\u017fword", "\u0131d_\u0130tem_pa\u017f\u017fword"):
        assert DEFAULT.text(f"{key}: hunter2 ") == f"{key}: {R} "
        assert DEFAULT.text(f"{key}: hunter2 token") == f"{key}: {R} token"
    key = "author\u0130zat\u0131on"
    assert DEFAULT.text(f"{key}: Basic abc\n") == f"{key}: Basic {R}\n"


FRAGMENTS = [
    *SECRETS,
    *(s[:5] for s in SECRETS),
    *(s[5:] for s in SECRETS),
    OPENAI,
    JWT,
    AWS_AKIA,
    GITHUB["ghp_"],
    "sk-",
    "Bearer",
    "bearer",
    "Basic",
    "Authorization",
    "Cookie",
    "password",
    "api_key",
    "token",
    "None",
    "str",
    "word",
    "the",
    "Hello,",
    "=",
    ":",
    ": ",
    "==",
    '"',
    "'",
    "\\",
    "@",
    "/",
    "#",
    ";",
    "(",
    "[",
    "]",
    "://",
    "https://u:p@",
    "hooks.slack.com/services/",
    "-----BEGIN ",
    "RSA ",
    "PRIVATE ",
    "KEY",
    "-----",
    "-----END ",
    RSA_BEGIN,
    RSA_END,
    PEM_BODY[:20],
    R,
    "abc123def456ghi789jk",
    "pas\u017fword",
    "\u00e9",
]
WHITESPACE = [" ", " ", "  ", "\n", "\t", "\r\n"]
texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(WHITESPACE), st.text(max_size=4)),
    max_size=40,
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(texts, st.data())
def test_any_chunking_streams_to_the_redaction_of_the_whole(text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    chunks = [text[a:b] for a, b in pairwise([0, *cuts, len(text)])]
    pieces = check(chunks)
    whole = REDACTOR.text(text)
    for emitted in before_flush(pieces):
        assert whole.startswith(emitted)
        assert not any(secret in emitted for secret in SECRETS)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_one_character_a_chunk_streams_to_the_redaction_of_the_whole(text):
    check(list(text))
