"""A run keeps the agent configuration it started with: the pure parts (fingerprint, what
changed), and runs that wait for an approval while the config changes under them (an embedded
runtime on SQLite; real workers on PostgreSQL: tests/integration/test_config_snapshots_fleet.py)."""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest

from fleet.config import Settings, load_config
from fleet.domain import snapshots
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from fleet.views import context_json
from tests.conftest import write_config

# -- the pure parts ------------------------------------------------------------------------------

BASE = {
    "name": "shop",
    "instructions": "Be brief.",
    "model": {"provider": "openai", "name": "gpt-a"},
    "tools": [{"tool": "shop:refund"}, {"tool": "current_time", "name": "now"}],
    "mcp_servers": [{"name": "parcels"}],
    "max_steps": 8,
}


def test_a_fingerprint_is_the_settings_not_their_order():
    again = dict(reversed(list(BASE.items())))
    assert snapshots.fingerprint(again) == snapshots.fingerprint(BASE)
    assert len(snapshots.fingerprint(BASE)) == snapshots.FINGERPRINT_CHARS
    assert snapshots.fingerprint({**BASE, "max_steps": 9}) != snapshots.fingerprint(BASE)


def test_a_setting_a_release_adds_unset_changes_no_fingerprint_nor_difference():
    """A newer release dumps its new optional settings as None (a tool entry's ``events``):
    the configurations that do not use them keep their fingerprints, and nothing differs."""
    newer = {
        **BASE,
        "context_tokens": None,
        "tools": [{**t, "events": None, "max_timeout": None} for t in BASE["tools"]],
    }
    assert snapshots.fingerprint(newer) == snapshots.fingerprint(BASE)
    assert snapshots.changes(BASE, newer) == []
    assert snapshots.changes(BASE, {**newer, "context_tokens": 4000}) == ["context_tokens changed"]


@pytest.mark.parametrize(
    ("new", "want"),
    [
        (BASE, []),
        (None, ["the agent is no longer configured"]),
        (
            {**BASE, "tools": [{"tool": "current_time", "name": "now"}]},
            ["tool 'shop:refund' removed"],
        ),
        (
            {**BASE, "tools": [*BASE["tools"], {"tool": "shop:track"}]},
            ["tool 'shop:track' added"],
        ),
        ({**BASE, "mcp_servers": []}, ["MCP server 'parcels' removed"]),
        (
            {**BASE, "model": {"provider": "openai", "name": "gpt-b"}},
            ["model openai gpt-a → openai gpt-b"],
        ),
        (
            {**BASE, "model": {"provider": "openai", "name": "gpt-a", "timeout": 5}},
            ["model settings changed"],
        ),
        ({**BASE, "instructions": "Be kind."}, ["instructions changed"]),
        ({**BASE, "max_steps": 9}, ["max_steps changed"]),
        (
            {**BASE, "tools": [{"tool": "shop:refund", "timeout": 5}, BASE["tools"][1]]},
            ["tool settings changed"],
        ),
    ],
)
def test_what_changed_since_runs_started(new, want):
    assert snapshots.changes(BASE, new) == want


# -- runs on an embedded runtime -----------------------------------------------------------------

TOOLS_MODULE = '''
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"
'''
BEFORE = """
    model = "echo"
    instructions = "Version one."
    tools = [
      { tool = "snap_tools:refund", approval = "required" },
      { tool = "tests.support.shop_tools:lookup_order", approval = "required" },
    ]
"""
AFTER = """
    model = "echo"
    instructions = "Version two."
    tools = ["current_time"]
"""


def _runtime(tmp_path: Path, agent: str) -> Runtime:
    root = tmp_path / "config"
    if (root / "agents").exists():
        shutil.rmtree(root / "agents")
    config = write_config(root, {"shop": agent}, {"shop": 'agent = "shop"\n'})
    return build(Settings(home=tmp_path / "home", config_dir=config))


def _park(rt: Runtime, key: str, text: str) -> uuid.UUID:
    task = rt.dispatcher.submit("shop", text, key=key).task
    rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
    assert rt.store.get_task(task.id).status == TaskStatus.WAITING
    return task.id


def _approve_and_run(rt: Runtime, task_id: uuid.UUID):
    task = rt.store.get_task(task_id)
    for wait in rt.store.waits_of(task_id, pending=True):
        rt.dispatcher.waiting.decide(task, uuid.UUID(wait.id), "approve", by="ops")
    rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
    return rt.store.get_task(task_id)


