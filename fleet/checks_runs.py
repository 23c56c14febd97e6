"""``fleet check``: what unfinished runs started with, against the config as it is now.

A run keeps the agent configuration it started with until it ends (``fleet.dispatch.snapshots``).
Before a config change rolls out, ``fleet check`` reads (read-only) which configurations the
unfinished runs of each agent started with and warns, per agent, what differs from the config
it checks: a removed tool goes on working for them, unless its code is gone too, and then a run
that calls it fails.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from fleet.domain.snapshots import changes, fingerprint

if TYPE_CHECKING:
    from fleet.config import FleetConfig, Settings
    from fleet.store.snapshots import ConfigInUse

Line = tuple[Literal["ok", "warn", "fail"], str]


def runs_against(config: FleetConfig, settings: Settings) -> list[Line]:
    """One line per agent whose unfinished runs started with another configuration (``warn``),
    or one ``ok`` line; nothing when the database cannot say (missing, older, unreachable: its
    own check reports that)."""
    from sqlalchemy import inspect

    from fleet.domain.redaction import Redactor
    from fleet.store import db
    from fleet.store.snapshots import SnapshotStore

    url = settings.resolved_database_url
    path = db.sqlite_path(url)
    if path is not None and not path.exists():
        return []
    engine = db.create(url, readonly=True, pooler=settings.database_pooler)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("agent_configs"):
                return []
        store = SnapshotStore(engine, Redactor())
        in_use = store.configs_in_use()
        texts = {u.fingerprint: store.agent_config(u.fingerprint) for u in in_use}
    except Exception:  # the database check says why
        return []
    finally:
        engine.dispose()
    return lines(config, in_use, texts)


def lines(
    config: FleetConfig,
    in_use: Sequence[ConfigInUse],
    texts: Mapping[str, Mapping[str, Any] | None],
) -> list[Line]:
    """What ``runs_against`` reports of the configurations ``in_use`` (their ``texts``)."""
    found: dict[str, list[str]] = defaultdict(list)
    runs: dict[str, int] = defaultdict(int)
    total = 0
    for use in in_use:
        total += use.runs
        agent = config.agents.get(use.agent)
        now = None if agent is None else agent.model_dump(mode="json")
        if now is not None and fingerprint(now) == use.fingerprint:
            continue
        runs[use.agent] += use.runs
        kept = texts.get(use.fingerprint)
        what = (
            changes(kept["agent"], now)
            if kept is not None
            else ["its text is not kept (they take their next steps with the config of then)"]
        )
        found[use.agent] += [w for w in what if w not in found[use.agent]]
    if not found:
        return [("ok", f"{_runs(total)}, none started with another agent configuration")]
    return [
        (
            "warn",
            f"agent {name}: {_runs(runs[name])} started with another configuration "
            f"({'; '.join(what)}); they keep it until they end, and one that calls a tool whose "
            "code is gone fails",
        )
        for name, what in sorted(found.items())
    ]


def _runs(n: int) -> str:
    return f"{n} unfinished run{'' if n == 1 else 's'}"
