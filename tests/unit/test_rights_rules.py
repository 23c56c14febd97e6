"""The pure rules of a person's data and of the audit log: digests, kinds, outcomes, objects,
and the gate that turns a flood of refused keys into one entry a minute."""

from __future__ import annotations

import pytest

from fleet.domain import audit, rights
from fleet.errors import InputError


def test_a_digest_names_tenant_and_resource_and_neither_shows() -> None:
    a, b = rights.digest("acme", "ada@example.com"), rights.digest("globex", "ada@example.com")
    assert a != b and len(a) == 64 and "ada" not in a
    assert rights.digest("acme", "ada@example.com") == a


@pytest.mark.parametrize(
    ("tenant", "namespace", "scope", "resource", "key"),
    [
        ("default", "shop", "api", "u1", "resource:shop:api:u1"),
        ("acme", "shop", "api:acme", "u1", "resource:acme/shop:api:acme:u1"),
        (
            "acme",
            "default",
            "webhook:orders",
            "a:b/c",
            "resource:acme/default:webhook:orders:a:b/c",
        ),
    ],
)
def test_working_memory_keys_of_a_resource(
    tenant: str, namespace: str, scope: str, resource: str, key: str
) -> None:
    assert rights.memory_key(tenant, namespace, scope, resource) == key


def test_counts_name_every_kind_in_order_and_refuse_unknown_ones() -> None:
    found = rights.counted({"tasks": 2, "messages": 4})
    assert list(found) == list(rights.KINDS) and found["tasks"] == 2 and found["runs"] == 0
    with pytest.raises(ValueError, match="unknown kinds"):
        rights.counted({"secrets": 1})
    assert rights.add({"tasks": 1}, {"tasks": 2, "runs": 1}) == {"tasks": 3, "runs": 1}


@pytest.mark.parametrize("bad", [None, "", "a\nb", "x" * 201])
def test_a_resource_id_must_be_printable(bad: str | None) -> None:
    with pytest.raises(InputError):
        rights.named(bad)


def test_an_export_line_never_holds_credentials() -> None:
    row = {"url": "https://x", "token": "t", "authentication": {"s": 1}, "claim": "c", "n": 1}
    assert rights.clean(row) == {"url": "https://x", "n": 1}


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, "ok"),
        (202, "ok"),
        (303, "ok"),
        (404, "refused 404"),
        (409, "refused 409"),
        (500, "failed 500"),
        (503, "failed 503"),
    ],
)
def test_outcomes(status: int, outcome: str) -> None:
    assert audit.outcome_of(status) == outcome


@pytest.mark.parametrize(
    ("params", "tenant", "obj"),
    [
        ({"task_id": "t1", "approval_id": "a"}, "acme", "t1"),
        ({"conversationKey": "api:acme:k"}, "acme", "api:acme:k"),
        ({"name": "nightly"}, None, "nightly"),
        ({}, "acme", None),
    ],
)
def test_objects(params: dict[str, str], tenant: str | None, obj: str | None) -> None:
    assert audit.object_of(params, tenant) == obj


def test_a_resource_object_is_its_digest() -> None:
    found = audit.object_of({"resource": "ada@example.com"}, "acme")
    assert found == "resource:" + rights.digest("acme", "ada@example.com")[:32]


def test_refused_keys_are_one_entry_per_address_per_minute_with_a_count() -> None:
    gate = audit.RefusalGate(every_s=60)
    assert gate.let("10.0.0.1", 0.0) == 1
    assert [gate.let("10.0.0.1", t) for t in (1.0, 30.0, 59.0)] == [None, None, None]
    assert gate.let("10.0.0.2", 2.0) == 1  # another address: its own entry
    assert gate.let("10.0.0.1", 61.0) == 4  # itself and the three let go
    assert gate.let("10.0.0.1", 62.0) is None


def test_the_gate_forgets_rather_than_grows() -> None:
    gate = audit.RefusalGate(every_s=60, addresses=3)
    for n in range(10):
        assert gate.let(f"10.0.0.{n}", 0.0) == 1
    assert len(gate._last) <= 3
