"""Working memory: merge patches (RFC 7396), schema validation, receipts, versions, rendering."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from fleet.agents.tools import ToolContext, executor
from fleet.config import WorkingMemoryConfig
from fleet.domain.redaction import Redactor
from fleet.errors import Forbidden
from fleet.recall import working
from fleet.store import Store

T0 = datetime(2026, 11, 30, tzinfo=UTC)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "units": {"enum": ["metric", "imperial"]},
        "orders": {"type": "array", "items": {"type": "integer"}},
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": None}, {}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": None, "d": 3}}, {"a": {"b": 1, "d": 3}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        (None, {"a": 1}, {"a": 1}),
        ({"a": 1}, "text", "text"),
    ],
)
def test_merge_patch(target, patch, result):
    assert working.merge_patch(target, patch) == result


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = Store.open(sqlite_url, Redactor(("sk-test-secret-value-1234567890",)))
    yield s
    s.dispose()


def tool(store: Store, cfg: WorkingMemoryConfig, authorize=lambda action: None):
    return working.update_tool(
        cfg,
        store,
        key="conversation:c1",
        schema=cfg.schema_,
        run_id=uuid.UUID(int=7),
        clock=lambda: T0,
        authorize=authorize,
    )


def call(t, args, call_id="c1"):
    return executor.call(
        t, args, ToolContext(task_id="t", run_id="r", call_id=call_id), timeout_s=10
    )


def test_patches_merge_validate_and_apply_once(store: Store) -> None:
    cfg = WorkingMemoryConfig(schema=SCHEMA)
    t = tool(store, cfg)
    assert call(t, {"patch": {"name": "Ada", "units": "metric"}}).text == (
        "working memory is now at version 1"
    )
    assert call(t, {"patch": {"orders": [1234]}}, "c2").text.endswith("version 2")
    # the first call again (a retried run): nothing applied twice
    assert call(t, {"patch": {"name": "Ada", "units": "metric"}}).text.endswith("version 1")
    assert store.working_memory("conversation:c1") == (
        {"name": "Ada", "units": "metric", "orders": [1234]},
        2,
    )
    bad = call(t, {"patch": {"units": "cubits"}}, "c3")
    assert bad.error and "does not fit its schema at units" in bad.error
    assert "nothing was changed" in bad.error
    assert store.working_memory("conversation:c1")[1] == 2  # type: ignore[index]
    wrong = call(t, {"patch": "x"}, "c4")
    assert wrong.error and "merge patch" in wrong.error
    secret = call(t, {"patch": {"name": "sk-test-secret-value-1234567890"}}, "c5")
    assert secret.error is None
    assert store.working_memory("conversation:c1")[0]["name"] == "[REDACTED]"  # type: ignore[index]


def test_a_template_is_replaced_whole(store: Store) -> None:
    cfg = WorkingMemoryConfig(template="Goal: ?\nNext step: ?")
    t = tool(store, cfg)
    assert t.parameters["required"] == ["text"]
    assert call(t, {"text": "Goal: refund\nNext step: call shop"}).error is None
    section, record = working.render(cfg, store.working_memory("conversation:c1"))
    assert section.endswith("Goal: refund\nNext step: call shop")
    assert record == {"version": 1, "chars": 33, "cut": False, "scope": "conversation"}
    empty, _ = working.render(cfg, None)
    assert empty.endswith("Goal: ?\nNext step: ?")


def test_render_shows_the_json_and_how_to_update(store: Store) -> None:
    cfg = WorkingMemoryConfig(schema=SCHEMA)
    section, _ = working.render(cfg, ({"name": "Ada"}, 3))
    assert section.startswith("## Working memory (version 3; keep it current with")
    assert json.loads(section.split("\n", 1)[1]) == {"name": "Ada"}
    ro, _ = working.render(WorkingMemoryConfig(read_only=True), None)
    assert "read only" in ro and ro.endswith("{}")


def test_the_policy_can_refuse(store: Store) -> None:
    def deny(action: str) -> None:
        raise Forbidden("no memory for you")

    result = call(tool(store, WorkingMemoryConfig(), authorize=deny), {"patch": {"a": 1}})
    assert result.error == "no memory for you"
    assert store.working_memory("conversation:c1") is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"schema": {"type": "nonsense"}}, "not a valid JSON Schema"),
        ({"schema": SCHEMA, "template": "x"}, "at most one of"),
    ],
)
def test_bad_config(kw, message):
    with pytest.raises(ValueError, match=message):
        WorkingMemoryConfig(**kw)
