"""Secret redaction for everything fleet stores or logs.

Invariant: secrets never reach the store or the logs. Task inputs, outputs, transcripts, tool
arguments and log fields pass through a :class:`Redactor` first; it replaces the secret part of a
match with ``REDACTED`` and keeps the surrounding text, so records stay readable.

What counts as a secret:

* exact values the deployment knows (API keys from settings), given as ``extra_secrets``;
* well-known token shapes: OpenAI/Anthropic ``sk-…``, GitHub ``ghp_…``/``github_pat_…``, Slack
  ``xox?-…``, AWS ``AKIA…``/``ASIA…``, Google ``AIza…``, Stripe ``sk_live_…``, JWTs, ``Bearer …``;
* PEM private key blocks (an unterminated block is redacted to the end of the text);
* URL credentials (``scheme://user:PASSWORD@host``) and webhook URLs whose path is the
  credential (``hooks.slack.com/services/…``, ``discord.com/api/webhooks/<id>/…``);
* ``key=value`` / ``key: value`` where the key *ends* in a secret word (password, token, api_key,
  secret, authorization, cookie, …). Matching the ending keeps LLM usage fields such as
  ``max_tokens``, ``token_count`` and ``totalTokenCount`` intact.

Design note (speed, since this runs on every stored input and output):

* all patterns are compiled once at import; known secrets once per ``Redactor``;
* every pattern starts with a lookbehind, so a match can only begin where a token or key begins,
  and values are single character-class runs ending at a delimiter: each pass is one linear scan,
  with no nested quantifiers to backtrack catastrophically;
* cheap substring tests (``"://" in s``, ``"PRIVATE KEY" in s``, …) skip passes that cannot match;
* passes only ever insert ``REDACTED``, which every pattern accepts as an already-redacted value.
  One round of passes is the common case; when a round changed something, rounds repeat until
  nothing changes (bounded), which makes ``text`` idempotent by construction.

Trade-off: it errs towards redacting. ``Password: must be long`` loses ``must``, and code such as
``self.token = token`` loses the right-hand side; obvious code and type annotations
(``token: str``, ``password = getpass()``, ``token == other``) are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fleet.constants import REDACTED

__all__ = ["DEFAULT", "MIN_SECRET_CHARS", "Redactor", "is_secret_key"]

#: Known secrets shorter than this are ignored: redacting "admin" everywhere would ruin prose.
MIN_SECRET_CHARS = 8
#: Upper bound on redaction rounds; one or two are needed in practice.
_MAX_ROUNDS = 4

# -- patterns (compiled once) ----------------------------------------------------------------

#: PEM private keys, multiline; an unterminated block runs to the end of the text.
_PEM = re.compile(
    r"(?P<begin>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)"
    r"(?P<body>.*?)"
    r"(?P<end>-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

#: Password part of URL userinfo; the greedy run backs off to the last ``@`` before the path.
_URL_CREDENTIALS = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)(?P<secret>[^\s/?#]+)(?=@)"
)

#: Provider tokens with a recognisable prefix; the whole token is the secret.
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"  # OpenAI sk-/sk-proj-, Anthropic sk-ant-
    r"|gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub OAuth/app/user/server/refresh tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained personal access tokens
    r"|xox[abpors]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS access key ids
    r"|AIza[A-Za-z0-9_-]{35,}"  # Google API keys
    r"|[rs]k_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe secret and restricted keys
    r"|eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]+)*"  # JWT
    r")"
)

#: A bare ``Bearer <token>``; the token must look machine-made (16+ chars with a digit).
_BEARER = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<pre>Bearer[ \t]+)"
    r"(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*"
)

#: Key endings that make ``key=value`` secret, with the ``_``/``-``/nothing joins people use.
_KEY_ENDINGS = (
    *(f"api{join}key" for join in ("", "_", "-")),
    *(f"access{join}key" for join in ("", "_", "-")),
    *(f"private{join}key" for join in ("", "_", "-")),
    *(f"secret{join}key" for join in ("", "_", "-")),
    "passwd",
    "password",
    "passphrase",
    "secret",
    "token",
)
#: Header-like keys (Authorization, Cookie) whose unquoted value runs to the end of the line.
_HEADER_ENDINGS = ("authorization", "cookie")


#: Webhook URLs whose path is the credential (Slack incoming webhooks, Discord webhooks).
_WEBHOOK_PATH = re.compile(
    r"(?P<pre>hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|discord(?:app)?\.com/api/webhooks/[0-9]+/)"
    r"(?P<secret>[A-Za-z0-9_-][A-Za-z0-9_/-]*)"
)


def _ends_with(words: Iterable[str]) -> str:
    """One fixed-width lookbehind per word: checks a key's ending without rescanning the key."""
    return "|".join(f"(?<={re.escape(word)})" for word in words)


