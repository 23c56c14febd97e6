"""Redaction: secrets never reach the store or logs, and ordinary text passes through untouched."""

from __future__ import annotations

import copy
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.constants import REDACTED
from fleet.domain.redaction import DEFAULT, MIN_SECRET_CHARS, Redactor, is_secret_key

R = REDACTED

# Fake credentials with the real shapes (built by concatenation so scanners do not flag them).
OPENAI = "sk-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
OPENAI_PROJ = "sk-proj-" + "Zx9Cv8Bn7Mq6Wl5Er4Ty3Ui2Op1As0Df"
ANTHROPIC = "sk-ant-api03-" + "Q1w2E3r4T5y6U7i8O9p0-aSdFgHjKl_zXcVbNm"
GITHUB = {
    p: p + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8" for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
}
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"
SLACK = {p: p + "1234567890-0987654321-AbCdEfGhIjKl" for p in ("xoxa-", "xoxb-", "xoxp-", "xoxo-")}
AWS_AKIA = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_ASIA = "ASIA" + "Y34FZKBOKMUTVV7A"
GOOGLE = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
STRIPE_LIVE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_TEST = "sk_test_" + "51H8xYzAbCdEfGhIjKlMnOp"
STRIPE_RESTRICTED = "rk_live_" + "51H8xYzAbCdEfGhIjKlMnOp"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BODY = "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naGVsbG8gd29ybGQ="
RSA_BEGIN, RSA_END = "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"
PGP_BEGIN, PGP_END = "-----BEGIN PGP PRIVATE KEY BLOCK-----", "-----END PGP PRIVATE KEY BLOCK-----"