@pytest.fixture
def changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two tasks wait for approvals under the first config (one calls a tool whose module is
    then deleted, one a tool the new config drops but the code keeps); then a runtime of the
    new config takes over the same database."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "snap_tools.py").write_text(TOOLS_MODULE)
    rt = _runtime(tmp_path, BEFORE)
    gone = _park(rt, "gone", '/tool refund {"order": "A-1"}')
    kept = _park(rt, "kept", '/tool lookup_order {"order_id": 7}')
    rt.close()
    (tmp_path / "config" / "snap_tools.py").unlink()
    monkeypatch.delitem(sys.modules, "snap_tools")  # a new process would not have it
    rt = _runtime(tmp_path, AFTER)
    yield rt, gone, kept
    rt.close()


def test_a_run_calling_a_tool_that_is_gone_fails_naming_it(changed):
    rt, gone, _ = changed
    done = _approve_and_run(rt, gone)
    assert done.status == TaskStatus.FAILED
    assert "tool 'refund' (snap_tools:refund) is gone" in (done.error or ""), done.error
    assert "submit the work again" in (done.error or "")


def test_a_run_keeps_the_tools_and_instructions_it_started_with(changed):
    rt, _, kept = changed
    done = _approve_and_run(rt, kept)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    steps = rt.store.traces_of(kept)
    called = [t for t in steps if t["kind"] == "tool" and t["name"] == "lookup_order"]
    assert called and "shipped" in str(called[-1]["output"]), called
    runs = rt.store.runs_of(kept)
    assert runs[-1].context["messages"][0]["content"].startswith("Version one.")
    assert runs[0].context["agent"] == runs[-1].context["agent"]
    assert context_json(runs[-1].context)["agent"]["name"] == "shop"  # GetRun shows it


def test_a_new_run_takes_the_new_config_and_the_old_one_is_kept_once(changed):
    rt, gone, _ = changed
    task = rt.dispatcher.submit("shop", '/tool lookup_order {"order_id": 7}', key="new").task
    rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
    done = rt.store.get_task(task.id)
    assert done.status == TaskStatus.SUCCEEDED
    # the echo model calls only the tools it is offered: the new config offers no lookup_order
    assert [t["kind"] for t in rt.store.traces_of(task.id)] == ["model"]
    new_fp = rt.store.runs_of(task.id)[0].context["agent"]["config"]
    old_fp = rt.store.runs_of(gone)[0].context["agent"]["config"]
    assert new_fp != old_fp
    kept = rt.store.agent_config(old_fp)
    assert kept is not None and kept["agent"]["instructions"] == "Version one."
    assert [t["name"] for t in kept["tools"]] == ["refund", "lookup_order"]
    in_use = {(c.agent, c.fingerprint): c.runs for c in rt.store.configs_in_use()}
    assert in_use == {("shop", old_fp): 2}  # the two waiting runs; the new one ended


def test_a_config_this_release_cannot_read_runs_with_the_current_one(tmp_path: Path):
    rt = _runtime(tmp_path, AFTER)
    try:
        rt.store.keep_agent_config(
            "f" * 32,
            "shop",
            {"agent": {"name": "shop", "a_setting_from_a_newer_release": 1}, "tools": []},
            rt.dispatcher.clock(),
        )
        current = load_config(tmp_path / "config").agents["shop"]
        resolved = rt.dispatcher.execution.snapshots.resolve(
            {"agent": {"name": "shop", "config": "f" * 32}}, current
        )
        assert resolved.agent is current and resolved.kept_tools is None
    finally:
        rt.close()


def test_fleet_check_warns_what_unfinished_runs_started_with(
    changed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from fleet.checks import run_checks

    rt, _, kept = changed
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    (runs,) = [r for r in run_checks() if r.name == "runs"]
    assert runs.state == "warn"
    assert runs.detail.startswith("agent shop: 2 unfinished runs started with another config")
    for what in (
        "tool 'snap_tools:refund' removed",
        "tool 'tests.support.shop_tools:lookup_order' removed",
        "tool 'current_time' added",
        "instructions changed",
    ):
        assert what in runs.detail, runs.detail
    _approve_and_run(rt, kept)
    (runs,) = [r for r in run_checks() if r.name == "runs"]
    assert runs.state == "warn" and runs.detail.startswith("agent shop: 1 unfinished run ")
    write_config(tmp_path / "config", {"shop": BEFORE}, {"shop": 'agent = "shop"\n'})
    (tmp_path / "config" / "snap_tools.py").write_text(TOOLS_MODULE)
    (runs,) = [r for r in run_checks() if r.name == "runs"]
    assert runs == (
        "runs",
        "ok",
        "1 unfinished run, none started with another agent configuration",
    )
