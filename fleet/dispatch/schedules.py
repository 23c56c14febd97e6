"""The schedule loop: admits each due tick of every schedule as a task, exactly once.

It runs in every ``fleet beat`` (and in an embedded ``fleet serve``), on a clock of its own:
each pass admits what is due, then it waits until the soonest next tick, at most ``POLL_S`` (an
API-created schedule is seen within that). Of several beats, the one whose compare-and-set of
the schedule's ``last_tick`` succeeds acts on a tick (``fleet.store.schedules``); the task goes
through the ordinary admission with the idempotency key ``schedule:<name>:<tick>``, so a beat
that finds a tick claimed but unrecorded (its claimer was killed) submits it again and gets
the same task. The decisions (which tick, skip or fire) are ``fleet.domain.schedules``'.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import ValidationError

from fleet.config import FleetConfig
from fleet.config.schedules import ScheduleSpec
from fleet.constants import DEFAULT_TENANT
from fleet.domain import keys
from fleet.domain import schedules as rules
from fleet.domain.keys import api_scope
from fleet.errors import Conflict, FleetError, InputError, NotFound, Unavailable
from fleet.store.db import describe

if TYPE_CHECKING:
    from fleet.dispatch.manager import Dispatcher

log = logging.getLogger(__name__)

#: Longest wait between two passes (a new or deleted schedule is seen within it).
POLL_S = 0.5
#: Shortest wait between two passes (a tick due now is acted on in this pass).
MIN_WAIT_S = 0.01
#: The wait after a pass that left a tick overdue (a pass that took long, a row that fails):
#: soon, but never a spin.
OVERDUE_WAIT_S = 0.1
#: Ticks one schedule may act on in one pass (then the next pass goes on).
MAX_STEPS = 20
#: Logged once the loop runs (tests and operators can wait for it).
STARTED = "fleet schedules started"


def identity(config: FleetConfig, caller: str | None) -> tuple[str, str]:
    """The tenant and scope of a schedule's tasks: its caller's, or the open API's."""
    if caller is None:
        return DEFAULT_TENANT, api_scope(DEFAULT_TENANT)
    return config.tenant_of_caller(caller), config.callers[caller].home


#: What an unstored file schedule's note says (``fleet schedules ls`` reads; only a beat writes).
NOT_STORED = "in config/schedules, not stored yet: a fleet beat stores it when it starts"


def configured(config: FleetConfig, tenant: str, scope: str, name: str) -> bool:
    """Is ``name`` a schedule of config/schedules in this tenant and scope?"""
    sched = config.schedules.get(name)
    return sched is not None and identity(config, sched.caller) == (tenant, scope)


def with_files(
    config: FleetConfig,
    stored: list[rules.Record],
    now: datetime,
    *,
    only: tuple[str, str] | None = None,
) -> list[rules.Record]:
    """The stored schedules and those of config/schedules that no beat has stored yet (state
    ``unsynced``, their next tick as the file says; ``only``: of this tenant and scope), by
    name as the store lists them: what a listing shows without writing anything (a beat
    syncs the files when it starts)."""
    held = {(r.tenant, r.scope, r.name) for r in stored}
    out = list(stored)
    for name, sched in sorted(config.schedules.items()):
        tenant, scope = identity(config, sched.caller)
        if (tenant, scope, name) in held or (only is not None and only != (tenant, scope)):
            continue
        spec = sched.spec
        out.append(
            rules.Record(
                id=uuid.uuid5(uuid.NAMESPACE_URL, f"fleet:schedule:{tenant}:{scope}:{name}"),
                tenant=tenant,
                scope=scope,
                name=name,
                source="file",
                caller=sched.caller,
                spec=spec.stored(),
                last_tick=None,
                state="unsynced",
                last_task_id=None,
                next_tick=spec.next_tick(now),
                fired=0,
                skipped=0,
                note=NOT_STORED,
                created_at=now,
                updated_at=now,
            )
        )
    return sorted(out, key=lambda r: (r.name, r.tenant, r.scope))


def one(dispatcher: Dispatcher, tenant: str, scope: str, name: str) -> rules.Record | None:
    """A schedule of this tenant and scope, stored or (not stored yet) in config/schedules."""
    found = dispatcher.store.schedule(tenant, scope, name)
    if found is not None:
        return found
    files = with_files(dispatcher.config, [], dispatcher.clock(), only=(tenant, scope))
    return next((r for r in files if r.name == name), None)


def idempotency_key(name: str, tick: datetime) -> str:
    """The key a tick's task is admitted with: one task per schedule and tick."""
    return f"schedule:{name}:{rules.tick_text(tick)}"


