"""What memory tools may do, bound to one run (its namespace, conversation and author)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from fleet.domain.blocks import Block, Edit, NoteReceipt, NoteValue


class MemoryPort(Protocol):
    """Blocks of the run's namespace and notes of its conversation.

    Edits raise ``fleet.errors.Conflict`` (stale ``expected_version``) or ``InputError`` (a
    refused edit); ``authorize`` raises ``Forbidden`` when the policy refuses the action.
    """

    def authorize(self, action: str) -> None: ...

    def block(self, name: str) -> Block | None: ...

    def update_block(self, name: str, edit: Edit, *, receipt: str) -> Block: ...

    def notes(self) -> list[NoteValue]: ...

    def note(self, key: str) -> NoteValue | None: ...

    def set_note(
        self, key: str, body: str, expires_at: datetime | None, *, receipt: str
    ) -> NoteValue: ...

    def remove_note(self, key: str, *, receipt: str) -> bool: ...

    def receipt(self, receipt: str) -> NoteReceipt | None: ...

    def now(self) -> datetime: ...
