"""SubmitTask's admission without a thread-pool hop where the store allows it.

On PostgreSQL the common submission (followup without a queue cap, no idempotency key, no
authorize policy to ask) is one statement: its checks run on the event loop (they read nothing),
the statement runs on the loop's own connections (``fleet.store.aio``), and the answer is sent
once it has committed. The first task of a conversation under the caller's key reads its
tombstone (the ``freshAfterDelete`` notice) on the thread pool. Everything else (SQLite, the
admission transaction, a policy that reads the store) runs on the thread pool as before. Either
way the same steps apply: they are the dispatcher's (``fleet.dispatch.intake``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from fleet.dispatch.intake import may_follow_delete
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
        if self._statements is None or not steps.checks_without_store:
            return await run_in_threadpool(partial(dispatcher.submit, deployment, input, **options))
        sub = steps.submission(deployment, input, **options)
        keyed = bool(options.get("key"))
        single = dispatcher.store.admit_statement(sub, dispatcher.clock())
        if single is None:  # the admission transaction (queue modes, caps, idempotency keys)
            return await run_in_threadpool(partial(steps.admit, sub, keyed=keyed))
        row = await self._statements.first(*single)
        assert row is not None  # an INSERT … SELECT from an upsert always returns its row
        admission = dispatcher.store.admitted(row)
        if may_follow_delete(keyed, admission):
            # A new conversation under the caller's key: its tombstone's notice, if it has one.
            admission = await run_in_threadpool(steps.noticed, sub, admission)
        return steps.admitted(admission)

    async def close(self) -> None:
        if self._statements is not None:
            await self._statements.close()
