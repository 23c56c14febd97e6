"""Admission decisions: followup always queues, collect merges only into a still-queued task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from fleet.domain.admission import (
    Create,
    Merge,
    NewestTask,
    QueuePolicy,
    check_duplicate,
    decide,
)
from fleet.domain.values import TaskStatus
from fleet.errors import Conflict

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NEWEST_ID = UUID("00000000-0000-0000-0000-000000000001")
MAX = 100
FOLLOWUP = QueuePolicy()
COLLECT = QueuePolicy(mode="collect", debounce_s=2.0)


def newest(status: TaskStatus, input_bytes: int = 10) -> NewestTask:
    return NewestTask(id=NEWEST_ID, status=status, input_bytes=input_bytes)


def after(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def test_policy_defaults():
    assert QueuePolicy() == QueuePolicy(mode="followup", debounce_s=2.0)


@pytest.mark.parametrize(
    "policy,newest_task,input_bytes,expected",
    [
        # followup: always a new task, due now, whatever the newest task is doing
        (FOLLOWUP, None, 10, Create(NOW)),
        (FOLLOWUP, newest(TaskStatus.QUEUED), 10, Create(NOW)),
        (FOLLOWUP, newest(TaskStatus.RUNNING), 10, Create(NOW)),
        (FOLLOWUP, newest(TaskStatus.SUCCEEDED), 10, Create(NOW)),
        # followup ignores the debounce entirely
        (QueuePolicy("followup", 30.0), newest(TaskStatus.QUEUED), 10, Create(NOW)),
        # collect: the first task of a burst is debounced too
        (COLLECT, None, 10, Create(after(2))),
        # collect merges into a still-queued task and moves its start out
        (COLLECT, newest(TaskStatus.QUEUED), 10, Merge(NEWEST_ID, after(2))),
        (QueuePolicy("collect", 0.5), newest(TaskStatus.QUEUED), 10, Merge(NEWEST_ID, after(0.5))),
        (QueuePolicy("collect", 0.0), newest(TaskStatus.QUEUED), 10, Merge(NEWEST_ID, NOW)),
        # merged size exactly at the limit still merges; one byte more starts a new task
        (COLLECT, newest(TaskStatus.QUEUED, 60), 40, Merge(NEWEST_ID, after(2))),
        (COLLECT, newest(TaskStatus.QUEUED, 60), 41, Create(after(2))),
        (COLLECT, newest(TaskStatus.QUEUED, MAX), 1, Create(after(2))),
        # once the newest task left `queued`, the next submission starts a new task
        (COLLECT, newest(TaskStatus.LEASED), 10, Create(after(2))),
        (COLLECT, newest(TaskStatus.RUNNING), 10, Create(after(2))),
        (COLLECT, newest(TaskStatus.INTERRUPTED), 10, Create(after(2))),
        (COLLECT, newest(TaskStatus.SUCCEEDED), 10, Create(after(2))),
        (COLLECT, newest(TaskStatus.FAILED), 10, Create(after(2))),
        (COLLECT, newest(TaskStatus.CANCELLED), 10, Create(after(2))),
    ],
)
def test_decide(policy, newest_task, input_bytes, expected):
    assert decide(policy, newest_task, input_bytes, MAX, NOW) == expected


def keys(n: int, prefix: str = "k") -> frozenset[str]:
    return frozenset(f"{prefix}{i}" for i in range(n))


@pytest.mark.parametrize(
    "held,sent,merges",
    [
        (keys(0), keys(32), True),
        (keys(16), keys(16, "x"), True),  # 32 together: at the limit
        (keys(20), keys(20), True),  # the same keys: the union is 20
        (keys(16), keys(17, "x"), False),  # 33 together: a new task instead
        (keys(32), keys(1, "x"), False),
    ],
)
def test_collect_merges_only_while_the_labels_fit(held, sent, merges):
    queued = NewestTask(NEWEST_ID, TaskStatus.QUEUED, 1, held)
    result = decide(COLLECT, queued, 1, MAX, NOW, label_keys=sent)
    assert isinstance(result, Merge) is merges
    assert result.not_before == after(2)


@pytest.mark.parametrize("status", list(TaskStatus))
def test_collect_merges_only_into_queued(status):
    result = decide(COLLECT, newest(status), 1, MAX, NOW)
    assert isinstance(result, Merge) is (status == TaskStatus.QUEUED)


def test_check_duplicate_same_deployment_passes():
    assert check_duplicate("support", "support", "k1") is None


def test_check_duplicate_other_deployment_conflicts():
    with pytest.raises(Conflict) as info:
        check_duplicate("support", "triage", "k1")
    err = info.value
    assert err.field == "idempotencyKey"
    assert err.status == 409
    assert "'k1'" in err.message
    assert "'support'" not in err.message  # the other deployment may not be the caller's to know
    assert "'triage'" in err.message
