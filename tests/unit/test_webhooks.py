"""Webhook deliveries: JSON pointers, signature styles, and the field mapping (pure tables)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path

import pytest

from fleet.config import TriggerConfig
from fleet.domain import inputs
from fleet.domain import webhooks as w
from fleet.errors import InputError

SECRET = b"It's a Secret to Everybody"
BODY = b"Hello, World!"
#: GitHub's documented example: secret "It's a Secret to Everybody", payload "Hello, World!".
GITHUB_EXAMPLE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

DOC = {
    "a": {"b": [10, {"c": "deep"}]},
    "a/b": "slash",
    "m~n": "tilde",
    "": "empty key",
    "n": None,
    "num": 42,
    "flt": 3.0,
    "t": True,
}


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", DOC),
        ("/a/b/0", 10),
        ("/a/b/1/c", "deep"),
        ("/a~1b", "slash"),
        ("/m~0n", "tilde"),
        ("/", "empty key"),
        ("/n", None),
        ("/num", 42),
    ],
)
def test_resolve_pointer(pointer, expected):
    assert w.resolve_pointer(DOC, pointer) == expected


@pytest.mark.parametrize(
    ("pointer", "message"),
    [
        ("/missing", "has no key 'missing'"),
        ("/a/x", "object at '/a' has no key 'x'"),
        ("/a/b/2", "has 2 items, no index 2"),
        ("/a/b/01", "is not an array index"),
        ("/a/b/-", "is not an array index"),
        ("/num/x", "is a number, not an object or array"),
        ("/a~1b/x", "'/a~1b' is a string"),
    ],
)
def test_resolve_pointer_errors_name_the_place(pointer, message):
    with pytest.raises(w.PointerError, match=message) as info:
        w.resolve_pointer(DOC, pointer)
    assert info.value.field == pointer
    assert info.value.status == 422


def test_resolve_pointer_default_only_for_absent_members():
    assert w.resolve_pointer(DOC, "/a/x", default=None) is None
    assert w.resolve_pointer(DOC, "/a/b/9", default="d") == "d"
    with pytest.raises(w.PointerError):  # a wrong type is still an error
        w.resolve_pointer(DOC, "/num/x", default=None)


@pytest.mark.parametrize("pointer", ["a", "/a~2", "/~"])
def test_malformed_pointer(pointer):
    with pytest.raises(ValueError, match="JSON pointer"):
        w.pointer_tokens(pointer)


def test_github_example_from_the_docs():
    assert w.sign_github(SECRET, BODY) == GITHUB_EXAMPLE
    w.verify_github(SECRET, BODY, GITHUB_EXAMPLE)
    w.verify_github(SECRET, BODY, GITHUB_EXAMPLE.upper().replace("SHA256", "sha256"))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing X-Hub-Signature-256"),
        ("", "missing X-Hub-Signature-256"),
        ("757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=<hex"),
        ("sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=<hex"),
        ("sha256=" + "0" * 64, "does not match"),
        ("sha256=757107ea", "does not match"),
        ("sha256=ünïcødé", "does not match"),
    ],
)
def test_github_refusals(header, message):
    with pytest.raises(w.SignatureError, match=message) as info:
        w.verify_github(SECRET, BODY, header)
    assert info.value.status == 401


def test_github_signature_covers_the_body():
    with pytest.raises(w.SignatureError):
        w.verify_github(SECRET, BODY + b" ", GITHUB_EXAMPLE)
    with pytest.raises(w.SignatureError):
        w.verify_github(b"other secret", BODY, GITHUB_EXAMPLE)


NOW = 1_700_000_000


def stripe_v1(ts: int, body: bytes = BODY, secret: bytes = SECRET) -> str:
    return hmac.new(secret, f"{ts}.".encode() + body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    "header",
    [
        f"t={NOW},v1={stripe_v1(NOW)}",
        f"t={NOW},v1={'0' * 64},v1={stripe_v1(NOW)}",  # secret rotation: any v1 may match
        f"t={NOW}, v1={stripe_v1(NOW)}, v0=ignored",
        f"v1={stripe_v1(NOW - 299)},t={NOW - 299}",
        f"t={NOW + 299},v1={stripe_v1(NOW + 299)}",
    ],
)
def test_stripe_accepts(header):
    w.verify_stripe(SECRET, BODY, header, now=NOW, tolerance=300)


@pytest.mark.parametrize(
    ("header", "tolerance", "message"),
    [
        (None, 300, "missing Stripe-Signature"),
        (f"v1={stripe_v1(NOW)}", 300, "t=<unix time>"),
        (f"t={NOW}", 300, "t=<unix time>"),
        (f"t=soon,v1={stripe_v1(NOW)}", 300, "t=<unix time>"),
        (f"t={NOW},v1={'0' * 64}", 300, "does not match"),
        (f"t={NOW},v0={stripe_v1(NOW)}", 300, "t=<unix time>"),
        (f"t={NOW - 301},v1={stripe_v1(NOW - 301)}", 300, "more than 300s away"),
        (f"t={NOW + 301},v1={stripe_v1(NOW + 301)}", 300, "more than 300s away"),
        (f"t={NOW + 1},v1={stripe_v1(NOW)}", 300, "does not match"),  # t is signed too
    ],
)
def test_stripe_refusals(header, tolerance, message):
    with pytest.raises(w.SignatureError, match=message):
        w.verify_stripe(SECRET, BODY, header, now=NOW, tolerance=tolerance)


def test_stripe_tolerance_zero_skips_the_age_check():
    old = NOW - 10 * 365 * 86400
    w.verify_stripe(SECRET, BODY, f"t={old},v1={stripe_v1(old)}", now=NOW, tolerance=0)


def test_sign_stripe_round_trips():
    w.verify_stripe(SECRET, BODY, w.sign_stripe(SECRET, BODY, NOW), now=NOW, tolerance=300)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (w.sign_github(SECRET, BODY)[7:], True),
        (w.sign_github(SECRET, BODY), True),
        (" " + w.sign_github(SECRET, BODY)[7:].upper() + " ", True),
        ("0" * 64, False),
        (None, False),
    ],
)
def test_plain_hmac(header, ok):
    if ok:
        w.verify_hmac(SECRET, BODY, "X-Sig", header)
    else:
        with pytest.raises(w.SignatureError, match="X-Sig"):
            w.verify_hmac(SECRET, BODY, "X-Sig", header)


@pytest.mark.parametrize(
    ("style", "headers"),
    [
        ("github", {"x-hub-signature-256": w.sign_github(SECRET, BODY)}),
        ("stripe", {"stripe-signature": w.sign_stripe(SECRET, BODY, NOW)}),
        ("hmac", {"x-custom": w.sign_github(SECRET, BODY)[7:]}),
    ],
)
def test_verify_dispatches_on_style(style, headers):
    sig = w.SignatureConfig(style=style, secret_env="S", header="X-Custom")
    w.verify(sig, SECRET, BODY, headers, now=NOW)
    with pytest.raises(w.SignatureError):
        w.verify(sig, SECRET, BODY + b"!", headers, now=NOW)
    with pytest.raises(w.SignatureError):
        w.verify(sig, SECRET, BODY, {}, now=NOW)


def trigger(**kw) -> TriggerConfig:
    return TriggerConfig.model_validate({"name": "gh", "deployment": "chat", **kw})


ISSUE = {
    "action": "created",
    "issue": {"number": 7, "title": "Broken", "locked": False},
    "comment": {"body": "please fix", "user": {"login": "octo"}},
    "repository": {"full_name": "acme/app"},
}


def test_extract_github_issue_comment():
    t = trigger(
        input="/comment/body",
        conversation_key={"pointer": "/issue/number"},
        labels={"repo": "/repository/full_name", "locked": "/issue/locked", "gone": "/nope/x"},
        idempotency_header="X-GitHub-Delivery",
    )
    d = w.extract(t, ISSUE, {"x-github-delivery": "d-1"})
    assert d == w.Delivery(
        input="please fix",
        key="7",
        labels={"locked": "false", "repo": "acme/app"},
        idempotency_key="d-1",
    )


@pytest.mark.parametrize(
    ("ref", "headers", "key"),
    [
        ({"header": "X-Thread"}, {"x-thread": "t-1"}, "t-1"),
        ({"header": "X-Thread"}, {"x-thread": "  "}, None),
        ({"header": "X-Thread"}, {}, None),  # absent: a new conversation
        ({"pointer": "/issue/number"}, {}, "7"),
        ({"pointer": "/issue/title"}, {}, "Broken"),
        ({"pointer": "/pull_request/number"}, {}, None),  # absent: a new conversation
        ({"pointer": "/blank"}, {}, None),  # empty or white space: no key, as a header's
        ({"pointer": "/spaces"}, {}, None),
    ],
)
def test_extract_conversation_key(ref, headers, key):
    d = w.extract(trigger(conversation_key=ref), {**ISSUE, "blank": "", "spaces": "  \t"}, headers)
    assert d.key == key


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"x-github-delivery": "d-1"}, "d-1"),
        ({"x-github-delivery": " d-1 "}, "d-1"),
        ({}, None),  # absent: no idempotency
        ({"x-github-delivery": ""}, None),  # empty counts as absent, like the conversation key
        ({"x-github-delivery": "  \t"}, None),
    ],
)
def test_extract_idempotency_header(headers, key):
    t = trigger(input="/comment/body", idempotency_header="X-GitHub-Delivery")
    assert w.extract(t, ISSUE, headers).idempotency_key == key


#: The value at a trigger's ``input`` (the body itself when ``input = ""``) → the task's one
#: input part; None: refused (422). The table of docs/triggers.md says the same.
INPUT_RULE = [
    ({"n": 1}, {"type": "data", "data": {"n": 1}}),
    (ISSUE, {"type": "data", "data": ISSUE}),
    ({}, {"type": "data", "data": {}}),
    ("hello", {"type": "text", "text": "hello"}),
    ("[bold]x[/bold]", {"type": "text", "text": "[bold]x[/bold]"}),
    ("", None),
    (" \n\t", None),
    (42, {"type": "data", "data": {"value": 42}}),
    (-1.5, {"type": "data", "data": {"value": -1.5}}),
    (True, {"type": "data", "data": {"value": True}}),
    (False, {"type": "data", "data": {"value": False}}),
    (None, {"type": "data", "data": {"value": None}}),
    ([1, 2], {"type": "data", "data": {"value": [1, 2]}}),
    ([], {"type": "data", "data": {"value": []}}),
    ([{"a": 1}], {"type": "data", "data": {"value": [{"a": 1}]}}),
]


def _parts(delivery: w.Delivery) -> list[dict]:
    """The input parts the task will carry (what admission makes of the delivery's input)."""
    parts, _ = inputs.parse(delivery.input, 1 << 20)
    return [p.model_dump() for p in parts]


@pytest.mark.parametrize(("value", "part"), INPUT_RULE, ids=[repr(v)[:20] for v, _ in INPUT_RULE])
def test_input_rule_per_json_type(value, part):
    whole, pointed = trigger(input=""), trigger(input="/x")
    for t, document in ((whole, value), (pointed, {"x": value})):
        if part is None:
            with pytest.raises(InputError, match="empty") as info:
                _parts(w.extract(t, document, {}))
            assert info.value.field == (t.input or "body")
        else:
            assert _parts(w.extract(t, document, {})) == [part]


def _docs_input_table() -> list[tuple[str, str]]:
    """(first cell, second cell) of each row of the input table of docs/triggers.md."""
    section = (Path(__file__).parents[2] / "docs" / "triggers.md").read_text()
    header = "| value at `input` |"
    assert header in section, "docs/triggers.md has no input table"
    rows = []
    for line in (raw.strip() for raw in section.split(header, 1)[1].splitlines()[2:]):
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows.append((cells[0], cells[1]))
    return rows


def test_the_docs_input_table_is_the_rule():
    """Each row's example behaves as the row says, and every JSON type has a row."""
    seen = set()
    for value_cell, input_cell in _docs_input_table():
        value = json.loads(re.findall(r"`([^`]*)`", value_cell)[0])
        seen.add(type(value))
        rows = [p for v, p in INPUT_RULE if v == value and type(v) is type(value)]
        assert rows, f"docs example {value!r} is not a row of INPUT_RULE"
        expected = rows[0]
        if expected is None:
            assert "422" in input_cell, input_cell
        else:
            spans = [json.loads(s) for s in re.findall(r"`([^`]*)`", input_cell)]
            assert spans and spans[0] == expected, (input_cell, expected)
    assert seen == {dict, str, int, bool, type(None), list}


@pytest.mark.parametrize(
    ("kw", "document", "headers", "message"),
    [
        ({"input": "/comment/text"}, ISSUE, {}, "has no key 'text'"),
        ({"conversation_key": {"pointer": "/issue"}}, ISSUE, {}, "is an object"),
        ({"labels": {"who": "/comment/user"}}, ISSUE, {}, "label 'who'"),
        ({"labels": {"bad key!": "/action"}}, ISSUE, {}, "label key 'bad key!'"),
        ({"idempotency_header": "X-Id"}, ISSUE, {"x-id": "\x00"}, "idempotency key"),
    ],
)
def test_extract_refusals(kw, document, headers, message):
    with pytest.raises(InputError, match=message):
        w.extract(trigger(**kw), document, headers)


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"{", "not JSON"), (b"\xff\xfe", "not UTF-8"), (b"", "not JSON")],
)
def test_parse_body(body, message):
    with pytest.raises(InputError, match=message):
        w.parse_body(body)
    assert w.parse_body(b'{"a": 1}') == {"a": 1}
