"""Memory block edits and note rules (pure): what a change does, or why it is refused."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from fleet.errors import Conflict, InputError

#: A block's name: what agents attach and people type.
BLOCK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
#: A block's value: at most this many UTF-8 bytes.
MAX_BLOCK_BYTES = 65_536
#: A note key: 1-128 characters without control characters.
NOTE_KEY = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,128}")
#: A note body: at most this many UTF-8 bytes.
MAX_NOTE_BYTES = 2048
#: Live notes per conversation.
MAX_NOTES = 100
#: Notes one list returns.
MAX_NOTES_LISTED = 50

Op = Literal["replace", "append", "str_replace"]


@dataclass(frozen=True, slots=True)
class Edit:
    """A change to a block: ``replace`` (text), ``append`` (text) or ``str_replace`` (old → new)."""

    op: Op
    text: str = ""
    old: str = ""
    expected_version: int | None = None


def check_block_name(name: str) -> str:
    if not BLOCK_NAME.fullmatch(name):
        raise InputError(
            f"block name {name!r} must be 1-100 lowercase letters, digits, '.', '_' or '-'",
            field="block",
        )
    return name


def allowed_ops(mode: str) -> tuple[Op, ...]:
    """What an agent attached in ``mode`` may do to a block."""
    if mode == "write":
        return ("replace", "append", "str_replace")
    if mode == "append":
        return ("append",)
    return ()


def apply(current: str, version: int, edit: Edit, *, max_bytes: int = MAX_BLOCK_BYTES) -> str:
    """The block's new value; Conflict on a stale ``expected_version``, InputError on a bad edit."""
    if edit.expected_version is not None and edit.expected_version != version:
        raise Conflict(
            f"the block is at version {version}, not {edit.expected_version}: read it again and "
            "apply your change to the current value",
            field="expectedVersion",
        )
    if edit.op == "replace":
        new = edit.text
    elif edit.op == "append":
        new = (
            current + edit.text
            if not current or current.endswith("\n")
            else (current + "\n" + edit.text)
        )
    else:
        if not edit.old:
            raise InputError("str_replace needs the text to replace (old)", field="old")
        count = current.count(edit.old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise InputError(
                f"old text {where} in the block (it must occur exactly once); the block's "
                f"current value (version {version}) is:\n{current}",
                field="old",
            )
        new = current.replace(edit.old, edit.text, 1)
    size = len(new.encode())
    if size > max_bytes:
        raise InputError(
            f"the block would be {size} bytes (now {len(current.encode())}, the edit adds "
            f"{size - len(current.encode())}); a block holds at most {max_bytes} bytes",
            field="text",
        )
    return new


def check_note(key: str, body: str) -> None:
    if not NOTE_KEY.fullmatch(key):
        raise InputError("a note key is 1-128 characters without control characters", field="key")
    size = len(body.encode())
    if size > MAX_NOTE_BYTES:
        raise InputError(f"a note body is at most {MAX_NOTE_BYTES} bytes, got {size}", field="body")


@dataclass(frozen=True, slots=True)
class Block:
    namespace: str
    name: str
    title: str
    description: str
    value: str
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class BlockVersion:
    version: int
    value: str
    author: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class NoteReceipt:
    """What a notes tool call answered, kept so a retried call answers the same."""

    op: str
    key: str
    outcome: dict[str, object]


@dataclass(frozen=True, slots=True)
class NoteValue:
    key: str
    body: str
    expires_at: datetime | None
    updated_at: datetime
