"""Recall's pure rules: filters (every operator), exact top-k with a threshold, expansion."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from fleet.domain import recall

T = datetime(2026, 11, 1, tzinfo=UTC)
MSG = {"role": "user", "created_at": T, "labels": {"team": "search", "tier": "gold"}}


@pytest.mark.parametrize(
    ("flt", "ok"),
    [
        ({}, True),
        ({"role": {"eq": "user"}}, True),
        ({"role": {"eq": "assistant"}}, False),
        ({"role": {"ne": "assistant"}}, True),
        ({"role": {"in": ["user", "assistant"]}}, True),
        ({"role": {"nin": ["user"]}}, False),
        ({"created_at": {"gte": "2026-11-01T00:00:00+00:00"}}, True),
        ({"created_at": {"gt": "2026-11-01T00:00:00Z"}}, False),
        ({"created_at": {"lt": "2026-12-01"}}, True),
        ({"created_at": {"lte": "2026-10-31"}}, False),
        ({"labels.team": {"eq": "search"}}, True),
        ({"labels.team": {"in": ["ads"]}}, False),
        ({"labels.missing": {"eq": "x"}}, False),
        ({"labels.missing": {"ne": "x"}}, True),
        ({"labels.tier": {"gt": 3}}, False),  # not comparable: no match, no error
        ({"role": {"eq": "user"}, "labels.tier": {"eq": "gold"}}, True),
    ],
)
def test_filters(flt, ok):
    recall.check_filter(flt)
    assert recall.matches(MSG, flt) is ok


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"colour": {"eq": 1}}, "use role, created_at or labels.<label name>"),
        ({"role": {"like": "u%"}}, "operator 'like' is not one of"),
        ({"role": {"in": "user"}}, "in takes a list"),
        ({"role": {}}, "give { op = value }"),
        ({"labels.": {"eq": 1}}, "use role"),
    ],
)
def test_bad_filters_say_what(flt, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        recall.check_filter(flt)


def test_best_is_exact_top_k_above_the_threshold():
    q = np.array([1.0, 0.0], dtype=np.float32)
    cands = np.array(
        [[0.0, 1.0], [1.0, 0.1], [1.0, 1.0], [2.0, 0.0], [-1.0, 0.0]], dtype=np.float32
    )
    assert recall.best(q, cands, top_k=2, threshold=0.0) == [(3, 1.0), (1, 0.995)]
    assert [i for i, _ in recall.best(q, cands, top_k=5, threshold=0.5)] == [3, 1, 2]
    assert recall.best(q, cands[:0], top_k=3, threshold=0.0) == []
    zero = np.zeros((1, 2), dtype=np.float32)
    assert recall.best(q, zero, top_k=1, threshold=0.1) == []


def test_expand_keeps_hit_order_conversation_order_and_no_repeats():
    neighbours = {10: [9, 11], 20: [19, 21], 11: [10, 12]}
    assert recall.expand([20, 10, 11], neighbours, already={21, 12}) == [19, 20, 9, 10, 11]
