"""Memory blocks and notes: contract tests on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from fleet.domain.admission import QueuePolicy, Submission
from fleet.domain.blocks import MAX_NOTES, Edit
from fleet.domain.redaction import Redactor
from fleet.domain.values import TextPart
from fleet.errors import Conflict, InputError, NotFound
from fleet.store import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def conversation(store: Store) -> uuid.UUID:
    sub = Submission("chat", "api", "k", (TextPart(text="x"),), 1, {}, None, QueuePolicy(), 3, 100)
    return store.admit(sub, T0).task.conversation_id


def test_blocks_and_notes_survive_a_process_restart(db_url: str) -> None:
    writer = Store.open(db_url, Redactor())
    conv = conversation(writer)
    writer.edit_block(
        "ns", "prefs", Edit("replace", "metric"), author="user", now=T0, tenant="default"
    )
    writer.edit_block(
        "ns", "prefs", Edit("append", "likes tea"), author="run:1", now=T0, tenant="default"
    )
    writer.set_note(conv, "size", "L", T0)
    writer.dispose()
    # another process opens the same database and reads both back
    read = textwrap.dedent(
        f"""
        import json, uuid
        from datetime import datetime
        from fleet.domain.redaction import Redactor
        from fleet.store import Store
        store = Store.open({db_url!r}, Redactor())
        block = store.get_block("ns", "prefs", tenant="default")
        conv, when = uuid.UUID({str(conv)!r}), datetime.fromisoformat({T0.isoformat()!r})
        note = store.get_note(conv, "size", when)
        authors = [v.author for v in store.block_history("ns", "prefs", tenant="default")]
        print(json.dumps([block.value, block.version, authors, note.body]))
        store.dispose()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", read], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["metric\nlikes tea", 2, ["user", "run:1"], "L"]
    reopened = Store.open(db_url, Redactor())  # and a new store object in this one
    try:
        block = reopened.get_block("ns", "prefs", tenant="default")
        assert block is not None and (block.value, block.version) == ("metric\nlikes tea", 2)
        note = reopened.get_note(conv, "size", T0)
        assert note is not None and note.body == "L"
    finally:
        reopened.dispose()


def test_blocks_keep_every_version(store: Store) -> None:
    first = store.edit_block(
        "ns",
        "prefs",
        Edit("replace", "metric"),
        author="user",
        now=T0,
        title="Prefs",
        tenant="default",
    )
    assert (first.version, first.value, first.title) == (1, "metric", "Prefs")
    second = store.edit_block(
        "ns", "prefs", Edit("append", "likes Go"), author="run:1", now=T0, tenant="default"
    )
    assert (second.version, second.value, second.title) == (2, "metric\nlikes Go", "Prefs")
    third = store.edit_block(
        "ns",
        "prefs",
        Edit("str_replace", "Rust", old="Go", expected_version=2),
        author="run:2",
        now=T0,
        tenant="default",
    )
    assert third.value == "metric\nlikes Rust"
    history = store.block_history("ns", "prefs", tenant="default")
    assert [(h.version, h.author) for h in history] == [(1, "user"), (2, "run:1"), (3, "run:2")]
    assert [b.name for b in store.list_blocks("ns", tenant="default")] == ["prefs"]
    assert store.list_blocks("other", tenant="default") == []


def test_a_stale_expected_version_is_refused_and_changes_nothing(store: Store) -> None:
    store.edit_block("ns", "b", Edit("replace", "one"), author="user", now=T0, tenant="default")
    store.edit_block("ns", "b", Edit("replace", "two"), author="user", now=T0, tenant="default")
    with pytest.raises(Conflict, match="version 2, not 1"):
        store.edit_block(
            "ns",
            "b",
            Edit("replace", "three", expected_version=1),
            author="x",
            now=T0,
            tenant="default",
        )
    with pytest.raises(InputError, match="exactly once"):
        store.edit_block(
            "ns", "b", Edit("str_replace", "x", old="absent"), author="x", now=T0, tenant="default"
        )
    block = store.get_block("ns", "b", tenant="default")
    assert block is not None and (block.value, block.version) == ("two", 2)


def test_blocks_are_redacted_and_unknown_ones_are_not_found(store: Store) -> None:
    store.edit_block(
        "ns",
        "s",
        Edit("replace", "token sk-test-secret-value-1234567890"),
        author="user",
        now=T0,
        tenant="default",
    )
    block = store.get_block("ns", "s", tenant="default")
    assert block is not None and "sk-test-secret" not in block.value
    with pytest.raises(NotFound):
        store.block_history("ns", "missing", tenant="default")


def test_notes_set_get_list_remove_and_expire(store: Store) -> None:
    conv = conversation(store)
    store.set_note(conv, "size", "M", T0)
    store.set_note(conv, "size", "L", T0)
    store.set_note(conv, "temp", "soon gone", T0, expires_at=T0 + timedelta(seconds=5))
    assert [(x.key, x.body) for x in store.list_notes(conv, T0)] == [
        ("size", "L"),
        ("temp", "soon gone"),
    ]
    later = T0 + timedelta(seconds=6)
    assert store.get_note(conv, "temp", later) is None
    assert [x.key for x in store.list_notes(conv, later)] == ["size"]
    assert store.remove_note(conv, "size") is True
    assert store.remove_note(conv, "size") is False
    with pytest.raises(InputError):
        store.set_note(conv, "big", "x" * 3000, T0)


def test_a_conversation_holds_at_most_100_notes(store: Store) -> None:
    conv = conversation(store)
    for i in range(MAX_NOTES):
        store.set_note(conv, f"k{i}", "v", T0)
    with pytest.raises(InputError, match="at most 100"):
        store.set_note(conv, "one-more", "v", T0)
    store.set_note(conv, "k0", "replaced", T0)  # replacing an existing note is fine
    assert len(store.list_notes(conv, T0)) == 50  # a list returns at most 50
