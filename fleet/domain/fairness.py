"""Fair turns across tenants (pure): which due conversation free capacity goes to next.

Stride scheduling (Waldspurger's, as Temporal's fairness keys and Hatchet's group round-robin
do it in spirit): every tenant with due work has a *pass*; the next turn goes to the eligible
tenant with the lowest pass, whose pass then moves on by ``1 / weight``, so a tenant of weight
3 gets three turns to a weight-1 tenant's one. A tenant that becomes due again starts at the
current virtual time (the pass of the last turn given), never below it: it cannot bank turns
while idle (a cold start after a quiet hour takes its share, not an hour's worth), nor wait
behind another's backlog. Inside a tenant, higher ``priority`` first, then first come.

A tenant at its ``max_running`` (conversations running at once) is passed over until one of
its turns is done. ``fleet.dispatch.fair`` keeps the same state in Redis (a Lua script each
for add, pick and done); this in-memory one serves embedded mode and states the rules the
script is tested against.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from fleet.constants import DEFAULT_PRIORITY, DEFAULT_TENANT, MAX_PRIORITY

#: A priority's weight in an entry's score: priority first, then arrival (``seq`` below it).
PRIORITY_SPAN = 10**12


def entry_score(priority: int, seq: int) -> int:
    """Order inside a tenant: higher priority first, then first come (lower score first)."""
    return (MAX_PRIORITY - priority) * PRIORITY_SPAN + seq


@dataclass(frozen=True, slots=True)
class Turn:
    """A due conversation given a turn: what to drain, and whose turn it is."""

    conversation_id: uuid.UUID
    tenant: str = DEFAULT_TENANT
    priority: int = DEFAULT_PRIORITY
    #: The turn's own id where its hold is kept apart from others' (Redis), for ``done``.
    hold: str | None = field(default=None, compare=False)


@dataclass
class _Tenant:
    weight: int = 1
    cap: int | None = None
    #: Its pass: where it stands in the round-robin (lower goes first).
    pass_: float = 0.0
    running: int = 0
    #: (score, conversation) of its due conversations.
    due: list[tuple[int, uuid.UUID]] = field(default_factory=list)


class FairQueue:
    """Due conversations by tenant; ``pick`` hands out turns fairly, ``done`` ends one."""

    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        #: conversation → (tenant, score, priority) while due (one entry each).
        self._entries: dict[uuid.UUID, tuple[str, int, int]] = {}
        #: conversation → tenant of each of its turns that runs (a conversation made due again
        #: while its turn runs may be picked again: its drain knocks and ends).
        self._running: dict[uuid.UUID, list[str]] = {}
        self._seq = 0
        self._vtime = 0.0

    def configure(self, weights: Mapping[str, int], caps: Mapping[str, int | None]) -> None:
        """Tenants' weights and ``max_running`` caps (unlisted: weight 1, no cap)."""
        for name in set(weights) | set(caps):
            t = self._tenant(name)
            t.weight = weights.get(name, 1)
            t.cap = caps.get(name)

    def _tenant(self, name: str) -> _Tenant:
        found = self._tenants.get(name)
        if found is None:
            found = self._tenants[name] = _Tenant(pass_=self._vtime)
        return found

    def add(self, turn: Turn) -> bool:
        """Make a conversation due; False if it is due already (it keeps its place, moving up
        if this priority is higher)."""
        t = self._tenant(turn.tenant)
        self._seq += 1
        score = entry_score(turn.priority, self._seq)
        found = self._entries.get(turn.conversation_id)
        if found is not None:
            owner, old, _ = found
            if owner == turn.tenant and score < old and old - score >= PRIORITY_SPAN:
                t.due.remove((old, turn.conversation_id))
                heapq.heapify(t.due)
                heapq.heappush(t.due, (score, turn.conversation_id))
                self._entries[turn.conversation_id] = (owner, score, turn.priority)
            return False
        if not t.due:  # due again: from now on, never below the virtual time
            t.pass_ = max(t.pass_, self._vtime)
        heapq.heappush(t.due, (score, turn.conversation_id))
        self._entries[turn.conversation_id] = (turn.tenant, score, turn.priority)
        return True

    def pick(self) -> Turn | None:
        """The next turn: the lowest pass among tenants with due work and room under their
        cap; None when there is none."""
        best: tuple[float, str] | None = None
        for name, t in self._tenants.items():
            if not t.due or (t.cap is not None and t.running >= t.cap):
                continue
            if best is None or (t.pass_, name) < best:
                best = (t.pass_, name)
        if best is None:
            return None
        name = best[1]
        t = self._tenants[name]
        _, conversation = heapq.heappop(t.due)
        _, _, priority = self._entries.pop(conversation)
        self._vtime = max(self._vtime, t.pass_)
        t.pass_ += 1.0 / t.weight
        t.running += 1
        self._running.setdefault(conversation, []).append(name)
        return Turn(conversation, name, priority)

    def done(self, conversation_id: uuid.UUID) -> None:
        """A turn ended (its drain returned): its tenant has room again."""
        names = self._running.get(conversation_id)
        if not names:
            return
        name = names.pop()
        if not names:
            del self._running[conversation_id]
        self._tenants[name].running -= 1

    def pickable(self) -> bool:
        """Would ``pick`` give a turn now (due work of a tenant under its cap)?"""
        return any(t.due and (t.cap is None or t.running < t.cap) for t in self._tenants.values())

    def running(self, tenant: str) -> int:
        found = self._tenants.get(tenant)
        return found.running if found is not None else 0

    def __len__(self) -> int:
        return len(self._entries)
