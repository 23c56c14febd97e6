"""Error classes: a model's failure by its HTTP status, a task's end by fleet's own words, and
the class a settle stores (the outcome's own first)."""

from __future__ import annotations

import pytest

from fleet.domain import error_classes as classes
from fleet.domain.runs import Outcome
from fleet.domain.values import TaskStatus


@pytest.mark.parametrize(
    ("status", "message", "cls"),
    [
        (429, "openai:gpt: rate limited", "rate_limit"),
        (None, "gpt: no model capacity within max_wait 30s", "rate_limit"),
        (401, "bad key", "auth"),
        (403, "forbidden", "auth"),
        (408, "request timeout", "timeout"),
        (None, "gpt: the request timed out after 60s", "timeout"),
        (500, "server error", "provider_error"),
        (503, "overloaded", "provider_error"),
        (None, "connection refused", "provider_error"),
        (400, "context too long", "model_error"),
    ],
)
def test_a_model_failure_is_classed_by_its_status(
    status: int | None, message: str, cls: str
) -> None:
    assert classes.of_model(status, message) == cls


@pytest.mark.parametrize(
    ("status", "error", "cls"),
    [
        ("succeeded", None, None),
        ("superseded", "interrupted by a newer message", None),
        ("cancelled", "cancelled by request", "cancelled"),
        ("cancelled", "dropped: queue full (max_queued; on_full = 'drop_oldest')", "cancelled"),
        ("failed", "step limit reached: 8 model steps without a final reply", "step_limit"),
        ("failed", "database: the server closed the connection", "internal"),
        ("failed", "internal error: KeyError: 'x'", "internal"),
        ("failed", "agent 'shop': tool 'x' cannot be imported", "config"),
        (
            "failed",
            "tool 'refund' (shop:refund) is gone: this release cannot load it",
            "tool_error",
        ),
        ("failed", "tenant acme's daily token budget (1000) is spent", "budget"),
        (
            "failed",
            "model openai:gpt failed: HTTP 429 rate limited (3 attempts by fleet)",
            "rate_limit",
        ),
        ("failed", "model openai:gpt failed: HTTP 503 (1 attempt by fleet)", "provider_error"),
        ("failed", "something nobody wrote", "internal"),
    ],
)
def test_an_end_is_classed_by_fleets_own_words(status: str, error: str | None, cls: str) -> None:
    assert classes.of_text(status, error) == cls


def test_a_settle_stores_the_outcomes_own_class_first() -> None:
    failed = Outcome(TaskStatus.FAILED, None, "model x failed: HTTP 500", {}, error_class="auth")
    assert classes.of_outcome(failed) == "auth"
    words = Outcome(TaskStatus.FAILED, None, "step limit reached: 2 model steps", {})
    assert classes.of_outcome(words) == "step_limit"
    assert classes.of_outcome(Outcome(TaskStatus.SUCCEEDED, "hi", None, {})) is None


def test_every_class_says_what_it_means_and_a_filter_names_one() -> None:
    assert set(classes.MEANING) == set(classes.CLASSES)
    assert classes.check("rate_limit") == "rate_limit"
    with pytest.raises(ValueError, match="one of rate_limit, timeout"):
        classes.check("slow")
