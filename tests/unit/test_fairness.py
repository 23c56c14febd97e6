"""Fair turns (pure): round-robin across tenants by weight, priority then arrival inside one,
caps on running turns, no banked turns for a tenant that was idle."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from fleet.domain.fairness import FairQueue, Turn, entry_score


def _ids(n: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=i + 1) for i in range(n)]


def _drain(q: FairQueue) -> list[Turn]:
    out = []
    while (turn := q.pick()) is not None:
        out.append(turn)
        q.done(turn.conversation_id)
    return out


@pytest.mark.parametrize(
    ("priority", "seq", "before"),
    [
        ((9, 100), (5, 1), True),  # higher priority first, whenever it came
        ((5, 1), (5, 2), True),  # same priority: first come
        ((0, 1), (1, 99), False),
    ],
)
def test_entry_order_is_priority_then_arrival(priority, seq, before):
    assert (entry_score(*priority) < entry_score(*seq)) is before


def test_another_tenants_first_turn_comes_after_one_of_the_floods_not_after_all_of_it():
    q = FairQueue()
    for c in _ids(1000):
        q.add(Turn(c, "alpha"))
    first = q.pick()
    assert first is not None and first.tenant == "alpha"
    late = uuid.uuid4()
    q.add(Turn(late, "bravo"))
    nxt = [q.pick(), q.pick()]
    assert any(t is not None and t.conversation_id == late for t in nxt)


def test_turns_alternate_and_weights_give_more_turns():
    q = FairQueue()
    q.configure({"heavy": 3}, {})
    for i, c in enumerate(_ids(400)):
        q.add(Turn(c, "heavy" if i % 2 else "light"))
    first = [t.tenant for t in _drain(q)[:200]]
    counts = Counter(first)
    assert counts["heavy"] == 150 and counts["light"] == 50
    # and spread through, not bunched: every window of 4 has both
    for i in range(0, 200, 4):
        assert set(first[i : i + 4]) == {"heavy", "light"}


def test_inside_a_tenant_priority_first_then_first_come():
    q = FairQueue()
    a, b, c, d = _ids(4)
    q.add(Turn(a, "t", 5))
    q.add(Turn(b, "t", 9))
    q.add(Turn(c, "t", 5))
    q.add(Turn(d, "t", 0))
    assert [t.conversation_id for t in _drain(q)] == [b, a, c, d]
    assert [t.priority for t in (q.pick(),) if t] == []


def test_a_conversation_is_due_once_and_a_higher_priority_moves_it_up():
    q = FairQueue()
    a, b = _ids(2)
    assert q.add(Turn(a, "t", 5)) is True
    assert q.add(Turn(b, "t", 5)) is True
    assert q.add(Turn(b, "t", 9)) is False  # due already: no second turn, but it moves up
    assert len(q) == 2
    turns = _drain(q)
    assert [t.conversation_id for t in turns] == [b, a] and turns[0].priority == 9


def test_a_tenant_at_its_cap_waits_until_one_of_its_turns_is_done():
    q = FairQueue()
    q.configure({}, {"capped": 1})
    a, b, c = _ids(3)
    q.add(Turn(a, "capped"))
    q.add(Turn(b, "capped"))
    q.add(Turn(c, "free"))
    first = q.pick()
    assert first is not None and first.conversation_id == a
    second = q.pick()
    assert second is not None and second.conversation_id == c  # capped is skipped
    assert q.pick() is None  # only capped has due work, and it is at its cap
    assert not q.pickable() and len(q) == 1
    q.done(a)
    assert q.pickable()
    third = q.pick()
    assert third is not None and third.conversation_id == b and q.running("capped") == 1


def test_an_idle_tenant_banks_no_turns():
    q = FairQueue()
    q.add(Turn(uuid.uuid4(), "quiet"))  # quiet had work once, then went quiet
    for c in _ids(100):
        q.add(Turn(c, "busy"))
    for _ in range(81):  # quiet's one turn; then busy has 80 while quiet has no work
        turn = q.pick()
        assert turn is not None
        q.done(turn.conversation_id)
    quiet = [uuid.uuid4() for _ in range(20)]
    for c in quiet:
        q.add(Turn(c, "quiet"))
    following = [t.tenant for t in _drain(q)][:20]
    # quiet takes its share from now on (alternating), not 80 turns in a row
    assert following.count("quiet") <= 11 and following.count("busy") >= 9


def test_a_conversation_picked_twice_is_done_twice():
    q = FairQueue()
    q.configure({}, {"t": 5})
    (a,) = _ids(1)
    q.add(Turn(a, "t"))
    assert q.pick() is not None
    q.add(Turn(a, "t"))  # due again while its turn runs
    assert q.pick() is not None and q.running("t") == 2
    q.done(a)
    q.done(a)
    q.done(a)  # one more than picked: nothing goes below zero
    assert q.running("t") == 0


def test_the_embedded_waker_takes_turns_across_tenants_and_holds_delayed_ones():
    from datetime import UTC, datetime, timedelta

    from fleet.dispatch.waker import LocalWaker

    waker = LocalWaker()
    waker.configure({}, {"capped": 1})
    now = datetime.now(UTC)
    flood = _ids(10)
    for c in flood:
        waker.wake(c, tenant="alpha")
    later, capped1, capped2 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    waker.wake(later, now + timedelta(hours=1), tenant="bravo")
    waker.wake(capped1, tenant="capped")
    waker.wake(capped2, tenant="capped")
    got = [waker.pop_due(now) for _ in range(4)]
    assert [t.tenant for t in got if t] == ["alpha", "capped", "alpha", "alpha"]
    assert later not in {t.conversation_id for t in got if t}  # not due yet
    turn = waker.pop_due(now + timedelta(hours=2))  # due now: bravo's turn comes next
    assert turn is not None and turn.conversation_id == later
    waker.done(capped1)
    rest = [t.tenant for t in iter(lambda: waker.pop_due(now + timedelta(hours=2)), None)]
    assert rest.count("capped") == 1 and rest.count("alpha") == 7
    assert waker.next_due() is None
