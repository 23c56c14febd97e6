"""Memory for agents through the real dispatcher: blocks and notes in the prompt, updates by
tools, on SQLite and PostgreSQL (in-process), and a race on real workers (PostgreSQL, Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from fleet.config import Settings
from fleet.domain.blocks import Edit
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support.fleet import running_fleet, wait_for

AGENTS = {
    "keeper": """
        model = "echo"
        instructions = "Be brief."
        notes = true
        memory = [{ block = "prefs", mode = "write" }, { block = "facts" }]
    """,
    "racer": """
        model = "echo"
        memory = [{ block = "shared", mode = "write" }]
    """,
}
DEPLOYMENTS = {
    "keep": 'agent = "keeper"\nnamespace = "acme"\n',
    "keep2": 'agent = "keeper"\nnamespace = "acme"\n',
    "other": 'agent = "keeper"\nnamespace = "other"\n',
    "race": 'agent = "racer"\n',
}
T0 = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)


@pytest.fixture
def rt(tmp_path: Path, db_url: str, config: Path) -> Iterator[Runtime]:
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    yield runtime
    runtime.close()


def run(rt: Runtime, deployment: str, text: str, key: str = "k"):
    task = rt.dispatcher.submit(deployment, text, key=key).task
    rt.dispatcher.drain(task.conversation_id)
    done = rt.store.get_task(task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    return done


def frozen(rt: Runtime, task_id) -> dict:
    return rt.store.runs_of(task_id)[-1].context


def tool_output(rt: Runtime, task_id) -> str:
    with rt.store.read() as conn:
        return conn.execute(
            select(s.traces.c.output).where(
                s.traces.c.task_id == task_id, s.traces.c.kind == "tool"
            )
        ).scalar_one()


def test_an_agent_updates_a_block_and_the_next_run_sees_it(rt: Runtime) -> None:
    rt.store.edit_block(
        "acme",
        "facts",
        Edit("replace", "The shop closes at 6pm."),
        author="user",
        now=T0,
        title="Shop facts",
        tenant="default",
    )
    first = run(
        rt, "keep", '/tool memory_update {"block": "prefs", "op": "append", "text": "Prefers tea."}'
    )
    assert tool_output(rt, first.id) == "memory block 'prefs' is now at version 1 (12 bytes)"
    system = frozen(rt, first.id)["messages"][0]["content"]
    assert "## Memory: Shop facts" in system and "Prefers tea." not in system
    # another deployment of the namespace shares the block; another namespace does not
    second = run(rt, "keep2", "hello", key="other-conversation")
    system = frozen(rt, second.id)["messages"][0]["content"]
    assert system.startswith(
        "Be brief.\n\n## Memory: prefs\n[block prefs, version 1, you may change it]\n"
        "Prefers tea.\n\n## Memory: Shop facts\n"
    )
    assert frozen(rt, second.id)["memory"]["blocks"] == [
        {"block": "prefs", "version": 1, "bytes": 12, "mode": "write"},
        {"block": "facts", "version": 1, "bytes": 23, "mode": "read"},
    ]
    elsewhere = run(rt, "other", "hello")
    assert "Memory" not in frozen(rt, elsewhere.id)["messages"][0]["content"]
    history = rt.store.block_history("acme", "prefs", tenant="default")
    runs = rt.store.runs_of(first.id)
    assert [h.author for h in history] == [f"run:{runs[0].id}"]
    # read mode gives no tool for the block
    refused = run(
        rt, "keep", '/tool memory_update {"block": "facts", "op": "replace", "text": "x"}'
    )
    assert "must be one of prefs" in tool_output(rt, refused.id)


def test_notes_are_saved_by_tools_and_shown_as_user_data(rt: Runtime) -> None:
    saved = run(rt, "keep", '/tool memory_set {"key": "style", "body": "short answers"}')
    assert '"saved": "style"' in tool_output(rt, saved.id)
    nxt = run(rt, "keep", "what do I like?")
    messages = frozen(rt, nxt.id)["messages"]
    notes = [m for m in messages if m.get("kind") == "fleet_notes"]
    assert len(notes) == 1 and notes[0]["role"] == "user"
    assert notes[0]["content"].endswith("- style: short answers")
    assert messages.index(notes[0]) == 1  # after the system text, before the transcript
    assert nxt.reply == "echo: what do I like? [history: 2]"  # notes are not transcript
    record = frozen(rt, nxt.id)["memory"]["notes"]
    assert record["injected"] == [{"key": "style", "bytes": 22}]
    # another conversation of the same agent has notes of its own
    other = run(rt, "keep", "hi", key="someone-else")
    assert not [m for m in frozen(rt, other.id)["messages"] if m.get("kind")]


@pytest.mark.fleet
@pytest.mark.timeout(120)
@pytest.mark.parametrize("expected", [True, False], ids=["expectedVersion", "last-writer-wins"])
def test_two_runs_on_real_workers_race_one_block(
    tmp_path: Path, pg_url: str, redis_url: str, config: Path, expected: bool
) -> None:
    settings = Settings(
        home=tmp_path / "home", database_url=pg_url, redis_url=redis_url, config_dir=config
    )
    rt = build(settings)
    rt.store.edit_block(
        "default", "shared", Edit("replace", "v1"), author="user", now=T0, tenant="default"
    )
    version = ', "expectedVersion": 1' if expected else ""
    try:
        with running_fleet(
            tmp_path, database_url=pg_url, redis_url=redis_url, config_dir=config
        ) as fleet:
            fleet.worker("a")
            fleet.worker("b")
            tasks = [
                rt.dispatcher.submit(
                    "race",
                    '/tool memory_update {"block": "shared", "op": "replace", '
                    f'"text": "from {who}"{version}}}',
                    key=who,
                ).task
                for who in ("a", "b")
            ]
            done = wait_for(
                lambda: all(rt.store.get_task(t.id).status.terminal for t in tasks) and tasks,
                60,
                what="both runs",
            )
        outputs = sorted(tool_output(rt, t.id) for t in done)
        history = rt.store.block_history("default", "shared", tenant="default")
        authors = {f"run:{rt.store.runs_of(t.id)[0].id}" for t in done}
        if expected:
            assert outputs[0].startswith("error: the block is at version 2, not 1")
            assert outputs[1] == "memory block 'shared' is now at version 2 (6 bytes)"
            assert [h.version for h in history] == [1, 2]
            assert history[1].author in authors
        else:
            assert [h.version for h in history] == [1, 2, 3]
            assert {h.author for h in history[1:]} == authors  # no lost update
            assert {h.value for h in history[1:]} == {"from a", "from b"}
            assert (
                rt.store.get_block("default", "shared", tenant="default").value == history[2].value
            )  # type: ignore[union-attr]
        assert history[0].author == "user"
    finally:
        rt.close()