@pytest.mark.parametrize(
    "text,expected",
    [
        # Provider tokens: the whole token goes, the sentence stays.
        (f"key {OPENAI} here", f"key {R} here"),
        (f"OPENAI_KEY is {OPENAI_PROJ}.", f"OPENAI_KEY is {R}."),
        (f"anthropic: {ANTHROPIC}", f"anthropic: {R}"),
        *((f"token {tok} end", f"token {R} end") for tok in GITHUB.values()),
        (f"push with {GITHUB_PAT}", f"push with {R}"),
        *((f"slack {tok}", f"slack {R}") for tok in SLACK.values()),
        (f"id={AWS_AKIA},", f"id={R},"),
        (f"({AWS_ASIA})", f"({R})"),
        (f"maps key {GOOGLE}", f"maps key {R}"),
        (f"stripe {STRIPE_LIVE} / {STRIPE_TEST} / {STRIPE_RESTRICTED}", f"stripe {R} / {R} / {R}"),
        (f"jwt {JWT} ok", f"jwt {R} ok"),
        (f'{{"id_token":"x","other":"{JWT}"}}', f'{{"id_token":"{R}","other":"{R}"}}'),
        # Authorization-like text keeps the scheme.
        ("Authorization: Bearer abc.def-123", f"Authorization: Bearer {R}"),
        ("authorization: bearer abc", f"authorization: bearer {R}"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {R}"),
        (
            "Proxy-Authorization: Basic dXNlcjpwYXNz\nHost: x",
            f"Proxy-Authorization: Basic {R}\nHost: x",
        ),
        (
            "curl -H 'Authorization: Bearer abc123' https://api.example.com",
            f"curl -H 'Authorization: Bearer {R}' https://api.example.com",
        ),
        ('{"Authorization": "Bearer abc123"}', f'{{"Authorization": "Bearer {R}"}}'),
        ("Authorization: Digest opaque value", f"Authorization: Digest {R}"),
        ("Authorization: someRawToken", f"Authorization: {R}"),
        (f"Authorization: Bearer {JWT}", f"Authorization: Bearer {R}"),
        ("sent Bearer abcdefghij1234567890XYZ", f"sent Bearer {R}"),
        # Cookies: the whole header value, not just the first pair.
        ("Cookie: session=abc; csrf=def\nAccept: */*", f"Cookie: {R}\nAccept: */*"),
        ("Set-Cookie: id=a3fWa; Secure; HttpOnly", f"Set-Cookie: {R}"),
        # PEM private keys, multiline; armour lines are kept.
        (
            f"before\n{RSA_BEGIN}\n{PEM_BODY}\n{RSA_END}\nafter",
            f"before\n{RSA_BEGIN}\n{R}\n{RSA_END}\nafter",
        ),
        (
            f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
            f"-----BEGIN PRIVATE KEY-----\n{R}\n-----END PRIVATE KEY-----",
        ),
        (
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----",
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{R}\n-----END OPENSSH PRIVATE KEY-----",
        ),
        (
            f"-----BEGIN ENCRYPTED PRIVATE KEY-----{PEM_BODY}-----END ENCRYPTED PRIVATE KEY-----",
            f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{R}\n-----END ENCRYPTED PRIVATE KEY-----",
        ),
        (
            f"{PGP_BEGIN}\n{PEM_BODY}\n{PGP_END}",
            f"{PGP_BEGIN}\n{R}\n{PGP_END}",
        ),
        # A truncated block (no END line) is redacted to the end of the text.
        (
            f"log: -----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}",
            f"log: -----BEGIN EC PRIVATE KEY-----\n{R}",
        ),
        # Secret assignments.
        ("password=hunter2", f"password={R}"),
        ("password=hunter2 and more", f"password={R} and more"),
        ("PASSWORD: hunter2", f"PASSWORD: {R}"),
        ("db_password = 'hunter2'", f"db_password = '{R}'"),
        ('{"password": "hun\\"ter2", "user": "bob"}', f'{{"password": "{R}", "user": "bob"}}'),
        ("{'passwd': 'x y z'}", f"{{'passwd': '{R}'}}"),
        ("export GITHUB_TOKEN=abc123", f"export GITHUB_TOKEN={R}"),
        ("access_token=abc&refresh_token=def&page=2", f"access_token={R}&refresh_token={R}&page=2"),
        ("https://x.test/cb?token=abc123&x=1", f"https://x.test/cb?token={R}&x=1"),
        # '#' may be part of a password, so a URL fragment right after a secret goes too.
        ("https://x.test/cb?token=abc#frag", f"https://x.test/cb?token={R}"),
        ("client_secret: s3cr3t, scope: read", f"client_secret: {R}, scope: read"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", f"AWS_SECRET_ACCESS_KEY={R}"),
        ("api_key=abc; apikey=def; api-key=ghi", f"api_key={R}; apikey={R}; api-key={R}"),
        ("X-API-KEY: abc123", f"X-API-KEY: {R}"),
        ("private_key: abc", f"private_key: {R}"),
        ("SECRET_KEY=django-insecure", f"SECRET_KEY={R}"),
        ("secret=x", f"secret={R}"),
        ("--password=hunter2 --user=bob", f"--password={R} --user=bob"),
        ("passphrase: correct horse", f"passphrase: {R} horse"),
        ("token: Token abc123", f"token: Token {R}"),
        ('password="unterminated', f'password="{R}'),
        ("cookie_token=abc def", f"cookie_token={R} def"),
        ('token = "abc"  # hard-coded', f'token = "{R}"  # hard-coded'),
        # URL credentials: only the password.
        ("postgresql://user:pass@host/db", f"postgresql://user:{R}@host/db"),
        (
            "postgresql+psycopg://app:s3cret@db:5432/fleet",
            f"postgresql+psycopg://app:{R}@db:5432/fleet",
        ),
        ("redis://:p@ss@localhost:6379/0", f"redis://:{R}@localhost:6379/0"),
        ("amqp://guest:a:b:c@rabbit//", f"amqp://guest:{R}@rabbit//"),
        ("see (https://u:pw@example.com/x?y=1)", f"see (https://u:{R}@example.com/x?y=1)"),
        # Webhook URLs whose path is the credential.
        (
            "https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX",
            f"https://hooks.slack.com/services/{R}",
        ),
        (
            "post to https://discord.com/api/webhooks/1234/abc-DEF_token now",
            f"post to https://discord.com/api/webhooks/1234/{R} now",
        ),
        # Several kinds in one text.
        (
            f"url=https://me:pw@h key={OPENAI} password: x\nok",
            f"url=https://me:{R}@h key={R} password: {R}\nok",
        ),
    ],
)
def test_text_redacts(text, expected):
    assert DEFAULT.text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The token expired, please log in again.",
        "Count the tokens before sending.",
        "Use a token-based scheme; rotate the secret monthly.",
        "password reset link sent",
        "Your API key is in the dashboard.",
        "task-1234 finished after 3 steps",
        "550e8400-e29b-41d4-a716-446655440000",
        "conversation 7f9c2ba4-e88f-4ad3-9a0e-1c2d3e4f5a6b resumed",
        "sk-short1234",
        "sk-" + "a" * 19,
        "sk-learn-is-a-python-library-for-ml",  # long but no digit: a name, not a key
        "risk-assessment-2024-final-report-v2",  # 'sk-' only inside a word
        "ghp_short",
        "xoxb-123",
        "AKIA1234",
        "AKIAIOSFODNN7EXAMPLEEXTRA",  # 21 chars after AKIA: not an access key id
        "AIzaTooShort",
        "eyJhbGciOiJIUzI1NiJ9 is a JWT header only",
        "The bearer of bad news.",
        "Bearer tokens are described in RFC 6750.",
        "usage: max_tokens=4096 input_tokens: 12 output_tokens: 30",
        "token_count: 12, tokens: 5, totalTokenCount: 99, token_type=bearer",
        "def login(password: str, token: str | None = None) -> None:",
        "password = getpass()",
        'api_key = os.environ["OPENAI_API_KEY"]',
        "api_key = settings.get('api_key')",
        "if token == expected:",
        "token != other",
        "while (token := next(it)):",
        "password: None",
        "token: null",
        'password: ""',
        "password=",
        "std::token::Kind",
        "https://example.com:8443/path?x=1",
        "ssh://git@github.com:22/org/repo.git",
        "postgresql://user@host/db",
        "mailto:someone@example.com",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqh\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqh\n-----END CERTIFICATE-----",
        "Authorization:",
        "a = b: c = d",
        "ünïcödé ✓ 👩\u200d💻 text",
    ],
)
def test_text_leaves_ordinary_text_alone(text):
    assert DEFAULT.text(text) == text


