"""What model calls cost (pure), from ``[prices."provider:model"]`` per million tokens.

Costs are kept as whole millionths of the price's unit (micros): a step's prompt tokens times the
input price plus its completion tokens times the output price is exactly that, and integers sum
without drift in the run record and the per-tenant day totals.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Micros in one unit of the prices' currency.
MICROS = 1_000_000

#: ``provider:model`` → (input, output) price per million tokens.
Prices = Mapping[str, tuple[float, float]]


def step_micros(
    prices: Prices, model: str, prompt_tokens: int, completion_tokens: int
) -> int | None:
    """The cost of one model call in micros; None when ``model`` has no price."""
    price = prices.get(model)
    if price is None:
        return None
    return round(prompt_tokens * price[0] + completion_tokens * price[1])


def money(micros: int | None) -> float | None:
    """Micros as the prices' unit (rounded to a millionth)."""
    return None if micros is None else round(micros / MICROS, 6)
