"""Delegation rules (pure): allowed delegates, the depth limit, no waiting on oneself, and what
the caller is told."""

from __future__ import annotations

import pytest

from fleet.domain import delegation as rules
from fleet.domain.delegation import Caller, Finished, Refused

KINDS = {"lead": "pool", "helper": "pool", "desk": "singleton", "gone": "pool"}
ROOT = Caller("lead", "api", "k")
LEAD = rules.conversation_ref("lead", "api", "k")
DESK = rules.conversation_ref("desk", "deployment", "singleton")


def chain_of(n: int) -> tuple[str, ...]:
    return tuple(f"helper/agent:lead:{i}" for i in range(n))


@pytest.mark.parametrize(
    "caller,target,delegates,max_depth,wait,expected",
    [
        # allowed: a chain one longer than the caller's, the caller's conversation last
        (ROOT, "helper", ["helper"], 3, True, (LEAD,)),
        (ROOT, "helper", ["helper"], 3, False, (LEAD,)),
        (Caller("helper", "agent:lead", "x", chain_of(2)), "helper", ["helper"], 3, True, None),
        # a pool calling its own deployment gets a new conversation: no deadlock
        (Caller("helper", "agent:lead", "x"), "helper", ["helper"], 3, True, None),
        # a singleton may start (not wait on) itself
        (Caller("desk", "deployment", "singleton"), "desk", ["desk"], 3, False, (DESK,)),
        (ROOT, "desk", ["desk"], 3, True, (LEAD,)),
    ],
)
def test_allowed(caller, target, delegates, max_depth, wait, expected):
    chain = rules.check(
        caller, target, delegates=delegates, kinds=KINDS, max_depth=max_depth, wait=wait
    )
    assert chain == (expected if expected is not None else (*caller.chain, caller.conversation))
    assert len(chain) == caller.depth + 1


@pytest.mark.parametrize(
    "caller,target,delegates,max_depth,wait,fragment",
    [
        (ROOT, "helper", [], 3, True, "not one this agent may delegate to (delegates: none)"),
        (ROOT, "desk", ["helper"], 3, True, "'desk' is not one this agent may delegate to"),
        (ROOT, "missing", ["missing"], 3, True, "'missing' is not configured"),
        # the depth limit: a task 3 deep may not delegate with max 3; 0 forbids delegation
        (
            Caller("helper", "agent:lead", "x", chain_of(3)),
            "helper",
            ["helper"],
            3,
            False,
            "already 3 delegation(s) deep (FLEET_MAX_DELEGATION_DEPTH = 3)",
        ),
        (ROOT, "helper", ["helper"], 0, True, "depth limit reached"),
        # waiting on one's own conversation, or on one waiting up the chain: a deadlock
        (
            Caller("desk", "deployment", "singleton"),
            "desk",
            ["desk"],
            3,
            True,
            "would wait on this task's own conversation",
        ),
        (
            Caller("helper", "agent:desk", "x", (DESK,)),
            "desk",
            ["desk"],
            3,
            True,
            "would wait on a caller's conversation",
        ),
    ],
)
def test_refused(caller, target, delegates, max_depth, wait, fragment):
    with pytest.raises(Refused) as info:
        rules.check(
            caller, target, delegates=delegates, kinds=KINDS, max_depth=max_depth, wait=wait
        )
    assert fragment in info.value.message


HELPER = rules.conversation_ref("helper", "agent:lead", "x")


def result_in_lead(rounds: int, above: tuple[str, ...] = ()) -> Caller:
    """The task in LEAD reporting the ``rounds``-th result of a start_agent ping-pong."""
    return Caller("lead", "api", "k", (*above, *([LEAD] * rounds)))


@pytest.mark.parametrize(
    "caller,trips",
    [
        (ROOT, 0),
        (Caller("helper", "agent:lead", "x", (LEAD,)), 0),  # delegated, not a round trip
        (result_in_lead(1), 1),
        (result_in_lead(3), 3),
        (result_in_lead(2, above=(DESK,)), 2),  # counted from the chain's end
        (Caller("lead", "api", "k", (LEAD, HELPER)), 0),  # its own conversation, not last
        (Caller("desk", "deployment", "singleton", (DESK,)), 1),  # a singleton started itself
    ],
)
def test_round_trips(caller, trips):
    assert rules.round_trips(caller) == trips


