"""Reply delivery (pure): templates, outbound URL checks, attempt outcomes, backoff, states.

A delivery is one reply sent to one place (a ``[reply]`` URL, an A2A push-notification config).
Its journal row is ``pending`` until an attempt settles it: ``sent`` (the receiver answered
2xx), ``failed`` (a permanent refusal, or retries used up on errors) or ``unknown`` (the last
attempt timed out: the receiver may have it). A retry waits ``backoff(attempt)`` and sends the
same ``Idempotency-Key``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from fleet.constants import (
    DELIVERY_BACKOFF_CAP_S,
    DELIVERY_BACKOFF_S,
    DELIVERY_ERROR_ANSWER_CHARS,
    MAX_DELIVERY_URL_CHARS,
)

Status = Literal["pending", "sent", "failed", "unknown"]
#: What one attempt came to: ``retry`` is a failure worth trying again (5xx, 429, 408, no
#: connection); ``unknown`` a timeout after the request went out.
AttemptResult = Literal["sent", "retry", "failed", "unknown"]
STATUSES: tuple[Status, ...] = ("pending", "sent", "failed", "unknown")
FINAL: frozenset[str] = frozenset({"sent", "failed", "unknown"})
#: ``remember``: which replies later runs of the conversation see as history.
REMEMBER = ("all", "delivered")
#: HTTP answers worth another attempt besides 5xx.
_RETRY_STATUS = frozenset({408, 425, 429})


class TemplateError(ValueError):
    """A template names a field the delivery does not have, or is malformed."""


class UrlError(ValueError):
    """An outbound URL that fleet will not call; the message never repeats credentials."""


# -- templates ---------------------------------------------------------------------------------

_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_./-]+)?)\}|[{}]")


def template_fields(template: str) -> tuple[str, ...]:
    """The fields ``template`` names (TemplateError for a lone brace)."""
    found: list[str] = []
    for m in _FIELD.finditer(template):
        token = m.group(0)
        if token in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise TemplateError(
                f"a lone {token!r} at character {m.start()}: write a field as {{name}}, "
                "a brace as {{ or }}"
            )
        found.append(m.group(1))
    return tuple(found)


def _lookup(fields: Mapping[str, Any], name: str) -> str:
    head, _, rest = name.partition(".")
    value: Any = fields.get(head)
    if rest:
        value = value.get(rest) if isinstance(value, Mapping) else None
    if value is None:
        raise TemplateError(f"the template names {{{name}}}, which this delivery does not have")
    return str(value)


#: Field values a URL refuses: empty, or a path segment that names another path.
_DOT_SEGMENTS = frozenset({"", ".", ".."})


def render(template: str, fields: Mapping[str, Any], *, url: bool = False) -> str:
    """``{name}`` and ``{labels.key}`` replaced by the delivery's fields; ``{{``/``}}`` are braces.

    In a URL (``url=True``) each value is percent-encoded, so a field cannot add a path, a query
    or a host; an empty value, ``.`` or ``..`` is a TemplateError (it would change the path).
    """
    template_fields(template)  # a lone brace is an error, not text

    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = _lookup(fields, m.group(1))
        if not url:
            return value
        if value in _DOT_SEGMENTS:
            # A client removes "." and ".." from a path: the request would go elsewhere.
            shown = "empty" if not value else repr(value)
            raise TemplateError(
                f"{{{m.group(1)}}} is {shown}, which cannot stand in a URL (it would move the "
                "delivery to another path)"
            )
        return quote(value, safe="")

    return _FIELD.sub(one, template)


def render_body(template: Any, fields: Mapping[str, Any]) -> Any:
    """A JSON body template: every string in it rendered, the structure kept; ``"{reply}"``
    alone as a value keeps the field's own type (a label stays a string, the reply text)."""
    if isinstance(template, str):
        return render(template, fields)
    if isinstance(template, Mapping):
        return {k: render_body(v, fields) for k, v in template.items()}
    if isinstance(template, list):
        return [render_body(v, fields) for v in template]
    return template


#: The body a ``[reply]`` sends when it gives none.
DEFAULT_BODY: dict[str, Any] = {
    "reply": "{reply}",
    "task": "{task_id}",
    "conversation": "{conversation}",
    "deployment": "{deployment}",
    "status": "{status}",
}


# -- outbound URLs -----------------------------------------------------------------------------


