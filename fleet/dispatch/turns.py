"""A worker's turn: drain the due conversation the fair queue picks, then pick again.

The queue is ``fleet.dispatch.fair``'s (Redis) and its rules ``fleet.domain.fairness``'s; this is
the loop a ``fleet.turn`` token runs in a worker process, over the dispatcher's drain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from fleet.domain.fairness import Turn


class Turns(Protocol):
    """The fair queue of turns as a worker's turn sees it (``fleet.dispatch.fair``)."""

    def pick(self, done: Turn | None = None, *, take: bool = True) -> Turn | None:
        """End the turn ``done`` (if given); then (``take``) the next turn, if any is allowed."""

    def pass_on(self) -> None:
        """Put a turn back on the queue for another worker, due in a moment."""


def take_turns(
    turns: Turns,
    drain: Callable[[Turn], int],
    *,
    budget_s: float,
    stopping: Callable[[], bool],
) -> int:
    """Drain the turn the queue picks, then pick again while there is due work, the budget lasts
    and no shutdown is under way; returns the tasks run. Each turn ends (``done``) in the same
    script as the next pick; the last one on its own.

    Picking again after each drain keeps every due conversation moving while any worker is busy,
    whether or not its token arrived (a worker killed with tokens in hand)."""
    if stopping():
        # A turn that reached a worker on its way out (a pool on threads takes messages while
        # it stops): another worker takes it, rather than the sweeper's next look.
        turns.pass_on()
        return 0
    deadline = time.monotonic() + budget_s
    ran, done = 0, None
    try:
        while not stopping():
            turn = turns.pick(done)
            done = None
            if turn is None:
                break
            done = turn
            ran += drain(turn)
            if time.monotonic() > deadline:
                break
    finally:
        if done is not None:
            turns.pick(done, take=False)
    return ran
