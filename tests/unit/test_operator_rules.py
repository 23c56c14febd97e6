"""The operator UI's pure rules: a conversation's state, why it is stuck, the listing order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from fleet.domain import operator as op

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("pending", "state", "reason"),
    [
        (op.Pending(), "idle", ""),
        (op.Pending(waiting=2, oldest_due=ago(10)), "queued", ""),
        (op.Pending(waiting=1, oldest_due=NOW + timedelta(seconds=30)), "queued", ""),  # not due
        (op.Pending(waiting=1, oldest_due=ago(61)), "stuck", "due 61s ago, not started"),
        (op.Pending(waiting=1, oldest_due=ago(600)), "stuck", "due 10m ago, not started"),
        (
            op.Pending(waiting=1, oldest_due=ago(5), interrupted=1),
            "stuck",
            "interrupted, waiting 5s for a retry",
        ),
        (op.Pending(waiting=3, oldest_due=ago(900), running_since=ago(30)), "running", ""),
        (op.Pending(running_since=ago(901)), "stuck", "running for 15m"),
        # a task waiting for an approval, a delegate or a time, and what queued behind it
        (op.Pending(waiting=2, resumes_at=NOW + timedelta(hours=24)), "waiting", ""),
        (op.Pending(waiting=1, oldest_due=ago(5), resumes_at=ago(5)), "queued", ""),  # resumes
        (
            op.Pending(waiting=2, oldest_due=ago(900), resumes_at=ago(180)),
            "stuck",
            "due 3m ago, not resumed",
        ),
        (
            op.Pending(waiting=1, resumes_at=NOW + timedelta(hours=1), running_since=ago(3)),
            "running",
            "",
        ),
        (op.Pending(running_since=ago(3 * 3600)), "stuck", "running for 3.0h"),
    ],
)
def test_state(pending: op.Pending, state: str, reason: str) -> None:
    got, why, _ = op.state(pending, NOW)
    assert (got, why) == (state, reason)


def test_listing_puts_the_longest_stuck_first_then_running_queued_idle() -> None:
    def row(name: str, pending: op.Pending, updated: float) -> op.ConversationRow:
        st, reason, stuck = op.state(pending, NOW)
        return op.ConversationRow(
            uuid.uuid4(), "d", "api", name, ago(updated), pending, st, reason, stuck
        )

    rows = [
        row("idle-new", op.Pending(), 1),
        row("queued", op.Pending(waiting=1, oldest_due=ago(5)), 50),
        row("stuck-short", op.Pending(waiting=1, oldest_due=ago(70)), 5),
        row("running", op.Pending(running_since=ago(3)), 60),
        row("stuck-long", op.Pending(running_since=ago(2000)), 500),
        row("idle-old", op.Pending(), 100),
        row("waiting", op.Pending(waiting=1, resumes_at=NOW + timedelta(hours=1)), 2),
    ]
    ordered = [r.key for r in sorted(rows, key=op.listing_order)]
    assert ordered == [
        "stuck-long",
        "stuck-short",
        "running",
        "queued",
        "waiting",
        "idle-new",
        "idle-old",
    ]


def test_figures_throughput_is_per_minute_over_the_window() -> None:
    assert op.DeploymentFigures("d", finished_recently=120).per_minute == 2.0