@pytest.mark.parametrize(
    "secrets,text,expected",
    [
        (["my-settings-api-key"], "calling with my-settings-api-key now", f"calling with {R} now"),
        (["abcdefgh"], "abcdefgh abcdefgh", f"{R} {R}"),
        (["abcdefgh"], "xabcdefghx", f"x{R}x"),  # exact value, wherever it appears
        (["abcdefgh", "abcdefgh-longer"], "abcdefgh-longer", R),  # longest wins
        (["short", "1234567"], "short 1234567", "short 1234567"),  # under 8 chars: ignored
        (["", "admin"], "admin", "admin"),
        ([REDACTED, "REDACTED", "[REDACTED"], "x", "x"),  # would make redaction non-idempotent
        (iter(["from-a-generator"]), "from-a-generator", R),
        (["with.regex*chars+"], "a with.regex*chars+ b", f"a {R} b"),
        (["two words here"], "say two words here", f"say {R}"),
    ],
)
def test_known_secrets(secrets, text, expected):
    assert Redactor(secrets).text(text) == expected


def test_min_secret_chars():
    assert MIN_SECRET_CHARS == 8
    assert Redactor(["x" * (MIN_SECRET_CHARS - 1)]).text("x" * 7) == "x" * 7
    assert Redactor(["y" * MIN_SECRET_CHARS]).text("y" * 8) == R


@pytest.mark.parametrize(
    "key,secret",
    [
        ("password", True),
        ("PASSWORD", True),
        ("db_password", True),
        ("PGPASSWORD", True),
        ("passwd", True),
        ("passphrase", True),
        ("secret", True),
        ("client_secret", True),
        ("clientSecret", True),
        ("token", True),
        ("access_token", True),
        ("refreshToken", True),
        ("GITHUB_TOKEN", True),
        ("api_key", True),
        ("apikey", True),
        ("api-key", True),
        ("X-Api-Key", True),
        ("apiKey", True),
        ("Authorization", True),
        ("proxy-authorization", True),
        ("access_key", True),
        ("aws_secret_access_key", True),
        ("private_key", True),
        ("secret_key", True),
        ("cookie", True),
        ("Set-Cookie", True),
        ("max_tokens", False),
        ("input_tokens", False),
        ("token_count", False),
        ("totalTokenCount", False),
        ("token_type", False),
        ("password_hint", False),
        ("secrets_manager_arn", False),
        ("keyboard", False),
        ("name", False),
        ("", False),
    ],
)
def test_is_secret_key(key, secret):
    assert is_secret_key(key) is secret


@pytest.mark.parametrize(
    "obj,expected",
    [
        ("plain", "plain"),
        (f"key {OPENAI}", f"key {R}"),
        (42, 42),
        (1.5, 1.5),
        (True, True),
        (None, None),
        ({"password": "hunter2"}, {"password": R}),
        ({"Authorization": "Bearer x"}, {"Authorization": R}),
        ({"token": 12345}, {"token": R}),
        ({"api_key": {"nested": "dict"}}, {"api_key": R}),
        ({"cookies": ["a"], "Set-Cookie": ["a=1", "b=2"]}, {"cookies": ["a"], "Set-Cookie": R}),
        ({"password": None, "token": ""}, {"password": None, "token": ""}),  # nothing to hide
        (
            {"usage": {"max_tokens": 10, "input_tokens": 3, "totalTokenCount": 13}},
            {"usage": {"max_tokens": 10, "input_tokens": 3, "totalTokenCount": 13}},
        ),
        ({"note": "password=hunter2"}, {"note": f"password={R}"}),
        ({"args": [f"--key={OPENAI}", 3, None]}, {"args": [f"--key={R}", 3, None]}),
        ((OPENAI, "x"), (R, "x")),
        ([[[OPENAI]]], [[[R]]]),
        ({OPENAI: "value"}, {R: "value"}),  # string keys are redacted too
        ({1: OPENAI, None: "x"}, {1: R, None: "x"}),
        (
            {"messages": [{"role": "user", "content": f"my key is {ANTHROPIC}"}]},
            {"messages": [{"role": "user", "content": f"my key is {R}"}]},
        ),
        (
            {"tool": "http", "arguments": {"headers": {"X-Api-Key": "abc", "Accept": "json"}}},
            {"tool": "http", "arguments": {"headers": {"X-Api-Key": R, "Accept": "json"}}},
        ),
    ],
)
def test_json(obj, expected):
    assert DEFAULT.json(obj) == expected


