"""Model limits' decisions (pure): matching, the buckets, all-or-nothing, cooldowns, settling."""

from __future__ import annotations

import pytest

from fleet.domain.model_limits import (
    CONCURRENCY_POLL_S,
    Limit,
    State,
    cool,
    decide,
    matching,
    past_max_wait_advice,
    settle,
    take,
    wait_line,
    waiting_text,
)

OPENAI = Limit("openai:*", requests_per_minute=60, burst=2)
MINI = Limit("openai:gpt-4o-mini*", requests_per_minute=600)


@pytest.mark.parametrize(
    ("model", "found"),
    [
        ("openai:gpt-4o-mini", ("openai:*", "openai:gpt-4o-mini*")),
        ("openai:gpt-4o", ("openai:*",)),
        ("anthropic:claude-x", ()),
        ("OPENAI:gpt-4o", ()),
    ],
)
def test_every_matching_limit_applies(model: str, found: tuple[str, ...]) -> None:
    assert tuple(limit.match for limit in matching([OPENAI, MINI], model)) == found


@pytest.mark.parametrize(
    ("limit", "interval", "capacity", "tokens"),
    [
        (Limit("a", requests_per_minute=600), 0.1, 10.0, 0.0),
        (Limit("a", requests_per_minute=30), 2.0, 1.0, 0.0),
        (Limit("a", requests_per_minute=60, burst=5), 1.0, 5.0, 0.0),
        (Limit("a", requests_per_minute=60, burst=5, tokens_per_minute=6000), 1.0, 5.0, 500.0),
        (Limit("a", tokens_per_minute=6000), 0.0, 0.0, 100.0),
    ],
)
def test_bucket_sizes(limit: Limit, interval: float, capacity: float, tokens: float) -> None:
    assert limit.request_interval == pytest.approx(interval)
    assert limit.request_capacity == capacity
    assert limit.token_capacity == pytest.approx(tokens)


@pytest.mark.parametrize(
    ("tat", "now", "cost", "new_tat", "wait"),
    [
        (0.0, 100.0, 1, 101.0, 0.0),  # empty cell: goes
        (101.0, 100.0, 1, 102.0, 0.0),  # second of a burst of 2
        (102.0, 100.0, 1, 102.0, 1.0),  # third: waits one interval
        (102.0, 101.0, 1, 103.0, 0.0),  # a second later it fits
        (0.0, 100.0, 5, 105.0, 0.0),  # bigger than the bucket: goes when full, leaves debt
        (105.0, 100.0, 1, 105.0, 4.0),  # ... which the next call waits out
    ],
)
def test_take(tat: float, now: float, cost: int, new_tat: float, wait: float) -> None:
    assert take(tat, now, 1.0, 2.0, cost) == (new_tat, pytest.approx(wait))


def test_no_window_holds_more_than_its_rate_plus_burst() -> None:
    limit = Limit("a", requests_per_minute=600, burst=5)
    state, now, starts = State(), 0.0, []
    while now < 10.0:
        d = decide([limit], [state], now, 0)
        if d.go:
            state = settle(limit, d.states[0], now, 0)
            starts.append(now)
        else:
            now += d.wait_s
    for t0 in starts:
        in_window = sum(1 for t in starts if t0 <= t < t0 + 1.0)
        assert in_window <= 10 + 5


def test_all_or_nothing_and_the_longest_wait_names_its_limit() -> None:
    states = [State(requests_tat=102.0), State()]
    d = decide([OPENAI, MINI], states, 100.0, 0)
    assert (d.go, d.limit, d.reason) == (False, "openai:*", "requests")
    assert d.wait_s == pytest.approx(1.0)
    assert d.states == ()  # nothing taken from MINI either
    d = decide([OPENAI, MINI], [State(), State()], 100.0, 0)
    assert d.go and [s.in_flight for s in d.states] == [1, 1]