@pytest.mark.parametrize(
    "max_depth,rounds",
    [(0, 0), (1, 1), (3, 3), (5, 5)],
)
def test_a_start_agent_ping_pong_ends_after_the_limits_rounds(max_depth, rounds):
    """A starts B, B's result comes back to A, A starts B again: each round one deeper."""
    caller, played = ROOT, 0
    while True:
        try:
            chain = rules.check(
                caller, "helper", delegates=["helper"], kinds=KINDS, max_depth=max_depth, wait=False
            )
        except Refused as exc:
            refusal = exc.message
            break
        played += 1
        caller = Caller("lead", "api", "k", chain)  # the result reported back carries B's chain
    assert played == rounds
    assert f"FLEET_MAX_DELEGATION_DEPTH = {max_depth}" in refusal
    if rounds:
        assert f"already started {rounds} task(s) in a row from the results" in refusal
    else:
        assert "depth limit reached" in refusal


@pytest.mark.parametrize(
    "caller,max_depth,fragment",
    [
        (ROOT, 0, "this task is already 0 delegation(s) deep (FLEET_MAX_DELEGATION_DEPTH = 0)"),
        (
            Caller("helper", "agent:lead", "x", chain_of(2)),
            2,
            "already 2 delegation(s) deep (FLEET_MAX_DELEGATION_DEPTH = 2)",
        ),
        (
            result_in_lead(2),
            2,
            "started 2 task(s) in a row from the results of tasks it started (each round trip "
            "counts as a delegation: 2 of FLEET_MAX_DELEGATION_DEPTH = 2)",
        ),
        (
            result_in_lead(1, above=(DESK, HELPER)),
            3,
            "started 1 task(s) in a row from the results of tasks it started (each round trip "
            "counts as a delegation: 3 of FLEET_MAX_DELEGATION_DEPTH = 3)",
        ),
    ],
)
def test_depth_refusal_names_the_limit(caller, max_depth, fragment):
    assert fragment in rules.depth_refusal(caller, max_depth)


@pytest.mark.parametrize(
    "done,expected",
    [
        (Finished("t1", "helper", "succeeded", reply="done"), "done"),
        (Finished("t1", "helper", "superseded", reply="so far"), "so far"),
        (
            Finished("t1", "helper", "failed", error="model echo failed: 500"),
            "error: the task t1 on 'helper' failed: model echo failed: 500",
        ),
        (
            Finished("t1", "helper", "cancelled"),
            "error: the task t1 on 'helper' cancelled: no reason given",
        ),
    ],
)
def test_call_result(done, expected):
    assert rules.call_result(done) == expected


@pytest.mark.parametrize(
    "done,starts,ends",
    [
        (
            Finished("t1", "helper", "succeeded", reply="the answer"),
            "[fleet] The task you started on 'helper' (start_agent, task t1) finished.",
            "Its reply:\nthe answer",
        ),
        (
            Finished("t1", "helper", "failed", error="boom"),
            "[fleet] The task you started on 'helper' (start_agent, task t1) failed: ",
            "boom",
        ),
    ],
)
def test_result_input(done, starts, ends):
    text = rules.result_input(done, 16_384)
    assert text.startswith(starts) and text.endswith(ends)


@pytest.mark.parametrize("max_bytes", [300, 1000, 4000])
def test_result_input_fits_the_callers_input_limit(max_bytes):
    text = rules.result_input(Finished("t1", "helper", "succeeded", reply="é" * 5000), max_bytes)
    assert len(text.encode()) <= max_bytes
    assert text.endswith("more characters)")


def test_keys_name_the_call_and_are_recognised():
    key = rules.call_key("task-1", "call_3")
    assert key == "delegate:task-1:call_3" and rules.is_delegation_key(key)
    assert rules.is_delegation_key(rules.result_key("t"))
    assert not rules.is_delegation_key(None) and not rules.is_delegation_key("mine")
    assert rules.scope_of("lead") == "agent:lead"


TO = rules.ReportTo("lead", "api", "k", conversation_id="c1", generation=2)
OLD = rules.ReportTo("lead", "api", "k")  # a record from before the id and generation were kept


@pytest.mark.parametrize(
    "to,now,fate",
    [
        (TO, ("c1", 2), "admit"),
        (TO, ("c1", 3), "drop"),  # reset since the task was started
        (TO, ("c2", 0), "drop"),  # deleted, and the key started a new conversation
        (TO, None, "drop"),  # deleted
        (OLD, ("c9", 5), "admit"),
        (OLD, None, "drop"),
    ],
)
def test_report_fate(to: rules.ReportTo, now: tuple[str, int] | None, fate: str) -> None:
    assert rules.report_fate(to, now) == fate