def test_json_keeps_container_types():
    result = DEFAULT.json({"t": (1, 2), "l": [1, 2]})
    assert type(result["t"]) is tuple
    assert type(result["l"]) is list


def test_json_uses_known_secrets():
    redactor = Redactor(["deployment-secret-value"])
    assert redactor.json({"a": ["x deployment-secret-value y"]}) == {"a": [f"x {R} y"]}


def test_json_does_not_mutate_input():
    obj = {
        "password": "hunter2",
        "nested": {"token": "abc", "list": [f"key {OPENAI}", {"api_key": "x"}]},
        "tuple": (f"{JWT}",),
    }
    before = copy.deepcopy(obj)
    result = DEFAULT.json(obj)
    assert obj == before
    assert result is not obj
    assert result["nested"] is not obj["nested"]
    assert result["nested"]["list"] is not obj["nested"]["list"]


def test_redactor_hides_its_secrets_and_cannot_change():
    redactor = Redactor(["super-secret-value"])
    assert "super-secret-value" not in repr(redactor)
    assert "1 known secret" in repr(redactor)
    with pytest.raises(AttributeError):
        redactor._known = None


@pytest.mark.parametrize(
    "text",
    [
        "a" * 65_536,
        "password" * 8_192,
        "password=" * 7_281,
        "a://x:" * 10_922,
        "sk-" * 21_845,
        "eyJaaaaa." * 7_281,
        "Bearer " * 9_362,
        "-----BEGIN PRIVATE KEY-----" * 2_427,
        'token="' + "\\a" * 32_768,
        "cookie: " + " " * 65_536 + "x",
        ":" * 65_536,
        "http://u:" + "x" * 65_536,
    ],
)
def test_pathological_input_stays_linear(text):
    start = time.perf_counter()
    DEFAULT.text(text)
    assert time.perf_counter() - start < 1.0


# -- properties -----------------------------------------------------------------------------

#: Pieces that make secret-shaped text likely, mixed with arbitrary text by the strategies.
FRAGMENTS = [
    OPENAI,
    JWT,
    AWS_AKIA,
    GITHUB["ghp_"],
    "sk-",
    "eyJ",
    "Bearer ",
    "Authorization: ",
    "Cookie: ",
    "password",
    "token",
    "api_key",
    "=",
    ": ",
    "==",
    '"',
    "'",
    "\\",
    "\n",
    " ",
    "@",
    ":",
    "/",
    "://",
    "https://u:p@",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    REDACTED,
    "[",
    "]",
    "(",
    "None",
    "abc123",
]
secretish_text = st.lists(
    st.one_of(st.text(max_size=8), st.sampled_from(FRAGMENTS)), max_size=24
).map("".join)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), secretish_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(
            st.one_of(secretish_text, st.sampled_from(FRAGMENTS)), children, max_size=4
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=500)
@given(st.text())
def test_text_is_idempotent_on_arbitrary_text(text):
    once = DEFAULT.text(text)
    assert DEFAULT.text(once) == once


@settings(max_examples=1000)
@given(secretish_text)
def test_text_is_idempotent_on_secret_shaped_text(text):
    once = DEFAULT.text(text)
    assert isinstance(once, str)
    assert DEFAULT.text(once) == once


@settings(max_examples=300)
@given(
    st.text(max_size=40),
    st.text(
        alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=MIN_SECRET_CHARS, max_size=30
    ),
    st.text(max_size=40),
)
def test_known_secret_never_survives(prefix, secret, suffix):
    redactor = Redactor([secret])
    once = redactor.text(prefix + secret + suffix)
    assert secret not in once
    assert redactor.text(once) == once


@settings(max_examples=300)
@given(json_values)
def test_json_is_idempotent_and_does_not_mutate(obj):
    before = copy.deepcopy(obj)
    once = DEFAULT.json(obj)
    assert obj == before
    assert DEFAULT.json(once) == once