def test_cooldown_pauses_and_a_longer_one_stays() -> None:
    state = cool(State(), 100.0, 3.0)
    assert cool(state, 100.0, 1.0).cool_until == 103.0
    d = decide([OPENAI], [state], 101.0, 0)
    assert (d.reason, d.wait_s) == ("cooldown", pytest.approx(2.0))
    assert decide([OPENAI], [state], 103.0, 0).go


def test_tokens_wait_and_are_corrected_by_usage() -> None:
    limit = Limit("t", tokens_per_minute=600)  # 10 a second, a bucket of 10
    d = decide([limit], [State()], 0.0, 10)
    assert d.go
    state = d.states[0]
    assert decide([limit], [state], 0.0, 5).reason == "tokens"
    # the call reported 2 tokens, not 10: 8 come back
    given_back = settle(limit, state, 0.0, -8)
    assert given_back.in_flight == 0
    assert decide([limit], [given_back], 0.0, 5).go
    # it reported 30: the next call waits the debt out
    owed = settle(limit, state, 0.0, 20)
    assert decide([limit], [owed], 0.0, 1).wait_s == pytest.approx(2.1)  # 31 owed, 10 held


def test_concurrency_polls() -> None:
    limit = Limit("c", max_concurrent=2)
    d = decide([limit], [State(in_flight=2)], 0.0, 0)
    assert (d.reason, d.wait_s) == ("concurrency", CONCURRENCY_POLL_S)
    assert decide([limit], [State(in_flight=1)], 0.0, 0).go


def test_waiting_text() -> None:
    assert waiting_text("openai:*", 1.23) == "waiting for model capacity: openai:*, 1.2 s"
    assert waiting_text("openai:*", 3.0, "cooldown") == (
        "waiting for model capacity: openai:*, 3.0 s (cooldown after a 429)"
    )


FLEET_TOML = "config/fleet.toml [[model_limits]]"


@pytest.mark.parametrize(
    ("reason", "seconds", "advice"),
    [
        (
            "cooldown",
            29.2,
            "the provider asked for that pause after a 429 (its Retry-After), and no rate of "
            "fleet's shortens it: raise the limit's max_wait to at least 30s in "
            f"{FLEET_TOML}, or give the agent a fallback model ([model] fallbacks) that the "
            "limit does not match",
        ),
        (
            "requests",
            75.0,
            f"raise its max_wait or its requests_per_minute in {FLEET_TOML}, or lower the load",
        ),
        (
            "tokens",
            75.0,
            f"raise its max_wait or its tokens_per_minute in {FLEET_TOML}, or lower the load",
        ),
        (
            "concurrency",
            61.0,
            f"raise its max_wait or its max_concurrent in {FLEET_TOML}, or lower the load",
        ),
    ],
)
def test_past_max_wait_the_advice_names_what_can_help(
    reason: str, seconds: float, advice: str
) -> None:
    """A rate cannot shorten a provider's Retry-After: a cooldown names max_wait and a
    fallback; a wait for a rate or a free place names that key."""
    assert past_max_wait_advice(reason, seconds) == advice


@pytest.mark.parametrize(
    ("text", "reason", "shown"),
    [
        ("waiting …, 1.2 s", "requests", "waiting …, 1.2 s (requests per minute)"),
        ("waiting …, 1.2 s", "tokens", "waiting …, 1.2 s (tokens per minute)"),
        ("waiting …, 1.2 s", "concurrency", "waiting …, 1.2 s (calls in flight)"),
        (
            "waiting …, 3.0 s (cooldown after a 429)",
            "cooldown",
            "waiting …, 3.0 s (cooldown after a 429)",
        ),
        ("waiting …, 1.2 s", "other", "waiting …, 1.2 s (other)"),
        ("waiting …, 1.2 s", None, "waiting …, 1.2 s"),
    ],
)
def test_wait_line_names_the_reason_once(text: str, reason: str | None, shown: str) -> None:
    assert wait_line(text, reason) == shown
