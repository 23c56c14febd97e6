"""authorize policies for the tests (fleet.toml: authorize = "tests.support.policies:...")."""

from __future__ import annotations

from fleet.policy import Access, Refused

#: Every access a policy was asked about, in order (the tests read it).
ASKED: list[Access] = []


def record_all(access: Access) -> bool:
    ASKED.append(access)
    return True


def no_vip(access: Access) -> bool | None:
    """Nobody may dispatch into conversations whose key starts with vip-."""
    ASKED.append(access)
    if access.action == "dispatch" and access.conversation.split(":", 1)[1].startswith("vip-"):
        raise Refused("vip conversations are closed to this caller")
    return None


def no_recall(access: Access) -> bool:
    ASKED.append(access)
    return access.action != "recall"


def no_notes(access: Access) -> bool:
    ASKED.append(access)
    return access.action != "notes"


def broken(access: Access) -> bool:
    raise RuntimeError("policy database down")
