"""Table tests of reply delivery's pure rules (fleet.domain.delivery)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.domain import delivery as d

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIELDS: dict[str, Any] = {
    "reply": "Done: see #7",
    "task_id": "t-1",
    "labels": {"repo": "acme/shop", "issue": "7", "odd": "a/b?c#d"},
}


@pytest.mark.parametrize(
    ("template", "url", "expected"),
    [
        ("{reply}", False, "Done: see #7"),
        ("x {{literal}} {task_id}", False, "x {literal} t-1"),
        (
            "https://api.github.com/repos/{labels.repo}/issues/{labels.issue}/comments",
            True,
            "https://api.github.com/repos/acme%2Fshop/issues/7/comments",
        ),
        ("https://h/x/{labels.odd}", True, "https://h/x/a%2Fb%3Fc%23d"),
        ("https://h/{labels.odd}", False, "https://h/a/b?c#d"),
    ],
)
def test_render(template: str, url: bool, expected: str) -> None:
    assert d.render(template, FIELDS, url=url) == expected


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{missing}", "{missing}"),
        ("{labels.nope}", "{labels.nope}"),
        ("a } b", "lone '}'"),
        ("{ reply }", "lone '{'"),
    ],
)
def test_render_errors(template: str, error: str) -> None:
    with pytest.raises(d.TemplateError, match=error.replace("{", r"\{").replace("}", r"\}")):
        d.render(template, FIELDS)


@pytest.mark.parametrize(
    ("value", "shown"),
    [("..", "'..'"), (".", "'.'"), ("", "empty")],
)
def test_a_url_field_cannot_be_a_dot_segment_or_empty(value: str, shown: str) -> None:
    fields = {**FIELDS, "labels": {"n": value}}
    template = "https://api.github.com/repos/o/r/issues/{labels.n}/comments"
    with pytest.raises(d.TemplateError, match=rf"\{{labels\.n\}} is {shown}"):
        d.render(template, fields, url=True)
    # Outside a URL (a body) the value is text like any other.
    assert d.render("{labels.n}", fields) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("...", "https://h/x/.../y"),
        (".a", "https://h/x/.a/y"),
        ("a..", "https://h/x/a../y"),
        ("%2e%2e", "https://h/x/%252e%252e/y"),
        ("../..", "https://h/x/..%2F../y"),
    ],
)
def test_other_dotted_values_stay_one_segment(value: str, expected: str) -> None:
    assert d.render("https://h/x/{labels.n}/y", {"labels": {"n": value}}, url=True) == expected


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h.example/a/b?token=s3cret#frag", "https://h.example/a/b"),
        ("http://127.0.0.1:8080/r/1?x=1", "http://127.0.0.1:8080/r/1"),
        ("https://user@h.example/p", "https://h.example/p"),
        ("https://[::1]:9/p", "https://[::1]:9/p"),
        ("https://h.example", "https://h.example"),
        ("http://h:bad/", ""),
    ],
)
def test_shown_url(url: str, shown: str) -> None:
    assert d.shown_url(url) == shown


def test_render_body_keeps_structure() -> None:
    body = {"body": "{reply}", "n": 3, "tags": ["{labels.repo}", True], "deep": {"t": "{task_id}"}}
    assert d.render_body(body, FIELDS) == {
        "body": "Done: see #7",
        "n": 3,
        "tags": ["acme/shop", True],
        "deep": {"t": "t-1"},
    }


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("https://example.com/hook", None),
        ("http://127.0.0.1:8080/x?y=1", None),
        ("ftp://example.com/x", "scheme must be http or https, not 'ftp'"),
        ("file:///etc/passwd", "scheme must be http or https"),
        ("https://user:hunter2secret@example.com/", "credentials"),
        ("https:///path", "no host"),
        ("https://example.com:99999/", "cannot be parsed"),
        ("https://exa mple.com/", "whitespace"),
        ("https://e.com/" + "a" * 3000, "characters long"),
    ],
)
def test_check_url(url: str, error: str | None) -> None:
    if error is None:
        assert d.check_url(url) == url
        return
    with pytest.raises(d.UrlError, match=error) as exc:
        d.check_url(url)
    assert "hunter2" not in str(exc.value)


@pytest.mark.parametrize(
    ("status", "timed_out", "expected"),
    [
        (200, False, "sent"),
        (204, False, "sent"),
        (500, False, "retry"),
        (503, False, "retry"),
        (429, False, "retry"),
        (408, False, "retry"),
        (400, False, "failed"),
        (404, False, "failed"),
        (301, False, "failed"),
        (None, False, "retry"),
        (None, True, "unknown"),
    ],
)
def test_classify(status: int | None, timed_out: bool, expected: str) -> None:
    assert d.classify(status, timed_out=timed_out) == expected


URL = "https://user:pw@hooks.example.com/in/abc?token=secret#x"


@pytest.mark.parametrize(
    ("status", "detail", "expected"),
    [
        # issue 33: the receiver's body ("ok") was the whole error
        (500, "ok", "HTTP 500 from https://hooks.example.com/in/abc: ok"),
        (404, "", "HTTP 404 from https://hooks.example.com/in/abc"),
        (429, "  slow\n down  ", "HTTP 429 from https://hooks.example.com/in/abc: slow down"),
        (502, "x" * 200, "HTTP 502 from https://hooks.example.com/in/abc: " + "x" * 79 + "…"),
        # no answer: what went wrong says it (the URL is on the delivery)
        (None, "no connection within 5s", "no connection within 5s"),
    ],
)
def test_attempt_error_says_what_failed_then_the_answer(
    status: int | None, detail: str, expected: str
) -> None:
    assert d.attempt_error(status, URL, detail) == expected


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (100, 300.0)],
)
def test_backoff(attempt: int, expected: float) -> None:
    assert d.backoff(attempt) == expected


def test_backoff_counts_from_one() -> None:
    with pytest.raises(ValueError):
        d.backoff(0)


@pytest.mark.parametrize(
    ("result", "attempt", "max_attempts", "status", "wait"),
    [
        ("sent", 1, 3, "sent", None),
        ("sent", 3, 3, "sent", None),
        ("failed", 1, 3, "failed", None),
        ("retry", 1, 3, "pending", 1.0),
        ("retry", 2, 3, "pending", 2.0),
        ("retry", 3, 3, "failed", None),
        ("unknown", 1, 2, "pending", 1.0),
        ("unknown", 2, 2, "unknown", None),
        ("unknown", 1, 1, "unknown", None),
    ],
)
def test_after_attempt(
    result: d.AttemptResult, attempt: int, max_attempts: int, status: str, wait: float | None
) -> None:
    nxt = d.after_attempt(result, attempt, max_attempts, NOW)
    assert nxt.status == status
    assert nxt.retry_at == (None if wait is None else NOW + timedelta(seconds=wait))


@pytest.mark.parametrize(
    ("status", "claimed_until", "expected"),
    [
        ("pending", None, True),
        ("pending", NOW - timedelta(seconds=1), True),
        ("pending", NOW + timedelta(seconds=1), False),
        ("sent", None, False),  # never twice after a confirmed send
        ("failed", None, False),
        ("unknown", None, False),
    ],
)
def test_may_attempt(status: str, claimed_until: datetime | None, expected: bool) -> None:
    assert d.may_attempt(status, claimed_until=claimed_until, now=NOW) is expected


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], "sent"),
        (["sent"], "sent"),
        (["sent", "pending"], "pending"),
        (["sent", "unknown", "pending"], "unknown"),
        (["unknown", "failed"], "failed"),
    ],
)
def test_reply_status(statuses: list[str], expected: str) -> None:
    assert d.reply_status(statuses) == expected


@pytest.mark.parametrize(
    ("role", "delivery", "remember", "expected"),
    [
        ("assistant", "pending", "all", True),
        ("assistant", "sent", "delivered", True),
        ("assistant", "pending", "delivered", False),
        ("assistant", "unknown", "delivered", False),
        ("assistant", "failed", "delivered", False),
        ("user", "accepted", "delivered", True),
    ],
)
def test_remembered(role: str, delivery: str, remember: str, expected: bool) -> None:
    assert d.remembered(role, delivery, remember) is expected
