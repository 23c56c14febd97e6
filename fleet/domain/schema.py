"""May a release run on a database, and what may ``fleet migrate`` apply: pure rules.

Each migration says what it is. An **expand** step only adds (tables, nullable columns or
columns with a default, indexes): a process of the release before it still reads and writes
everything it knows. A **contract** step removes or renames what an older release needs, so it
waits for ``fleet migrate --contract``, once no process of such a release is left. Every applied
revision is recorded with its kind (the ``schema_revisions`` ledger), so a process whose release
is older than the database can tell whether it may still run: only expand steps lie between its
own revision and the database's.

Revisions are named ``NNNN_what`` and applied in the order of ``NNNN`` (one line of history, a
test keeps it so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["expand", "contract", "baseline"]
#: ``baseline``: a revision from before 0.2.0, which says neither. Every release that runs beside
#: another (0.2.0 on) has them all, so ``fleet migrate`` applies them without ``--contract``; a
#: process older than one of them would not run beside it (no such release registers).
KINDS: tuple[Kind, ...] = ("expand", "contract", "baseline")

#: What a verdict says: run, migrate first (the database is behind), or refuse (contracted
#: past this release, or a history this release cannot read).
Action = Literal["run", "migrate", "refuse"]


def seq(revision: str) -> int:
    """A revision's place in the history (``0020_releases`` → 20); -1 when it has none."""
    head, _, _ = revision.partition("_")
    return int(head) if head.isdigit() else -1


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    #: One line for an operator (None when the process may run at once).
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.action == "run"


def verdict(own: str, have: str | None, ledger: Mapping[str, str]) -> Verdict:
    """May a process whose newest revision is ``own`` run on a database at ``have`` whose
    applied revisions and kinds are ``ledger``?"""
    if have == own:
        return Verdict("run")
    if have is None or seq(have) < seq(own) or seq(have) < 0:
        return Verdict(
            "migrate",
            f"database schema is at {have or 'nothing (empty database)'}, this release needs "
            f"{own}: run `fleet migrate`",
        )
    later = {r: k for r, k in ledger.items() if seq(own) < seq(r) <= seq(have)}
    contracted = sorted((r for r, k in later.items() if k != "expand"), key=seq)
    if contracted:
        return Verdict(
            "refuse",
            f"database schema at {have} has contracted past {own}, this release's "
            f"({contracted[0]} removed what it needs): run a release that knows {have}",
        )
    missing = [n for n in range(seq(own) + 1, seq(have) + 1) if n not in {seq(r) for r in later}]
    if own not in ledger or missing:
        return Verdict(
            "refuse",
            f"database schema at {have} is newer than {own}, this release's, and does not record "
            f"that every step between them only adds: run a release that knows {have}",
        )
    return Verdict("run")


@dataclass(frozen=True, slots=True)
class Plan:
    """What ``fleet migrate`` applies: up to ``target`` (None: nothing), leaving ``waiting``
    contract steps for ``fleet migrate --contract``."""

    target: str | None
    waiting: tuple[str, ...] = ()
    #: The contract steps this plan applies (``--contract``), to check no older process needs
    #: what they remove.
    contracts: tuple[str, ...] = ()


def plan(pending: Sequence[tuple[str, str]], *, contract: bool, fresh: bool = False) -> Plan:
    """``pending`` are the revisions after the database's, oldest first, with their kinds.
    Without ``contract`` the expand steps up to the first contract step are applied; a
    ``fresh`` (empty) database gets every step, as no process can need what it never held."""
    if fresh:
        return Plan(pending[-1][0] if pending else None)
    if contract:
        contracts = tuple(r for r, k in pending if k == "contract")
        return Plan(pending[-1][0] if pending else None, (), contracts)
    target: str | None = None
    for i, (rev, kind) in enumerate(pending):
        if kind == "contract":
            return Plan(target, tuple(r for r, _ in pending[i:]))
        target = rev
    return Plan(target)


def blockers(heads: Iterable[tuple[str, str]], contracts: Sequence[str]) -> list[tuple[str, str]]:
    """Of the live processes' ``(name, newest revision)``, those that a contract step of
    ``contracts`` would break: every process whose own revision is older than it."""
    if not contracts:
        return []
    first = min(seq(r) for r in contracts)
    return [(name, head) for name, head in heads if seq(head) < first]
