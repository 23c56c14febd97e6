"""The schedules' table: one row per schedule (a file's or one created over the API), holding
the last tick a beat acted on, so that every beat carries on where the last one stopped.

Re-exported by ``fleet.store.schema`` (``s.schedules``).
"""

from __future__ import annotations

import uuid

from sqlalchemy import (
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)

from fleet.store.schema_types import JSONType, UTCDateTime, metadata, stamp, tenant

#: A schedule and where its ticks stand.
#:
#: A beat acts on a tick only by a compare-and-set of ``last_tick`` (from the value it read, and
#: not while a tick is ``firing``), so of several beats one claims each tick. A claimed tick is
#: ``firing`` until its task is recorded; its task is admitted with the idempotency key
#: ``schedule:<name>:<tick>``, so a beat that finds a ``firing`` tick (its claimer died) submits
#: it again and gets the same task.
schedules = Table(
    "schedules",
    metadata,
    Column("id", Uuid, primary_key=True, default=uuid.uuid4),
    # The tenant and scope its tasks take (its caller's): only that scope sees it over the API.
    tenant(),
    Column("scope", String(200), nullable=False),
    Column("name", String(63), nullable=False),
    # ``file`` (config/schedules, synced by the beat) or ``api`` (CreateSchedule, the CLI).
    Column("source", String(8), nullable=False),
    # The configured caller its tasks are submitted as (None: the open API's).
    Column("caller", String(200)),
    # Its settings as ``fleet.config.schedules.ScheduleSpec`` dumps them.
    Column("spec", JSONType, nullable=False),
    # The last tick acted on (fired or skipped); None: none yet (ticks after created_at are due).
    Column("last_tick", UTCDateTime()),
    # What happened to it: ``new``, ``firing`` (claimed, its task not recorded yet), ``fired``,
    # ``skipped`` or ``refused`` (the submission was refused: ``note`` says why).
    Column("state", String(16), nullable=False, default="new", server_default="new"),
    # The task of the last fired tick (overlap = skip waits for it to finish).
    Column("last_task_id", Uuid, ForeignKey("tasks.id", ondelete="SET NULL")),
    # The next tick after last_tick (None: ended): what the beat's scan and the UI read.
    Column("next_tick", UTCDateTime()),
    Column("fired", Integer, nullable=False, default=0, server_default="0"),
    Column("skipped", Integer, nullable=False, default=0, server_default="0"),
    # Why the last tick was skipped or refused.
    Column("note", Text),
    stamp("created_at"),
    stamp("updated_at"),
    UniqueConstraint("tenant", "scope", "name"),
    # The beat's scan for due schedules.
    Index("ix_schedules_next_tick", "next_tick"),
)
