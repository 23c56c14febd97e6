"""The delivery journal and A2A push configs: rows created before a settle, attempts fenced by
a claim (compare-and-set), the reply's ``delivery`` kept in step with its journal."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, and_, delete, insert, select, update

from fleet.domain import delivery as rules
from fleet.domain.values import TERMINAL
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.statements import status_in


def _record(row: Any) -> rules.Record:
    m = row._mapping
    return rules.Record(
        id=m["id"],
        task_id=m["task_id"],
        target=m["target"],
        kind=m["kind"],
        url=m["url"],
        status=m["status"],
        attempts=m["attempts"],
        max_attempts=m["max_attempts"],
        next_at=m["next_at"],
        claim=m["claim"],
        claimed_until=m["claimed_until"],
        journal=tuple(m["journal"] or ()),
        error=m["error"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


class DeliveryStore(StoreBase):
    # -- the journal ----------------------------------------------------------------------------

    def open_deliveries(
        self,
        task_id: uuid.UUID,
        targets: Sequence[rules.Target],
        now: datetime,
        *,
        push: bool = False,
    ) -> list[uuid.UUID]:
        """Journal rows (``pending``, due now) for the targets that have none yet; the ids of
        every pending delivery of the task.

        ``push``: the task has ended; journal its A2A push configs too, when its
        ``push_pending`` flag says some are not journaled yet (clearing it under the task's row
        lock, which a config's set takes as well: a config set meanwhile is either read here or
        sets the flag again after this commits)."""
        d, p, t = s.deliveries, s.push_configs, s.tasks
        with self.tx() as conn:
            if push:
                claimed = conn.execute(
                    update(t)
                    .where(t.c.id == task_id, t.c.push_pending, status_in(t.c.status, TERMINAL))
                    .values(push_pending=False)
                    .returning(t.c.id)
                ).first()
                if claimed is not None:
                    ids = conn.execute(
                        select(p.c.id)
                        .where(p.c.task_id == task_id)
                        .order_by(p.c.created_at, p.c.id)
                    ).scalars()
                    targets = [*targets, *(rules.push_target(i) for i in ids)]
            have = set(conn.execute(select(d.c.target).where(d.c.task_id == task_id)).scalars())
            new = [x for x in targets if x.target not in have]
            if new:
                conn.execute(
                    insert(d),
                    [
                        {
                            "id": uuid.uuid4(),
                            "task_id": task_id,
                            "target": x.target,
                            "kind": x.kind,
                            "status": "pending",
                            "attempts": 0,
                            "max_attempts": x.max_attempts,
                            "next_at": now,
                            "journal": [],
                            "created_at": now,
                            "updated_at": now,
                        }
                        for x in new
                    ],
                )
            return list(
                conn.execute(
                    select(d.c.id).where(d.c.task_id == task_id, d.c.status == "pending")
                ).scalars()
            )

    def push_pending_ended(self, before: datetime, limit: int = 500) -> list[uuid.UUID]:
        """Tasks that ended before ``before`` with a push config not journaled (a worker lost
        after its settle, a task cancelled while queued): the sweeper journals them."""
        t = s.tasks
        return self._ids(
            select(t.c.id)
            .where(
                t.c.push_pending,
                status_in(t.c.status, TERMINAL),
                (t.c.finished_at.is_(None)) | (t.c.finished_at < before),
            )
            .limit(limit)
        )

    def delivery(self, delivery_id: uuid.UUID) -> rules.Record | None:
        with self.read() as conn:
            row = conn.execute(select(s.deliveries).where(s.deliveries.c.id == delivery_id)).first()
        return None if row is None else _record(row)

    def task_deliveries(self, task_id: uuid.UUID) -> list[rules.Record]:
        d = s.deliveries
        with self.read() as conn:
            found = conn.execute(
                select(d).where(d.c.task_id == task_id).order_by(d.c.created_at, d.c.target)
            ).all()
        return [_record(r) for r in found]

    def claim_delivery(
        self,
        found: rules.Record,
        token: str,
        until: datetime,
        now: datetime,
        *,
        url: str | None,
        lost: dict[str, Any] | None,
    ) -> bool:
        """Start an attempt: only if the row is still as read (pending, the same claim and
        attempt count); ``lost`` journals an earlier attempt whose worker never reported."""
        d = s.deliveries
        same_claim = d.c.claim.is_(None) if found.claim is None else d.c.claim == found.claim
        values: dict[str, Any] = {
            "claim": token,
            "claimed_until": until,
            "attempts": found.attempts + 1,
            "updated_at": now,
            # Where it goes without query or user info, redacted (a webhook path can be a secret).
            "url": None if url is None else self.redactor.text(rules.shown_url(url)),
        }
        if lost is not None:
            values["journal"] = [*found.journal, lost]
        with self.tx() as conn:
            done = conn.execute(
                update(d)
                .where(
                    d.c.id == found.id,
                    d.c.status == "pending",
                    d.c.attempts == found.attempts,
                    same_claim,
                )
                .values(**values)
            )
            return done.rowcount == 1

    def record_attempt(
        self,
        delivery_id: uuid.UUID,
        token: str,
        nxt: rules.Next,
        entry: dict[str, Any],
        now: datetime,
        *,
        error: str | None = None,
    ) -> bool:
        """Write an attempt's outcome under its claim (False: the claim was lost, nothing
        written); the task's reply message takes the status of its deliveries."""
        d = s.deliveries
        with self.tx() as conn:
            row = conn.execute(
                select(d.c.journal, d.c.task_id).where(d.c.id == delivery_id, d.c.claim == token)
            ).first()
            if row is None:
                return False
            done = conn.execute(
                update(d)
                .where(d.c.id == delivery_id, d.c.claim == token)
                .values(
                    status=nxt.status,
                    next_at=nxt.retry_at,
                    claim=None,
                    claimed_until=None,
                    journal=[*(row.journal or ()), self.redactor.json(entry)],
                    error=None if error is None else self.redactor.text(error),
                    updated_at=now,
                )
            )
            if done.rowcount != 1:
                return False
            self._reply_follows(conn, row.task_id)
            return True

    def settle_delivery(
        self, delivery_id: uuid.UUID, status: rules.Status, error: str, now: datetime
    ) -> None:
        """End a pending delivery without an attempt (its task ended without a reply)."""
        d = s.deliveries
        with self.tx() as conn:
            task_id = conn.execute(
                update(d)
                .where(d.c.id == delivery_id, d.c.status == "pending")
                .values(
                    status=status, error=self.redactor.text(error), next_at=None, updated_at=now
                )
                .returning(d.c.task_id)
            ).scalar()
            if task_id is not None:
                self._reply_follows(conn, task_id)

    def _reply_follows(self, conn: Connection, task_id: uuid.UUID) -> None:
        d, m = s.deliveries, s.messages
        statuses = conn.execute(select(d.c.status).where(d.c.task_id == task_id)).scalars()
        conn.execute(
            update(m)
            .where(m.c.task_id == task_id, m.c.role == "assistant")
            .values(delivery=rules.reply_status(statuses))
        )

    def due_deliveries(self, before: datetime, limit: int = 500) -> list[uuid.UUID]:
        """Pending deliveries due before ``before`` whose attempt is not under way (a lost
        message, a worker that died mid-attempt): the sweeper sends them again."""
        d = s.deliveries
        return self._ids(
            select(d.c.id)
            .where(
                d.c.status == "pending",
                d.c.next_at < before,
                (d.c.claimed_until.is_(None)) | (d.c.claimed_until < before),
            )
            .order_by(d.c.next_at)
            .limit(limit)
        )

    def _ids(self, query: Select[Any]) -> list[uuid.UUID]:
        """The ids ``query`` selects."""
        with self.read() as conn:
            return list(conn.execute(query).scalars())

    # -- A2A push configs -----------------------------------------------------------------------

    def set_push_config(self, cfg: rules.PushConfig, now: datetime) -> bool:
        """Store (or replace) a config; False, storing nothing, when its id is another
        caller's on this task."""
        p = s.push_configs
        auth = (
            None if cfg.scheme is None else {"scheme": cfg.scheme, "credentials": cfg.credentials}
        )
        with self.tx() as conn:
            held = conn.execute(
                select(p.c.owner).where(p.c.task_id == cfg.task_id, p.c.id == cfg.id)
            ).first()
            if held is not None and held.owner != cfg.owner:
                return False
            # The task's row lock orders this with its settle: the settle returns the flag, or
            # (it came first) the caller sees the task ended and journals the config itself.
            conn.execute(
                update(s.tasks).where(s.tasks.c.id == cfg.task_id).values(push_pending=True)
            )
            conn.execute(delete(p).where(and_(p.c.task_id == cfg.task_id, p.c.id == cfg.id)))
            conn.execute(
                insert(p).values(
                    task_id=cfg.task_id,
                    id=cfg.id,
                    url=cfg.url,
                    token=cfg.token,
                    authentication=auth,
                    owner=cfg.owner,
                    created_at=now,
                )
            )
        return True

    def push_configs(
        self, task_id: uuid.UUID, *, owner: str | None = None
    ) -> list[rules.PushConfig]:
        """A task's configs (``owner``: only that caller's)."""
        p = s.push_configs
        query = select(p).where(p.c.task_id == task_id)
        if owner is not None:
            query = query.where(p.c.owner == owner)
        with self.read() as conn:
            found = conn.execute(query.order_by(p.c.created_at, p.c.id)).all()
        out = []
        for r in found:
            auth = r.authentication or {}
            out.append(
                rules.PushConfig(
                    task_id=r.task_id,
                    id=r.id,
                    url=r.url,
                    token=r.token,
                    scheme=auth.get("scheme"),
                    credentials=auth.get("credentials"),
                    owner=r.owner,
                )
            )
        return out

    def delete_push_config(self, task_id: uuid.UUID, config_id: str, *, owner: str) -> bool:
        """Delete the caller's config (False: there is none of that id that is its own)."""
        p = s.push_configs
        with self.tx() as conn:
            done = conn.execute(
                delete(p).where(p.c.task_id == task_id, p.c.id == config_id, p.c.owner == owner)
            )
            return done.rowcount > 0