class Scheduler:
    """Fires due ticks through a dispatcher's admission."""

    def __init__(
        self, dispatcher: Dispatcher, *, newer: Callable[[], bool] = lambda: False
    ) -> None:
        self.d = dispatcher
        self.store = dispatcher.store
        #: Is a process of a newer release live (the fleet's registry)? While one is, this
        #: beat leaves alone what its release does not know (a schedule whose settings it
        #: cannot read or whose deployment its config lacks, a file schedule its files lack):
        #: the newer release's beat fires it, instead of this one refusing or deleting it.
        self.newer = newer
        self._left: set[uuid.UUID] = set()

    def sync(self) -> int:
        """Bring the rows of ``config/schedules`` in line with the files; how many there are."""
        now = self.d.clock()
        kept: list[uuid.UUID] = []
        for name, sched in self.d.config.schedules.items():
            tenant, scope = identity(self.d.config, sched.caller)
            spec = sched.spec
            row = self.store.sync_file_schedule(
                tenant=tenant,
                scope=scope,
                name=name,
                caller=sched.caller,
                spec=spec.stored(),
                next_tick=spec.next_tick,
                now=now,
            )
            kept.append(row.id)
        if self.newer():  # a newer release's files may hold schedules these do not
            log.info("schedules: a newer release runs; its file schedules are kept")
            return len(kept)
        dropped = self.store.drop_file_schedules(kept)
        if dropped:
            log.info("schedules: %d whose file is gone deleted", dropped)
        return len(kept)

    def run_pass(self) -> int:
        """Act on every due schedule; the number of tasks admitted."""
        fired = 0
        for found in self.store.due_schedules(self.d.clock()):
            try:
                fired += self._act(found)
            except Unavailable:
                raise
            except Exception as exc:  # one schedule's failure does not hold up the others
                log.warning(
                    "schedule %s failed: %s: %s", found.name, type(exc).__name__, describe(exc)
                )
                log.debug("schedule failure", exc_info=True)
        return fired

    def _act(self, found: rules.Record) -> int:
        """Act on one schedule's due ticks, one compare-and-set at a time."""
        try:
            spec = ScheduleSpec.model_validate(found.spec)
        except ValidationError as exc:  # written by another version of fleet, say
            if self._leave(found, "its settings are not valid in this release"):
                return 0
            log.warning("schedule %s: settings not valid here, it stops: %s", found.name, exc)
            self.store.set_next_tick(found.id, None, self.d.clock())
            return 0
        if spec.deployment not in self.d.config.deployments and self._leave(
            found, f"this config has no deployment {spec.deployment!r}"
        ):
            return 0
        fired = 0
        rec: rules.Record | None = found
        for _ in range(MAX_STEPS):
            if rec is None:
                return fired  # deleted meanwhile
            if rec.state == "firing":
                assert rec.last_tick is not None
                fired += self._submit(rec, spec, rec.last_tick)
            else:
                now = self.d.clock()
                action = rules.next_action(
                    spec.timing,
                    spec.tz,
                    rec.since,
                    now,
                    catch_up=spec.catch_up,
                    end_at=spec.end_at,
                )
                if action is None:
                    self._keep_next_tick(rec, spec, now)
                    return fired
                self._claim(rec, spec, action, now)
            rec = self.store.schedule_by_id(found.id)
        return fired

    def _claim(
        self, rec: rules.Record, spec: ScheduleSpec, action: rules.Fire | rules.Skip, now: datetime
    ) -> None:
        after = spec.next_tick(action.tick)
        if isinstance(action, rules.Skip):
            note = f"missed ticks up to {rules.tick_text(action.tick)} (catch_up = {spec.catch_up})"
            self.store.claim_tick(rec, action.tick, "skipped", after, now, note=note)
            return
        busy = self._unfinished(rec.last_task_id)
        if not rules.overlap_allows(spec.overlap, busy):
            note = f"overlap: task {rec.last_task_id} of the previous tick is not finished"
            if self.store.claim_tick(rec, action.tick, "skipped", after, now, note=note):
                log.info("schedule %s: tick %s skipped (%s)", rec.name, action.tick, note)
            return
        self.store.claim_tick(rec, action.tick, "firing", after, now)

    def _submit(self, rec: rules.Record, spec: ScheduleSpec, tick: datetime) -> int:
        """Admit a claimed tick's task (again, if its claimer died: the same task) and record
        it; a refusal (quota, a deployment gone) is recorded as the tick's outcome."""
        text = rules.tick_text(tick)
        try:
            adm = self.d.submit(
                spec.deployment,
                spec.input,
                scope=rec.scope,
                key=spec.conversation,
                labels={"schedule": rec.name, "tick": text},
                idempotency_key=idempotency_key(rec.name, tick),
                caller=rec.caller,
                delivery="followup",
                tenant=rec.tenant,
            )
        except Unavailable:
            raise
        except FleetError as exc:
            log.warning("schedule %s: tick %s refused: %s", rec.name, text, exc.message)
            self.store.settle_tick(rec.id, tick, None, self.d.clock(), note=exc.message)
            return 0
        if self.store.settle_tick(rec.id, tick, adm.task.id, self.d.clock()):
            log.info("schedule %s: tick %s fired task %s", rec.name, text, adm.task.id)
        return 0 if adm.duplicate else 1

    def _leave(self, found: rules.Record, why: str) -> bool:
        """Leave ``found`` to a newer release's beat, if one runs (said once per schedule)."""
        if not self.newer():
            return False
        if found.id not in self._left:
            self._left.add(found.id)
            log.info("schedule %s: left to a newer release's beat (%s)", found.name, why)
        return True

    def _unfinished(self, task_id: uuid.UUID | None) -> bool:
        if task_id is None:
            return False
        try:
            return not self.store.get_task(task_id).status.terminal
        except NotFound:
            return False

    def _keep_next_tick(self, rec: rules.Record, spec: ScheduleSpec, now: datetime) -> None:
        """A due row with nothing to do (its ``end_at`` passed): store its real next tick."""
        if rec.next_tick is not None and rec.next_tick <= now:
            self.store.set_next_tick(rec.id, spec.next_tick(rec.since), now)

    # -- the loop ------------------------------------------------------------------------------

    def pass_logged(self) -> None:
        """One pass; an outage or a bug is a logged warning, not raised: the next pass retries."""
        try:
            self.run_pass()
        except FleetError as exc:  # the database is down (Unavailable)
            log.warning("schedules skipped a pass: %s", exc.message)
        except Exception as exc:
            log.warning("schedules pass failed: %s: %s", type(exc).__name__, describe(exc))
            log.debug("schedules pass failure", exc_info=True)

    def wait_s(self) -> float:
        """How long until the next pass: until the soonest tick, at most ``POLL_S``."""
        try:
            soonest = self.store.earliest_tick()
        except Exception:
            return POLL_S
        if soonest is None:
            return POLL_S
        left = (soonest - self.d.clock()).total_seconds()
        if left <= 0:
            return OVERDUE_WAIT_S
        return min(POLL_S, max(MIN_WAIT_S, left))

    def run(self, stop: threading.Event) -> None:
        """Sync the files' schedules, then pass after pass until ``stop`` is set."""
        while not stop.is_set():
            try:
                count = self.sync()
                break
            except Exception as exc:
                log.warning("schedules not synced yet: %s", describe(exc))
                stop.wait(POLL_S)
        else:
            return
        log.info("%s: %d from config/schedules", STARTED, count)
        while not stop.is_set():
            self.pass_logged()
            stop.wait(self.wait_s())

    def start(self, stop: threading.Event | None = None) -> None:
        """``run`` on a daemon thread of its own until ``stop`` is set (or ``stop()``)."""
        self._stop = stop or threading.Event()
        self._thread = threading.Thread(target=self.run, args=(self._stop,), name="fleet-schedules")
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        """End the thread ``start`` started (a pass under way finishes first)."""
        self._stop.set()
        self._thread.join()