#: ``key=value`` / ``key: value`` / ``"key": "value"`` where the key ends in a secret word.
#: The key is one possessive run checked by lookbehinds (no backtracking inside keys); ``hdr``
#: is set for header-like keys, ``q`` for a quoted value (which runs to the closing quote).
#: Everything before the secret is kept in ``pre``, including an auth scheme such as ``Bearer``.
_ASSIGNMENT = re.compile(
    rf"""
    (?<![A-Za-z0-9_.-])
    (?P<pre>
        [A-Za-z0-9_.-]++
        (?: (?P<hdr>{_ends_with(_HEADER_ENDINGS)}) | {_ends_with(_KEY_ENDINGS)} )
        ["']?[ \t]*[:=](?![:=])[ \t]*          # not ==, :=, ::
        (?P<q>["'])?
        (?:(?:bearer|basic|digest|token)[ \t]+)?
    )
    (?P<secret>
        \[REDACTED\]
      | (?(q)
            (?:(?!(?P=q))[^\\\r\n] | \\.)+
          | (?(hdr)
                [^\s"'](?:[^\r\n"']*[^\s"'])?
              | (?!(?:none|null|true|false|str|bytes|secretstr|optional)\b)  # annotations
                (?![A-Za-z_][A-Za-z0-9_.]*[(\[])                            # code: f(...), d[...]
                [^\s"',;&)}}\]]+
            )
        )
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
#: Cheap pre-check on the lower-cased text: no secret word, no assignment pass.
_KEY_HINTS = ("pass", "secret", "token", "key", "authorization", "cookie")

#: Dict keys whose value is secret, compared on letters and digits only, by ending.
_SECRET_KEY_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "authorization",
    "cookie",
)
_NOT_ALNUM = re.compile(r"[^0-9a-z]")


def is_secret_key(key: str) -> bool:
    """Say whether a field name holds a secret (``db_password``, ``X-Api-Key``, ``Set-Cookie``).

    Compared on its ending so counters like ``max_tokens`` or ``token_count`` stay visible.
    """
    return _NOT_ALNUM.sub("", key.lower()).endswith(_SECRET_KEY_ENDINGS)


#: Letters ``re.IGNORECASE`` reads as ``i``, ``i``, ``s`` where ``str.lower`` does not.
_FOLDS = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"))


def _has_key_hint(s: str) -> bool:
    """Say whether ``s`` may hold a secret assignment; much cheaper than the full pattern.

    Never false where ``_ASSIGNMENT`` matches, else a match would be redacted or not depending
    on a hint elsewhere in the text (and text cut in pieces would not redact as a whole).
    """
    if not s.isascii():
        for odd, letter in _FOLDS:
            s = s.replace(odd, letter)
    low = s.lower()
    for hint in _KEY_HINTS:  # noqa: SIM110 (a loop: three times quicker than any() here)
        if hint in low:
            return True
    return False


def _keep_pre(match: re.Match[str]) -> str:
    """Replace only the secret: keep the ``pre`` group (key, separator, scheme, quote)."""
    return match["pre"] + REDACTED


def _pem(match: re.Match[str]) -> str:
    """Keep the armour lines so a reader still sees that a private key was there."""
    end = match["end"]
    return f"{match['begin']}\n{REDACTED}" + (f"\n{end}" if end else "")


class Redactor:
    """Replaces secrets in text and JSON-like values; immutable and safe to share across threads."""

    __slots__ = ("_ends", "_known", "_secret_count")

    _known: re.Pattern[str] | None
    _secret_count: int
    #: For each character, ``(secret, k)`` where the secret's ``k``-th character is that one.
    _ends: dict[str, tuple[tuple[str, int], ...]]

    def __init__(self, extra_secrets: Iterable[str] = ()) -> None:
        """Compile the known secrets once; short ones are skipped to spare ordinary words."""
        secrets = {
            s
            for s in extra_secrets
            if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS and s not in REDACTED
        }
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(secrets, key=lambda s: (-len(s), s))
        pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        object.__setattr__(self, "_known", pattern)
        object.__setattr__(self, "_secret_count", len(ordered))
        ends: dict[str, list[tuple[str, int]]] = {}
        for secret in ordered:
            for k, char in enumerate(secret, 1):
                ends.setdefault(char, []).append((secret, k))
        object.__setattr__(self, "_ends", {char: tuple(e) for char, e in ends.items()})

    def __setattr__(self, name: str, value: object) -> None:
        """Refuse changes: a shared redactor that could be altered would be a leak waiting."""
        raise AttributeError(f"Redactor is immutable; cannot set {name!r}")

    def __repr__(self) -> str:
        """Show how many secrets are known, never the secrets themselves."""
        return f"Redactor(<{self._secret_count} known secrets>)"

    def text(self, s: str) -> str:
        """Return ``s`` with every secret replaced by ``REDACTED``; idempotent and never raises."""
        for _ in range(_MAX_ROUNDS):
            redacted = self._round(s)
            if redacted == s:
                break
            s = redacted
        return s

    def _round(self, s: str) -> str:
        """Run every pass once, most specific first, so later passes see earlier redactions."""
        if self._known is not None:
            s = self._known.sub(REDACTED, s)
        if "PRIVATE KEY" in s:
            s = _PEM.sub(_pem, s)
        if "://" in s:
            s = _URL_CREDENTIALS.sub(_keep_pre, s)
        if "hooks.slack.com/" in s or "/api/webhooks/" in s:
            s = _WEBHOOK_PATH.sub(_keep_pre, s)
        s = _TOKENS.sub(REDACTED, s)
        if "Bearer" in s:
            s = _BEARER.sub(_keep_pre, s)
        if ("=" in s or ":" in s) and _has_key_hint(s):
            s = _ASSIGNMENT.sub(_keep_pre, s)
        return s

    def ends_in_secret(self, s: str, end: int) -> bool:
        """Say whether ``s[:end]`` ends with a known secret or the beginning of one.

        For a caller cutting text it redacts piece by piece (a stream): a cut at ``end`` could
        split a secret, or the secret ends at the cut and its ``REDACTED`` would join what
        follows. Patterns are not consulted, only ``extra_secrets``.
        """
        if end <= 0:
            return False
        for secret, k in self._ends.get(s[end - 1], ()):
            start = end - k
            if start >= 0 and s[start] == secret[0] and s[start:end] == secret[:k]:
                return True
        return False

    def json(self, obj: Any) -> Any:
        """Return a redacted copy of a JSON-like value; the input is never mutated.

        Strings (including dict keys) go through :meth:`text`; a value under a secret-looking key
        is replaced whole (``None`` and ``""`` are kept: there is nothing to hide and they help
        debugging); lists and tuples are mapped; other scalars are returned as they are.
        """
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                if isinstance(key, str):
                    hide = is_secret_key(key) and value is not None and value != ""
                    out[self.text(key)] = REDACTED if hide else self.json(value)
                else:
                    out[key] = self.json(value)
            return out
        if isinstance(obj, list):
            return [self.json(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.json(item) for item in obj)
        return obj


#: The redactor for code that knows no deployment secrets (patterns only).
DEFAULT = Redactor(())


_URL_PASSWORD = re.compile(r"(?P<pre>://[^/@:\s]*):[^/@\s]*@")
#: Query parameters that carry a secret: ``password`` (libpq, Redis) and ``sslpassword`` (libpq:
#: the passphrase of the client key).
_URL_QUERY_SECRET = re.compile(r"(?P<pre>[?&](?:ssl)?password=)[^&#\s]*", re.IGNORECASE)


def url_without_password(url: str) -> str:
    """``scheme://user:password@host…`` with the password masked, for messages and logs; also
    the ``password`` and ``sslpassword`` query parameters."""
    url = _URL_PASSWORD.sub(lambda m: f"{m.group('pre')}:{REDACTED}@", url)
    return _URL_QUERY_SECRET.sub(lambda m: f"{m.group('pre')}{REDACTED}", url)
