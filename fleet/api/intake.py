"""SubmitTask's admission without a thread-pool hop where the store allows it.

On PostgreSQL the common submission (followup without a queue cap, no idempotency key, no
resource to check against erasures, no authorize policy to ask) is one statement: its checks
run on the event loop (they read nothing),
the statement runs on the loop's own connections (``fleet.store.aio``), and the answer is sent
once it has committed (a conversation's first task reads its key's tombstone, the
``freshAfterDelete`` notice, in that statement). Everything else (SQLite, the
admission transaction, a policy that reads the store) runs on the thread pool as before. Either
way the same steps apply: they are the dispatcher's (``fleet.dispatch.intake``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from fleet.domain.values import Admission
from fleet.runtime import Runtime
from fleet.store.aio import AsyncStatements


class Intake:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._statements = (
            AsyncStatements.for_engine(rt.store.engine) if rt.store.one_statement_path else None
        )

    async def submit(self, deployment: str, input: Any, **options: Any) -> Admission:
        """``Dispatcher.submit``'s admission; the same arguments, answers and store effects."""
        dispatcher = self._rt.dispatcher
        steps = dispatcher.admissions
        # a task naming a resource reads the store: is the resource erased?
        if (
            self._statements is None
            or not steps.checks_without_store
            or options.get("resource_id") is not None
        ):
            return await run_in_threadpool(partial(dispatcher.submit, deployment, input, **options))
        sub = steps.submission(deployment, input, **options)
        single = dispatcher.store.admit_statement(sub, dispatcher.clock())
        if single is None:  # the admission transaction (queue modes, caps, idempotency keys)
            return await run_in_threadpool(steps.admit, sub)
        row = await self._statements.first(*single)
        assert row is not None  # an INSERT … SELECT from an upsert always returns its row
        return steps.admitted(dispatcher.store.admitted(row))

    async def close(self) -> None:
        if self._statements is not None:
            await self._statements.close()
