"""Moving conversations stored before tenants into their tenants (``fleet migrate``'s last step).

Which tenant each goes to is ``fleet.domain.tenancy``'s decision; here are the reads it needs
and the move itself: one transaction per conversation, rewriting the conversation, its tasks,
their idempotency keys and its messages' embeddings. Idempotent: a moved conversation is no
longer the ``default`` tenant's, so a second run finds nothing to do.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator

from sqlalchemy import and_, func, select, update
from sqlalchemy.exc import IntegrityError

from fleet.constants import DEFAULT_TENANT
from fleet.domain import tenancy as rules
from fleet.domain.keys import SINGLETON_SCOPE
from fleet.domain.tenancy import Legacy, Move
from fleet.store import schema as s
from fleet.store.base import StoreBase
from fleet.store.clauses import named

c, t, k, e = s.conversations, s.tasks, s.idempotency_keys, s.message_embeddings
#: Conversations read a batch at a time.
BATCH = 1000


class TenancyStore(StoreBase):
    def legacy_conversations(
        self, *, delegated: bool = False
    ) -> Iterator[tuple[uuid.UUID, Legacy]]:
        """The ``default`` tenant's conversations a move may concern (not singletons): API,
        webhook and A2A ones, or (``delegated``) the delegated ones, with what decides."""
        after = uuid.UUID(int=0)
        while True:
            scope_is = c.c.scope.like("agent:%") if delegated else ~c.c.scope.like("agent:%")
            with self.read() as conn:
                found = conn.execute(
                    select(c.c.id, c.c.scope)
                    .where(
                        c.c.tenant == DEFAULT_TENANT,
                        c.c.scope != SINGLETON_SCOPE,
                        scope_is,
                        c.c.id > after,
                    )
                    .order_by(c.c.id)
                    .limit(BATCH)
                ).all()
                if not found:
                    return
                ids = [r.id for r in found]
                callers: dict[uuid.UUID, set[str | None]] = defaultdict(set)
                parents: dict[uuid.UUID, str] = {}
                if delegated:
                    d, p = s.delegations, t.alias("p")
                    for conv, tenant in conn.execute(
                        select(t.c.conversation_id, p.c.tenant)
                        .join(d, d.c.task_id == t.c.id)
                        .join(p, p.c.id == d.c.parent_task_id)
                        .where(t.c.conversation_id.in_(ids))
                    ):
                        parents.setdefault(conv, tenant)
                else:
                    ib = s.run_inbox
                    for query in (
                        select(t.c.conversation_id, t.c.caller).where(t.c.conversation_id.in_(ids)),
                        select(ib.c.conversation_id, ib.c.caller).where(
                            ib.c.conversation_id.in_(ids)
                        ),
                    ):
                        for conv, caller in conn.execute(query.distinct()):
                            callers[conv].add(caller)
            for row in found:
                yield row.id, Legacy(row.scope, frozenset(callers[row.id]), parents.get(row.id))
            after = found[-1].id

    def move_conversation(self, conversation_id: uuid.UUID, to: Move) -> bool:
        """Move one conversation of the ``default`` tenant; False if it moved meanwhile or a
        conversation of that identity exists in the tenant already (it stays)."""
        with self.tx() as conn:
            row = conn.execute(
                select(c.c.deployment, c.c.scope, c.c.key)
                .where(c.c.id == conversation_id, c.c.tenant == DEFAULT_TENANT)
                .with_for_update()
            ).first()
            if row is None:
                return False
            taken = conn.execute(
                select(c.c.id).where(*named(c, row.deployment, to.tenant, to.scope, row.key))
            ).first()
            if taken is not None:
                return False
            conn.execute(
                update(c).where(c.c.id == conversation_id).values(tenant=to.tenant, scope=to.scope)
            )
            task_ids = select(t.c.id).where(t.c.conversation_id == conversation_id)
            conn.execute(
                update(k)
                .where(and_(k.c.task_id.in_(task_ids), k.c.scope == row.scope))
                .values(tenant=to.tenant, scope=to.scope)
            )
            conn.execute(
                update(k)
                .where(k.c.task_id.in_(task_ids), k.c.tenant == DEFAULT_TENANT)
                .values(tenant=to.tenant)
            )
            conn.execute(
                update(t)
                .where(t.c.conversation_id == conversation_id)
                .values(tenant=to.tenant, scope=to.scope)
            )
            conn.execute(
                update(e)
                .where(e.c.conversation_id == conversation_id)
                .values(tenant=to.tenant, scope=to.scope)
            )
        return True

    def assign_tenants(
        self,
        tenant_of_caller: Callable[[str], str | None],
        tenant_of_scope: Callable[[str], str | None],
    ) -> dict[str, int]:
        """Move every conversation stored before tenants into the tenant it belongs to
        (``fleet.domain.tenancy``): counts of ``moved``, ``shared`` (an ``api`` conversation that
        stays in the shared scope: mixed or unknown callers) and ``stayed`` (others left with
        ``default``)."""
        counts = {"moved": 0, "shared": 0, "stayed": 0}
        for delegated in (False, True, True, True):  # chains: a pass per delegation level
            for conversation_id, legacy in list(self.legacy_conversations(delegated=delegated)):
                to = rules.move(legacy, tenant_of_caller, scoped=tenant_of_scope(legacy.scope))
                moved = False
                if to is not None:
                    try:
                        moved = self.move_conversation(conversation_id, to)
                    except IntegrityError:  # the tenant took the same key meanwhile: it stays
                        moved = False
                if moved:
                    counts["moved"] += 1
                elif not delegated:
                    counts["shared" if legacy.scope == "api" else "stayed"] += 1
        with self.read() as conn:
            counts["stayed"] += int(
                conn.execute(
                    select(func.count()).where(
                        c.c.tenant == DEFAULT_TENANT,
                        c.c.scope.like("agent:%") | (c.c.scope == SINGLETON_SCOPE),
                    )
                ).scalar_one()
            )
        return counts