def check_url(url: str) -> str:
    """An outbound URL fleet may call: ``http``/``https``, a host, no credentials in it.

    The error names what is wrong without repeating the URL (it may hold a secret).
    """
    if len(url) > MAX_DELIVERY_URL_CHARS:
        raise UrlError(f"the URL is {len(url)} characters long; at most {MAX_DELIVERY_URL_CHARS}")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise UrlError("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise UrlError("the URL cannot be parsed (check its host and port)") from None
    if parts.scheme not in ("http", "https"):
        shown = parts.scheme if parts.scheme.isalnum() and len(parts.scheme) < 12 else "?"
        raise UrlError(f"the URL's scheme must be http or https, not {shown!r}")
    if "@" in parts.netloc:
        raise UrlError("the URL holds credentials (user:password@); send them as a header")
    if not parts.hostname:
        raise UrlError("the URL has no host")
    return url


def shown_url(url: str) -> str:
    """Where a delivery went, as stored and shown: ``scheme://host[:port]/path`` (its query,
    fragment and any user info left out: they may hold a secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{parts.path}"


# -- attempts ----------------------------------------------------------------------------------


def attempt_error(http_status: int | None, url: str, detail: str) -> str:
    """A failed attempt's error: what failed first, then the start of the receiver's answer
    (``HTTP 500 from https://host/path: ok``); without an answer, ``detail`` says what went
    wrong (no connection, no answer in time)."""
    if http_status is None:
        return detail
    head = f"HTTP {http_status} from {shown_url(url)}"
    said = " ".join(detail.split())
    if len(said) > DELIVERY_ERROR_ANSWER_CHARS:
        said = said[: DELIVERY_ERROR_ANSWER_CHARS - 1] + "…"
    return f"{head}: {said}" if said else head


def classify(http_status: int | None, *, timed_out: bool = False) -> AttemptResult:
    """What one attempt came to: an answer's status code, or none (no connection / timeout).

    A timeout counts as ``unknown`` (the request may have arrived); no connection at all as
    worth a retry; 2xx sent; 408, 425, 429 and 5xx worth a retry; any other answer a refusal.
    """
    if http_status is None:
        return "unknown" if timed_out else "retry"
    if 200 <= http_status < 300:
        return "sent"
    if http_status >= 500 or http_status in _RETRY_STATUS:
        return "retry"
    return "failed"


def backoff(
    attempt: int, *, base_s: float = DELIVERY_BACKOFF_S, cap_s: float = DELIVERY_BACKOFF_CAP_S
) -> float:
    """Seconds to wait after attempt ``attempt`` (1, 2, …) failed: base * 2^(attempt-1), capped."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    return float(min(cap_s, base_s * 2 ** min(attempt - 1, 32)))


@dataclass(frozen=True, slots=True)
class Next:
    """Where a delivery stands after an attempt: its status and, if pending, when to try again."""

    status: Status
    retry_at: datetime | None = None


def after_attempt(
    result: AttemptResult,
    attempt: int,
    max_attempts: int,
    now: datetime,
    *,
    base_s: float = DELIVERY_BACKOFF_S,
    cap_s: float = DELIVERY_BACKOFF_CAP_S,
) -> Next:
    """The delivery's status after attempt ``attempt`` of ``max_attempts`` came to ``result``.

    ``sent`` and ``failed`` end it at once; ``retry`` and ``unknown`` try again after the
    backoff while attempts are left, else end it ``failed`` / ``unknown``.
    """
    if result == "sent":
        return Next("sent")
    if result == "failed":
        return Next("failed")
    if attempt < max_attempts:
        wait = backoff(attempt, base_s=base_s, cap_s=cap_s)
        return Next("pending", now + timedelta(seconds=wait))
    return Next("unknown" if result == "unknown" else "failed")


def may_attempt(status: str, *, claimed_until: datetime | None, now: datetime) -> bool:
    """May an attempt start now? Only a ``pending`` delivery, never one confirmed ``sent``, and
    not while another attempt's claim holds."""
    return status == "pending" and (claimed_until is None or claimed_until <= now)


# -- the reply's status in the conversation ----------------------------------------------------

#: Worst first: a reply's status is the worst of its deliveries'.
_SEVERITY = {"failed": 0, "unknown": 1, "pending": 2, "sent": 3}


def reply_status(statuses: Iterable[str]) -> Status:
    """A stored reply's ``delivery``: ``sent`` when every delivery of it is (or it has none —
    it went back to whoever asked), else the worst one's status."""
    worst: Status = "sent"
    for s in statuses:
        if s in _SEVERITY and _SEVERITY[s] < _SEVERITY[worst]:
            worst = s  # type: ignore[assignment]
    return worst


def remembered(role: str, delivery: str, remember: str) -> bool:
    """Does a later run see this message? ``remember = "delivered"`` keeps replies that are not
    ``sent`` out; user input (``accepted``) always counts."""
    if remember == "all" or role != "assistant":
        return True
    return delivery == "sent"


@dataclass(frozen=True, slots=True)
class Record:
    """A delivery's journal row as the store returns it."""

    id: uuid.UUID
    task_id: uuid.UUID
    target: str
    kind: str
    url: str | None
    status: str
    attempts: int
    max_attempts: int
    next_at: datetime | None
    claim: str | None
    claimed_until: datetime | None
    journal: tuple[dict[str, Any], ...]
    error: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Target:
    """A place a task's reply goes, before its journal row exists."""

    #: ``reply:<config file>`` or ``push:<config id>``.
    target: str
    kind: Literal["reply", "push"]
    max_attempts: int


#: Attempts of an A2A push notification.
PUSH_ATTEMPTS = 5


def push_target(config_id: str) -> Target:
    """The journal target of an A2A push-notification config."""
    return Target(f"push:{config_id}", "push", PUSH_ATTEMPTS)


@dataclass(frozen=True, slots=True)
class PushConfig:
    """An A2A push-notification config (the caller's URL, token and authentication)."""

    task_id: uuid.UUID
    id: str
    url: str
    token: str | None = None
    scheme: str | None = None
    credentials: str | None = None
    #: The caller that set it (None: set before owners were kept; no caller reads it).
    owner: str | None = None
