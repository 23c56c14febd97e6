"""Which tool results a run shortens to fit its token budget (pure).

Inside one long run the messages sent each step grow with every tool result. Once they outgrow
``context_tokens``, the oldest tool results are cut to their beginning (in what is sent only:
the journal keeps them whole) until the rest fits. No message is ever left out, so a tool call
is never sent without its result; if shortening every result is not enough, the run sends what
it has and the model decides (or refuses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Item:
    """One message as the budget sees it: a tool result or not, its cost and its cost cut."""

    tool_result: bool
    tokens: int
    #: What it costs once shortened (equal to ``tokens`` when there is nothing to cut).
    shortened: int


def to_shorten(items: Sequence[Item], budget: int) -> list[int]:
    """Indexes of the tool results to shorten, oldest first, until the total fits ``budget``."""
    total = sum(i.tokens for i in items)
    chosen: list[int] = []
    for index, item in enumerate(items):
        if total <= budget:
            break
        if item.tool_result and item.shortened < item.tokens:
            chosen.append(index)
            total -= item.tokens - item.shortened
    return chosen
