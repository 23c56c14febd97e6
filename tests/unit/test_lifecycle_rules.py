"""The lifecycle's pure decisions: which conversation an operator names, whether reset/delete may
go ahead, ages for --older-than, what the stored cap and batches take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.domain import lifecycle as rules
from fleet.domain.keys import ConversationRef
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict, InputError

K200 = "k" * 200


@pytest.mark.parametrize(
    ("kind", "value", "ref"),
    [
        ("pool", "ticket-4711", ConversationRef("api", "ticket-4711")),
        ("pool", "api:ticket-4711", ConversationRef("api", "ticket-4711")),
        ("pool", "webhook:orders:4711", ConversationRef("webhook:orders", "4711")),
        ("task", "a2a:partner:7", ConversationRef("a2a:partner", "7")),
        ("pool", "api:a:b", ConversationRef("api", "a:b")),
        ("pool", "webhook:k", ConversationRef("api", "webhook:k")),  # no trigger: a bare key
        ("pool", "Grüße-🙂", ConversationRef("api", "Grüße-🙂")),  # multibyte
        ("pool", K200, ConversationRef("api", K200)),  # at the limit
        ("singleton", "anything", ConversationRef("deployment", "singleton")),
    ],
)
def test_operator_ref(kind: str, value: str, ref: ConversationRef) -> None:
    assert rules.operator_ref(kind, value) == ref  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "1-200 characters"),
        ("api:", "1-200 characters"),
        (K200 + "k", "1-200 characters"),  # above the limit
        ("tab\there", "control characters"),
        ("nul\x00", "control characters"),
        ("del\x7f", "control characters"),
        ("a2a:bad name:k", "scope"),
        ("deployment:singleton", "only a singleton deployment"),
    ],
)
def test_operator_ref_refuses(value: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        rules.operator_ref("pool", value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("12h", 43200.0),
        ("90m", 5400.0),
        ("45s", 45.0),
        ("1.5d", 1.5 * 86400),
        ("7", 7 * 86400.0),  # a bare number is days
        (" 2d ", 2 * 86400.0),
        ("3650d", 3650 * 86400.0),  # at the maximum
    ],
)
def test_parse_age(value: str, seconds: float) -> None:
    assert rules.parse_age(value) == seconds


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("soon", "not an age"),
        ("-1d", "not an age"),
        ("1w", "not an age"),
        ("0", "more than 0"),
        ("0s", "more than 0"),
        ("3651d", "at most 3650d"),  # above the maximum
        ("", "not an age"),
    ],
)
def test_parse_age_refuses(value: str, says: str) -> None:
    with pytest.raises(InputError, match=says):
        rules.parse_age(value)


@pytest.mark.parametrize(
    ("busy", "cancel_running", "go"),
    [
        (rules.Busy(), False, "go"),
        (rules.Busy(), True, "go"),
        (rules.Busy(queued=3), False, "go"),  # queued tasks do not block; they get cancelled
        (rules.Busy(active="t1"), True, "stop_first"),
        (rules.Busy(active="t1", resuming=True), True, "stop_first"),
    ],
)
def test_guard(busy: rules.Busy, cancel_running: bool, go: str) -> None:
    assert rules.guard("reset", "api:k", busy, cancel_running=cancel_running) == go


@pytest.mark.parametrize("action", ["reset", "delete"])
def test_guard_refuses_a_running_task_naming_the_way_out(action: str) -> None:
    with pytest.raises(Conflict) as err:
        rules.guard(action, "api:k", rules.Busy(active="t1"), cancel_running=False)  # type: ignore[arg-type]
    assert f"{action} refused" in err.value.message and "--cancel-running" in err.value.message
    assert "t1" in err.value.message and "\n" not in err.value.message


@pytest.mark.parametrize(
    ("status", "busy"),
    [
        (TaskStatus.QUEUED, False),  # not started: a reset cancels it
        (TaskStatus.LEASED, True),
        (TaskStatus.RUNNING, True),
        (TaskStatus.INTERRUPTED, True),  # handed back mid-run: its steps' effects are done
        (TaskStatus.SUCCEEDED, False),
        (TaskStatus.FAILED, False),
        (TaskStatus.CANCELLED, False),
    ],
)
def test_busy(status: TaskStatus, busy: bool) -> None:
    assert rules.busy(status) is busy


@pytest.mark.parametrize(
    ("run", "conversation", "fate"),
    [(0, 0, "requeue"), (3, 3, "requeue"), (0, 1, "cancel")],  # reset since the run began
)
def test_inbox_fate(run: int, conversation: int, fate: str) -> None:
    assert rules.inbox_fate(run, conversation) == fate


def test_guard_refuses_a_handed_back_task_saying_so() -> None:
    with pytest.raises(Conflict, match="handed back mid-run, waiting to resume"):
        rules.guard("delete", "api:k", rules.Busy("t1", resuming=True), cancel_running=False)


@pytest.mark.parametrize(
    ("stored", "cap", "excess"),
    [(0, 6, 0), (5, 6, 0), (6, 6, 0), (7, 6, 1), (10_000, 1_000, 9_000)],
)
def test_over_cap(stored: int, cap: int, excess: int) -> None:
    assert rules.over_cap(stored, cap) == excess


@pytest.mark.parametrize(
    ("total", "size", "sizes"),
    [
        (0, 500, []),
        (1, 500, [1]),
        (500, 500, [500]),
        (501, 500, [500, 1]),
        (1200, 500, [500, 500, 200]),
    ],
)
def test_batches(total: int, size: int, sizes: list[int]) -> None:
    assert rules.batches(total, size) == sizes


def test_batches_need_room() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        rules.batches(3, 0)


def test_retention_cutoff_and_notice() -> None:
    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    assert rules.retention_cutoff(now, 86400) == now - timedelta(days=1)
    said = rules.fresh_notice("api:k", now)
    assert "api:k" in said and "2026-12-05T12:00:00+00:00" in said and "fresh" in said
    assert rules.default_retention_s() == 30 * 86400