# -- managing schedules (the API's CreateSchedule / DeleteSchedule, `fleet schedules`) ---------


def create(
    dispatcher: Dispatcher,
    name: str,
    spec: ScheduleSpec,
    *,
    tenant: str,
    scope: str,
    caller: str | None,
) -> rules.Record:
    """Store a schedule made over the API or the CLI: its deployment exists and takes its
    input (InputError naming the field), its name is free in the scope (Conflict)."""
    config = dispatcher.config
    if configured(config, tenant, scope, name):  # stored by a beat, or about to be
        raise Conflict(
            f"a schedule named {name!r} exists in scope {scope!r} (from config/schedules); "
            "delete it first or pick another name",
            field="name",
        )
    try:
        dep = config.deployment(spec.deployment)
    except NotFound as exc:
        raise InputError(exc.message, field="deployment") from None
    try:  # a key of another source's scope is refused now, not at each tick
        keys.resolve(dep.kind, scope, spec.conversation)
    except FleetError as exc:
        raise type(exc)(exc.message, field="conversation") from None
    limit = config.agents[dep.agent].max_input_bytes
    if len(spec.input.encode()) > limit:
        raise InputError(
            f"input is {len(spec.input.encode())} bytes; deployment {dep.name!r} takes at most "
            f"{limit}",
            field="input",
        )
    now = dispatcher.clock()
    first = spec.next_tick(now)
    if first is None:
        assert spec.end_at is not None
        raise InputError(
            f"endAt {spec.end_at.isoformat()} is not after the first tick: it would never fire; "
            "give a later time or leave it out",
            field="endAt",
        )
    return dispatcher.store.create_schedule(
        tenant=tenant,
        scope=scope,
        name=name,
        source="api",
        caller=caller,
        spec=spec.stored(),
        next_tick=first,
        now=now,
    )


def delete(dispatcher: Dispatcher, name: str, *, tenant: str, scope: str) -> None:
    """Delete a schedule of this scope made over the API; one from config/schedules is a
    Conflict (delete its file), none of that name NotFound."""
    store = dispatcher.store
    found = store.schedule(tenant, scope, name)
    if found is None and not configured(dispatcher.config, tenant, scope, name):
        raise NotFound(f"no schedule named {name!r}", field="name")
    if found is None or found.source == "file":
        raise Conflict(
            f"schedule {name!r} is defined in config/schedules/{name}.toml: delete the file "
            "(the beat then deletes the schedule)",
            field="name",
        )
    if not store.delete_schedule(tenant, scope, name):
        raise NotFound(f"no schedule named {name!r}", field="name")
