"""What model calls cost (pure): micros from prices per million tokens."""

from __future__ import annotations

import pytest

from fleet.domain.cost import money, step_micros

PRICES = {"openai:gpt-4o-mini": (0.15, 0.60), "anthropic:claude-x": (3.0, 15.0)}


@pytest.mark.parametrize(
    ("model", "prompt", "completion", "micros"),
    [
        ("openai:gpt-4o-mini", 1000, 500, 450),  # 0.00015 + 0.0003 of a unit
        ("anthropic:claude-x", 10, 2, 60),
        ("anthropic:claude-x", 0, 0, 0),
        ("openai:gpt-4o", 1000, 500, None),  # unpriced: no cost, not a cost of 0
    ],
)
def test_step_micros(model: str, prompt: int, completion: int, micros: int | None) -> None:
    assert step_micros(PRICES, model, prompt, completion) == micros


def test_money() -> None:
    assert money(None) is None
    assert money(450) == 0.00045
    assert money(2_500_000) == 2.5
