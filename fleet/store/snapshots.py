"""Agent configurations as runs started with them (``fleet.domain.snapshots``): kept once per
fingerprint, read back when a run resumes after its agent's config changed, and counted over the
unfinished runs for ``fleet check``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import and_, func, insert, select
from sqlalchemy.exc import IntegrityError

from fleet.domain.values import TaskStatus
from fleet.store import schema as s
from fleet.store.base import StoreBase

#: Tasks whose newest run may still take a step: running, or to be resumed.
_UNFINISHED_RUNS = (
    TaskStatus.LEASED,
    TaskStatus.RUNNING,
    TaskStatus.INTERRUPTED,
    TaskStatus.WAITING,
)


class ConfigInUse(NamedTuple):
    """Unfinished runs of one agent that started with one configuration."""

    agent: str
    fingerprint: str
    runs: int


class SnapshotStore(StoreBase):
    def keep_agent_config(
        self, fingerprint: str, agent: str, config: dict[str, Any], now: datetime
    ) -> None:
        """Keep ``config`` under ``fingerprint`` (redacted; a second keep of it changes nothing)."""
        if self.agent_config(fingerprint) is not None:
            return
        ac = s.agent_configs
        row = {
            "fingerprint": fingerprint,
            "agent": agent,
            "config": self.redactor.json(config),
            "created_at": now,
        }
        try:
            with self.tx() as conn:
                conn.execute(insert(ac).values(**row))
        except IntegrityError:  # another process kept it first: the same text
            return

    def agent_config(self, fingerprint: str) -> dict[str, Any] | None:
        """The configuration kept under ``fingerprint``, or None."""
        ac = s.agent_configs
        with self.read() as conn:
            found = conn.execute(
                select(ac.c.config).where(ac.c.fingerprint == fingerprint)
            ).scalar()
        return None if found is None else dict(found)

    def configs_in_use(self) -> list[ConfigInUse]:
        """Each (agent, configuration) the newest runs of unfinished tasks started with."""
        t, r = s.tasks, s.runs
        agent = r.c.context["agent"]["name"].as_string()
        fp = r.c.context["agent"]["config"].as_string()
        query = (
            select(agent, fp, func.count())
            .select_from(t.join(r, and_(r.c.task_id == t.c.id, r.c.attempt == t.c.attempts)))
            .where(t.c.status.in_([str(v) for v in _UNFINISHED_RUNS]), fp.is_not(None))
            .group_by(agent, fp)
            .order_by(agent, fp)
        )
        with self.read() as conn:
            rows = conn.execute(query).all()
        return [ConfigInUse(str(a), str(f), int(n)) for a, f, n in rows]
