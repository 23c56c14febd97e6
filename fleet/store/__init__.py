"""The store port: one class, one concern per module, the same code for PostgreSQL and SQLite."""

from __future__ import annotations

from fleet.domain.blocks import Block, BlockVersion, NoteValue
from fleet.domain.redaction import Redactor
from fleet.domain.runs import Outcome, TraceRow
from fleet.store import db
from fleet.store.admission import AdmissionStore
from fleet.store.audit import AuditStore
from fleet.store.bulk import BulkStore
from fleet.store.claims import Chain, Claim, Head, Prepared, Started
from fleet.store.delegation import DelegationStore
from fleet.store.deliveries import DeliveryStore
from fleet.store.event_waits import EventWaitStore
from fleet.store.events import EventStore
from fleet.store.followups import FollowupStore
from fleet.store.leasing import LeasingStore
from fleet.store.lifecycle import ConversationInfo, LifecycleStore, Tombstone
from fleet.store.memory import MemoryStore
from fleet.store.nearest import VectorStore
from fleet.store.operator import OperatorStore
from fleet.store.queries import CancelResult, QueryStore, TaskFilter
from fleet.store.quotas import QuotaStore, TenantFigures
from fleet.store.recall import ObservationStore, RecallStore
from fleet.store.rights import RightsStore
from fleet.store.schedules import ScheduleStore
from fleet.store.snapshots import ConfigInUse, SnapshotStore
from fleet.store.tenancy import TenancyStore
from fleet.store.waits import WaitStore

__all__ = [
    "Block",
    "BlockVersion",
    "CancelResult",
    "Chain",
    "Claim",
    "ConfigInUse",
    "ConversationInfo",
    "Head",
    "NoteValue",
    "Outcome",
    "Prepared",
    "Started",
    "Store",
    "TaskFilter",
    "TenantFigures",
    "Tombstone",
    "TraceRow",
]


class Store(
    AdmissionStore,
    LeasingStore,
    QueryStore,
    MemoryStore,
    RecallStore,
    VectorStore,
    ObservationStore,
    EventStore,
    OperatorStore,
    DelegationStore,
    DeliveryStore,
    LifecycleStore,
    TenancyStore,
    QuotaStore,
    WaitStore,
    EventWaitStore,
    FollowupStore,
    ScheduleStore,
    SnapshotStore,
    BulkStore,
    RightsStore,
    AuditStore,
):
    """Everything fleet reads or writes in its database."""

    @classmethod
    def open(
        cls,
        url: str,
        redactor: Redactor,
        *,
        readonly: bool = False,
        pooler: str | None = None,
        pool_size: int = db.POOL_SIZE,
    ) -> Store:
        """``pooler``: ``FLEET_DATABASE_POOLER``; ``pool_size``: ``FLEET_DATABASE_POOL_SIZE``, the
        most connections this process holds (``db.create``)."""
        return cls(db.create(url, readonly=readonly, pooler=pooler, pool_size=pool_size), redactor)
