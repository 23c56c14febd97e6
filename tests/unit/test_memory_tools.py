"""The memory tools against the store (SQLite): block updates, notes, receipts, refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from fleet.agents.tools import ToolContext, executor
from fleet.config import MemoryAttachment
from fleet.domain import blocks
from fleet.domain.admission import QueuePolicy, Submission
from fleet.domain.blocks import NoteValue
from fleet.domain.redaction import Redactor
from fleet.domain.values import TextPart
from fleet.errors import Forbidden
from fleet.memory import render
from fleet.memory import tools as memory_tools
from fleet.memory.binding import StoreMemory
from fleet.store import Store

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = Store.open(sqlite_url, Redactor(("sk-test-secret-value-1234567890",)))
    yield s
    s.dispose()


@pytest.fixture
def conversation(store: Store) -> uuid.UUID:
    sub = Submission(
        deployment="d",
        scope="api",
        key="k",
        input=(TextPart(text="hi"),),
        input_bytes=2,
        labels={},
        idempotency_key=None,
        policy=QueuePolicy("followup", 0),
        max_attempts=1,
        max_input_bytes=100,
    )
    return store.admit(sub, T0).task.conversation_id


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def port(store: Store, conversation: uuid.UUID, *, run: uuid.UUID | None = None, **kw):
    return StoreMemory(
        store,
        namespace="ns",
        conversation_id=conversation,
        run_id=run or uuid.uuid4(),
        clock=kw.pop("clock", Clock()),
        **kw,
        tenant="default",
    )


def call(tool, args: dict, call_id: str = "c1", task: str = "t1"):
    ctx = ToolContext(task_id=task, run_id="r1", call_id=call_id)
    return executor.call(tool, args, ctx, timeout_s=10)


ATTACHED = (
    MemoryAttachment(block="prefs", mode="write"),
    MemoryAttachment(block="log", mode="append"),
    MemoryAttachment(block="policy"),
)


def test_memory_update_offers_only_the_blocks_it_may_change(store, conversation):
    tool = memory_tools.block_tool(ATTACHED, port(store, conversation))
    assert tool is not None
    assert tool.parameters["properties"]["block"]["enum"] == ["prefs", "log"]
    assert "prefs (write), log (append)" in tool.description
    assert memory_tools.block_tool(ATTACHED[2:], port(store, conversation)) is None
    refused = call(tool, {"block": "log", "op": "replace", "text": "x"})
    assert refused.error and "append mode: only append is allowed" in refused.error
    unknown = call(tool, {"block": "policy", "op": "append", "text": "x"})
    assert unknown.error and "must be one of prefs, log" in unknown.error


def test_updates_are_versioned_with_their_author_and_applied_once(store, conversation):
    run = uuid.uuid4()
    tool = memory_tools.block_tool(ATTACHED, port(store, conversation, run=run))
    first = call(tool, {"block": "prefs", "op": "replace", "text": "metric units"}, "c1")
    assert first.text == "memory block 'prefs' is now at version 1 (12 bytes)"
    again = call(tool, {"block": "prefs", "op": "replace", "text": "metric units"}, "c1")
    assert again.text == first.text.replace("version 1", "version 1")  # the same call: no v2
    edit = {"block": "prefs", "op": "str_replace", "old": "metric", "text": "imperial"}
    assert "version 2" in call(tool, edit, "c2").text
    history = store.block_history("ns", "prefs", tenant="default")
    assert [(h.version, h.value, h.author) for h in history] == [
        (1, "metric units", f"run:{run}"),
        (2, "imperial units", f"run:{run}"),
    ]


def test_a_stale_expected_version_is_refused_naming_the_current_one(store, conversation):
    tool = memory_tools.block_tool(ATTACHED, port(store, conversation))
    call(tool, {"block": "prefs", "op": "replace", "text": "a"}, "c1")
    call(tool, {"block": "prefs", "op": "replace", "text": "b"}, "c2")
    stale = call(tool, {"block": "prefs", "op": "replace", "text": "c", "expectedVersion": 1}, "c3")
    assert stale.error and "the block is at version 2, not 1" in stale.error
    assert store.get_block("ns", "prefs", tenant="default").value == "b"  # type: ignore[union-attr]
    ok = call(tool, {"block": "prefs", "op": "append", "text": "c", "expectedVersion": 2}, "c4")
    assert ok.error is None


def test_refused_edits_say_why(store, conversation):
    tool = memory_tools.block_tool(ATTACHED, port(store, conversation))
    call(tool, {"block": "prefs", "op": "replace", "text": "tea and tea"}, "c1")
    twice = call(tool, {"block": "prefs", "op": "str_replace", "old": "tea", "text": "x"}, "c2")
    assert twice.error and "occurs 2 times" in twice.error and "tea and tea" in twice.error
    big = call(tool, {"block": "prefs", "op": "replace", "text": "x" * 70_000}, "c3")
    assert big.error and "at most 65536 bytes" in big.error
    bad = call(tool, {"block": "prefs", "op": "delete"}, "c4")
    assert bad.error and "invalid arguments for memory_update: op" in bad.error


def test_the_policy_can_refuse_a_memory_tool(store, conversation):
    def deny(action: str) -> None:
        raise Forbidden(f"not allowed to use {action}")

    tool = memory_tools.block_tool(ATTACHED, port(store, conversation, authorize=deny))
    result = call(tool, {"block": "prefs", "op": "replace", "text": "x"})
    assert result.error == "not allowed to use memory"
    assert store.get_block("ns", "prefs", tenant="default") is None


def notes_of(store, conversation, **kw):
    return {t.name: t for t in memory_tools.note_tools(port(store, conversation, **kw))}


def test_notes_set_get_list_remove(store, conversation):
    t = notes_of(store, conversation)
    assert json.loads(call(t["memory_set"], {"key": "style", "body": "short"}, "c1").text) == {
        "saved": "style",
        "bytes": 5,
        "expires_at": None,
    }
    assert call(t["memory_get"], {"key": "style"}).text == "short"
    listed = json.loads(call(t["memory_list"], {}).text)
    assert [n["key"] for n in listed["notes"]] == ["style"]
    assert call(t["memory_remove"], {"key": "style"}, "c2").text == '{"removed": "style"}'
    missing = call(t["memory_get"], {"key": "style"})
    assert missing.error and "no note with key 'style'" in missing.error
    assert call(t["memory_remove"], {"key": "style"}, "c3").text == '{"absent": "style"}'


def test_a_retried_note_call_applies_once(store, conversation):
    t = notes_of(store, conversation)
    first = call(t["memory_set"], {"key": "k", "body": "v1"}, "c1")
    call(t["memory_set"], {"key": "k", "body": "v2"}, "c2")
    # the first call again (a retried run): it answers as before and does not undo v2
    assert call(t["memory_set"], {"key": "k", "body": "v1"}, "c1").text == first.text
    assert store.get_note(conversation, "k", T0).body == "v2"  # type: ignore[union-attr]
    removed = call(t["memory_remove"], {"key": "k"}, "c3")
    call(t["memory_set"], {"key": "k", "body": "v3"}, "c4")
    assert call(t["memory_remove"], {"key": "k"}, "c3").text == removed.text
    assert store.get_note(conversation, "k", T0).body == "v3"  # type: ignore[union-attr]
    receipt = store.note_receipt(conversation, "t1:c1")
    assert receipt is not None and "v1" not in json.dumps(receipt.outcome)  # no body kept


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"key": "", "body": "x"}, "1-128 characters"),
        ({"key": "k" * 129, "body": "x"}, "1-128 characters"),
        ({"key": "a\nb", "body": "x"}, "control characters"),
        ({"key": "k", "body": "é" * 1025}, "at most 2048 bytes, got 2050"),
        ({"key": "k", "body": "x", "expires_in_seconds": 0}, "greater than or equal to 1"),
        ({"key": "k", "body": "x", "colour": 1}, "Extra inputs"),
    ],
)
def test_note_bounds(store, conversation, args, message):
    result = call(notes_of(store, conversation)["memory_set"], args)
    assert result.error and message in result.error


def test_at_most_100_live_notes_and_list_returns_50(store, conversation):
    t = notes_of(store, conversation)
    for i in range(blocks.MAX_NOTES):
        assert call(t["memory_set"], {"key": f"k{i:03}", "body": "x"}, f"c{i}").error is None
    full = call(t["memory_set"], {"key": "one-more", "body": "x"}, "c-full")
    assert full.error and "at most 100 notes" in full.error
    assert call(t["memory_set"], {"key": "k000", "body": "y"}, "c-replace").error is None
    assert len(json.loads(call(t["memory_list"], {}).text)["notes"]) == 50


def test_expired_notes_disappear(store, conversation):
    clock = Clock()
    t = notes_of(store, conversation, clock=clock)
    saved = json.loads(
        call(t["memory_set"], {"key": "otp", "body": "1234", "expires_in_seconds": 60}).text
    )
    assert saved["expires_at"] == (T0 + timedelta(seconds=60)).isoformat()
    clock.now = T0 + timedelta(seconds=61)
    assert call(t["memory_get"], {"key": "otp"}).error is not None
    assert json.loads(call(t["memory_list"], {}).text)["notes"] == []


# -- what the prompt shows ------------------------------------------------------------------------


def test_blocks_render_under_their_label_and_unwritten_ones_render_nothing(store):
    store.edit_block(
        "ns",
        "prefs",
        blocks.Edit("replace", "metric"),
        author="user",
        now=T0,
        title="User prefs",
        description="how the user likes answers",
        tenant="default",
    )
    found = store.blocks_named("ns", ["prefs", "never"], tenant="default")
    attached = (MemoryAttachment(block="prefs", mode="write"), MemoryAttachment(block="never"))
    text, shown = render.blocks_text(attached, found)
    assert text == (
        "## Memory: User prefs (how the user likes answers)\n"
        "[block prefs, version 1, you may change it]\nmetric"
    )
    assert shown == [
        {"block": "prefs", "version": 1, "bytes": 6, "mode": "write"},
        {"block": "never", "version": 0, "bytes": 0, "mode": "read"},
    ]


def test_notes_render_newest_first_within_their_byte_budget():
    notes = [
        NoteValue("old", "a" * 40, None, T0),
        NoteValue("new", "b" * 40, None, T0 + timedelta(minutes=1)),
    ]
    text, record = render.notes_message(notes, max_bytes=50)
    assert text == render.NOTES_PREAMBLE + "\n- new: " + "b" * 40
    assert record["injected"] == [{"key": "new", "bytes": 47}]
    assert record["dropped"] == [{"key": "old", "bytes": 47, "reason": "notes_bytes"}]
    assert render.notes_message([], 100)[0] is None
