"""Releases: which schema a release may run on, what `fleet migrate` applies, who blocks a
contract step, the registry's entries and a release's name (pure rules, table tests)."""

from __future__ import annotations

import json

import pytest

from fleet import release
from fleet.domain import registry, schema

E, C = "expand", "contract"


@pytest.mark.parametrize(
    ("own", "have", "ledger", "action", "named"),
    [
        ("0020_a", "0020_a", {}, "run", ()),
        ("0020_a", None, {}, "migrate", ("nothing (empty database)", "0020_a")),
        ("0020_a", "0019_z", {}, "migrate", ("0019_z", "0020_a")),
        ("0020_a", "0021_b", {"0020_a": E, "0021_b": E}, "run", ()),
        ("0020_a", "0022_c", {"0020_a": E, "0021_b": E, "0022_c": E}, "run", ()),
        # a contract step anywhere after this release's revision
        ("0020_a", "0022_c", {"0020_a": E, "0021_b": C, "0022_c": E}, "refuse", ("0021_b",)),
        ("0020_a", "0021_b", {"0020_a": E, "0021_b": C}, "refuse", ("0021_b", "0020_a")),
        # a contract step before this release's revision does not matter
        ("0020_a", "0021_b", {"0019_z": C, "0020_a": E, "0021_b": E}, "run", ()),
        # history this release cannot read: a gap, or its own revision never recorded
        ("0020_a", "0022_c", {"0020_a": E, "0022_c": E}, "refuse", ("does not record",)),
        ("0020_a", "0021_b", {"0021_b": E}, "refuse", ("does not record",)),
        ("0020_a", "garbage", {}, "migrate", ("garbage",)),
    ],
)
def test_verdict(
    own: str, have: str | None, ledger: dict[str, str], action: str, named: tuple[str, ...]
) -> None:
    found = schema.verdict(own, have, ledger)
    assert found.action == action
    assert found.ok == (action == "run")
    for part in named:
        assert part in (found.message or "")
    if found.message is not None:
        assert "\n" not in found.message


@pytest.mark.parametrize(
    ("pending", "contract", "fresh", "target", "waiting", "contracts"),
    [
        ([], False, False, None, (), ()),
        ([("0021", E), ("0022", E)], False, False, "0022", (), ()),
        ([("0021", E), ("0022", C), ("0023", E)], False, False, "0021", ("0022", "0023"), ()),
        ([("0021", C)], False, False, None, ("0021",), ()),
        ([("0021", E), ("0022", C), ("0023", E)], True, False, "0023", (), ("0022",)),
        # an empty database gets every step: no process can need what it never held
        ([("0001", C), ("0020", E)], False, True, "0020", (), ()),
        # steps from before 0.2.0 (baseline) are applied without --contract
        ([("0015", "baseline"), ("0020", E)], False, False, "0020", (), ()),
        ([("0015", "baseline"), ("0020", E), ("0021", C)], True, False, "0021", (), ("0021",)),
    ],
)
def test_plan(
    pending: list[tuple[str, str]],
    contract: bool,
    fresh: bool,
    target: str | None,
    waiting: tuple[str, ...],
    contracts: tuple[str, ...],
) -> None:
    assert schema.plan(pending, contract=contract, fresh=fresh) == schema.Plan(
        target, waiting, contracts
    )


def test_blockers_are_processes_older_than_the_first_contract_step() -> None:
    heads = [("worker@a:1", "0020_a"), ("worker@b:2", "0022_c"), ("beat@a:3", "0021_b")]
    assert schema.blockers(heads, ("0022_c", "0024_e")) == [
        ("worker@a:1", "0020_a"),
        ("beat@a:3", "0021_b"),
    ]
    assert schema.blockers(heads, ()) == []
    assert schema.blockers(heads, ("0020_a",)) == []


def _entry(**changes: object) -> registry.Entry:
    base: dict[str, object] = dict(
        role="worker",
        host="h",
        pid=7,
        release="0.2.0+abc",
        schema="0020_a",
        started_at=100.0,
        seen_at=110.0,
        expires_at=140.0,
    )
    return registry.Entry(**{**base, **changes})  # type: ignore[arg-type]


def test_an_entry_round_trips_and_reads_other_releases_shapes() -> None:
    entry = _entry(runs_in_flight=3, free_slots=97)
    assert registry.load(entry.dump()) == entry
    newer = json.loads(entry.dump()) | {"v": 2, "queues": ["fleet"]}  # a field it does not know
    assert registry.load(json.dumps(newer)) == entry
    assert registry.load("not json") is None
    assert registry.load("[1, 2]") is None
    assert registry.load(json.dumps({"v": 1, "role": "worker"})) is None  # missing fields
    assert entry.id == "worker@h:7"


def test_live_drops_expired_entries_and_orders_the_rest() -> None:
    a, b = _entry(host="b"), _entry(host="a", role="api")
    gone = _entry(host="c", expires_at=120.0)
    assert registry.live([a, gone, b], now=130.0) == [b, a]
    view = a.view(130.0)
    assert view["upSeconds"] == 30.0 and view["seenSecondsAgo"] == 20.0
    assert view["release"] == "0.2.0+abc" and view["id"] == "worker@b:7"


@pytest.mark.parametrize(
    ("given", "expected"),
    [("ci-1234", "ci-1234"), ("  v2 build/7 ", "v2build7"), ("x" * 80, "x" * 64)],
)
def test_fleet_build_names_the_build(
    monkeypatch: pytest.MonkeyPatch, given: str, expected: str
) -> None:
    monkeypatch.setenv("FLEET_BUILD", given)
    release.build.cache_clear()
    try:
        assert release.build() == expected
        assert release.current() == f"{release.__version__}+{expected}"
    finally:
        release.build.cache_clear()


def test_without_fleet_build_a_checkout_names_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEET_BUILD", raising=False)
    release.build.cache_clear()
    try:
        found = release.build()
    finally:
        release.build.cache_clear()
    assert found == "" or (len(found) == 12 and all(c in "0123456789abcdef" for c in found))


@pytest.mark.parametrize(
    ("name", "version"),
    [("0.2.0+abc", (0, 2, 0)), ("0.10.1", (0, 10, 1)), ("1.0.0rc1", (1, 0, 0))],
)
def test_version_of(name: str, version: tuple[int, ...]) -> None:
    assert release.version_of(name)[:2] == version[:2]
    assert release.of("0.2.0", "") == "0.2.0" and release.of("0.2.0", "b") == "0.2.0+b"
