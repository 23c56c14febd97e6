"""The memory port over the store, bound to one run: its namespace, conversation and author."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime

from fleet.domain.blocks import Block, Edit, NoteReceipt, NoteValue
from fleet.store import Store


class StoreMemory:
    """Blocks of the tenant's ``namespace`` and notes of one conversation, written as
    ``run:<run id>``."""

    def __init__(
        self,
        store: Store,
        *,
        tenant: str,
        namespace: str,
        conversation_id: uuid.UUID,
        run_id: uuid.UUID,
        clock: Callable[[], datetime],
        authorize: Callable[[str], None] = lambda action: None,
    ) -> None:
        self._store = store
        self._tenant = tenant
        self._namespace = namespace
        self._conversation = conversation_id
        self._author = f"run:{run_id}"
        self._clock = clock
        self._authorize = authorize

    def authorize(self, action: str) -> None:
        self._authorize(action)

    def now(self) -> datetime:
        return self._clock()

    def block(self, name: str) -> Block | None:
        return self._store.get_block(self._namespace, name, tenant=self._tenant)

    def update_block(self, name: str, edit: Edit, *, receipt: str) -> Block:
        return self._store.edit_block(
            self._namespace,
            name,
            edit,
            tenant=self._tenant,
            author=self._author,
            now=self._clock(),
            receipt=receipt,
        )

    def notes(self) -> list[NoteValue]:
        return self._store.list_notes(self._conversation, self._clock())

    def note(self, key: str) -> NoteValue | None:
        return self._store.get_note(self._conversation, key, self._clock())

    def set_note(
        self, key: str, body: str, expires_at: datetime | None, *, receipt: str
    ) -> NoteValue:
        return self._store.set_note(
            self._conversation, key, body, self._clock(), expires_at, receipt=receipt
        )

    def remove_note(self, key: str, *, receipt: str) -> bool:
        return self._store.remove_note(self._conversation, key, now=self._clock(), receipt=receipt)

    def receipt(self, receipt: str) -> NoteReceipt | None:
        return self._store.note_receipt(self._conversation, receipt)
