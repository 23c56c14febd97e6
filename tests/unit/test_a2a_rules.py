"""A2A decisions: state mapping, message parts, fleet.labels metadata, the blocking wait."""

from __future__ import annotations

import math

import pytest

from fleet.domain import a2a
from fleet.domain.values import TaskStatus
from fleet.errors import InputError


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (TaskStatus.QUEUED, "submitted"),
        (TaskStatus.LEASED, "submitted"),
        (TaskStatus.RUNNING, "working"),
        (TaskStatus.INTERRUPTED, "working"),
        (TaskStatus.SUCCEEDED, "completed"),
        (TaskStatus.FAILED, "failed"),
        (TaskStatus.CANCELLED, "canceled"),
    ],
)
def test_state(status, state):
    assert a2a.state(status) == state


def test_every_status_has_a_state():
    assert set(a2a.STATES) == set(TaskStatus)


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ([{"text": "hi"}], [{"type": "text", "text": "hi"}]),
        ([{"data": {"a": 1}}], [{"type": "data", "data": {"a": 1}}]),
        ([{"data": [1, 2]}], [{"type": "data", "data": {"value": [1, 2]}}]),
        (
            [{"text": "a", "metadata": {"x": 1}}, {"data": {"b": 2}}],
            [{"type": "text", "text": "a"}, {"type": "data", "data": {"b": 2}}],
        ),
    ],
)
def test_input_parts(parts, expected):
    assert a2a.input_parts(parts) == expected


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "no parts"),
        ([{"url": "https://x/y.pdf"}], "part 0 is a file"),
        ([{"text": "ok"}, {"raw": "AAAA"}], "part 1 is a file"),
        ([{"metadata": {}}], "part 0 has no content"),
    ],
)
def test_input_parts_refusals(parts, message):
    with pytest.raises(InputError, match=message):
        a2a.input_parts(parts)


@pytest.mark.parametrize(
    ("request_meta", "message_meta", "expected"),
    [
        (None, None, {}),
        ({"other": 1}, {}, {}),
        ({"fleet.labels": {"a": "1"}}, None, {"a": "1"}),
        (
            {"fleet.labels": {"a": "1", "b": "r"}},
            {"fleet.labels": {"b": "m"}},
            {"a": "1", "b": "m"},
        ),
    ],
)
def test_labels(request_meta, message_meta, expected):
    assert a2a.labels(request_meta, message_meta) == expected


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"fleet.labels": ["a"]}, "must be an object"),
        ({"fleet.labels": {"a": 1.0}}, "must be strings"),
        ({"fleet.labels": {"bad key": "v"}}, "label key 'bad key'"),
    ],
)
def test_labels_refusals(meta, message):
    with pytest.raises(InputError, match=message):
        a2a.labels(None, meta)


@pytest.mark.parametrize(
    ("immediately", "request_meta", "message_meta", "expected"),
    [
        (True, {"fleet.wait": 10}, None, 0.0),
        (False, None, None, a2a.DEFAULT_WAIT_S),
        (False, {"fleet.wait": 5}, None, 5.0),
        (False, {"fleet.wait": 5}, {"fleet.wait": 0}, 0.0),
        (False, None, {"fleet.wait": 60}, 60.0),
    ],
)
def test_wait_seconds(immediately, request_meta, message_meta, expected):
    assert a2a.wait_seconds(immediately, request_meta, message_meta) == expected


@pytest.mark.parametrize("value", [-1, 61, True, "5", math.inf, math.nan, None])
def test_wait_seconds_refusals(value):
    with pytest.raises(InputError, match=r"fleet\.wait"):
        a2a.wait_seconds(False, {"fleet.wait": value}, None)
