"""A run's provenance, complete (SQLite and PostgreSQL): an agent with recall, working memory
and observations runs a conversation, and its last run lists what was recalled (conversation,
seq, role, preview, score), the recent window (list and count), what was dropped and why, the
observations used with their seq ranges and the working memory's characters, read back through
GetRun and `fleet tasks show --context` (the real console script on the same database)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.api.run_schemas import RunView
from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime, build
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.e2e.test_cli import Cli
from tests.support.callers import write_callers
from tests.unit.test_api_problems import CALLERS, KEYS

AGENT = (
    'model = "echo"\n[history]\nmax_items = 3\n'
    "[recall]\ntop_k = 3\nthreshold = 0.0\nmessage_range = 1\n"
    "[working_memory]\n"
    "[observations]\ntoken_threshold = 200\nreflect_threshold = 100000\n"
)
FACT = "My sister Lucia lives in Lisbon and teaches the violin."
FILLER = "Filler turn number {i} about the weather and nothing else " + "word " * 30


@dataclass
class Done:
    rt: Runtime
    config: Path
    db_url: str
    tasks: list[uuid.UUID]


def run(rt: Runtime, text: str) -> uuid.UUID:
    # as caller ops submits (its own tenant), so its key reads the runs below
    task = rt.dispatcher.submit("full", text, key="k", scope="api:ops", tenant="ops").task
    rt.dispatcher.drain(task.conversation_id)
    done = rt.store.get_task(task.id)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    return task.id


@pytest.fixture
def done(tmp_path: Path, db_url: str) -> Iterator[Done]:
    config = write_config(
        tmp_path / "config",
        {**AGENTS, "full": AGENT},
        {**DEPLOYMENTS, "full": 'agent = "full"\n'},
    )
    write_callers(config, CALLERS, KEYS)
    rt = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    rt.dispatcher.sources.jobs = None  # embed and observe inline after each settle
    tasks = [
        run(rt, FACT),
        run(rt, '/tool update_working_memory {"patch": {"sister": "Lucia, Lisbon"}}'),
        *(run(rt, FILLER.format(i=i)) for i in range(7)),
        run(rt, "Where does my sister Lucia live?"),
    ]
    yield Done(rt, config, db_url, tasks)
    rt.close()


def test_the_last_run_lists_everything_it_was_built_from(done: Done, tmp_path: Path) -> None:
    rt, asked = done.rt, done.tasks[-1]
    seq_of = {t: rt.store.get_task(t).seq for t in done.tasks}
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as http:
        http.headers["Authorization"] = f"Bearer {KEYS['ops']}"
        run_id = http.get(f"/v1/tasks/{asked}/runs").json()["runs"][0]["id"]
        r = http.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    RunView.model_validate(r.json())
    ctx = r.json()["context"]

    # recalled: the fact (a hit, with its score) and its neighbour, by conversation and seq
    recalled = ctx["recall"]["recalled"]
    fact = next(x for x in recalled if x["preview"].startswith("My sister Lucia"))
    assert fact["conversation"] == "api:ops:k" and fact["role"] == "user"
    assert fact["seq"] == seq_of[done.tasks[0]] == 1
    assert fact["hit"] is True and isinstance(fact["score"], float)
    assert all({"conversation", "seq", "role", "preview"} <= set(x) for x in recalled)
    assert all(isinstance(x["seq"], int) for x in recalled)
    assert {h["id"] for h in ctx["recall"]["hits"]} <= {x["id"] for x in recalled}

    # the recent window: the newest whole turn that fits 3 items, with its seq, and how many
    recent = ctx["recent"]
    assert recent["count"] == 2 == len(recent["items"]) == len(ctx["injected"])
    last_filler = seq_of[done.tasks[-2]]
    assert [m["seq"] for m in recent["items"]] == [last_filler, last_filler]
    assert [m["role"] for m in recent["items"]] == ["user", "assistant"]

    # dropped: older messages past the item limit, each with its turn and reason
    assert ctx["dropped"] and {m["reason"] for m in ctx["dropped"]} == {"item_limit"}
    assert all(isinstance(m["seq"], int) and m["seq"] < last_filler for m in ctx["dropped"])

    # observations used, each with the seq range (and message ids) it was distilled from
    observed = ctx["memory"]["observations"]
    assert observed, "the history outgrew the threshold: something was observed"
    first = observed[0]
    assert first["fromSeq"] == 1 and first["fromSeq"] <= first["toSeq"] < last_filler
    assert first["fromMessageId"] < first["toMessageId"]

    # working memory: how many characters of it the system message held
    wm = ctx["memory"]["workingMemory"]
    assert wm["version"] == 1 and wm["chars"] > len("Lucia, Lisbon") and wm["cut"] is False

    # the same, printed by `fleet tasks show --context` (the real console script)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cli = Cli(
        cwd,
        tmp_path / "home",
        {
            "FLEET_CONFIG_DIR": str(done.config),
            "FLEET_HOME": str(tmp_path / "home"),
            "FLEET_DATABASE_URL": done.db_url,
        },
    )
    shown = cli.ok("tasks", "show", str(asked), "--context", COLUMNS="300")
    assert "recent: 2 messages" in shown
    fact_line = next(
        line for line in shown.splitlines() if line.startswith("api:ops:k") and "My sister" in line
    )
    cells = fact_line.split()
    assert cells[:2] == ["api:ops:k", "1"] and cells[3] == "user"
    assert cells[4] == str(fact["score"])
    assert f"recalled: {len(recalled)} message" in shown
    assert "item_limit" in shown
    span = f"{first['fromSeq']} to {first['toSeq']}"
    assert any(line.split()[:1] == ["observation"] and span in line for line in shown.splitlines())
    assert f"{wm['chars']} characters" in shown


def test_a_drain_that_chains_claims_records_each_message_turn(tmp_path: Path, db_url: str) -> None:
    """Tasks queued behind each other are claimed by the settle before them (PostgreSQL builds
    the next context from the exchange it stores): their history still carries its seqs."""
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    rt = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    try:
        tasks = [rt.dispatcher.submit("chat", f"turn {i}", key="q").task for i in range(3)]
        rt.dispatcher.drain(tasks[0].conversation_id)
        last = rt.store.runs_of(tasks[-1].id)[0].context
        seqs = [(m["seq"], m["role"]) for m in last["injected"]]
        assert seqs == [(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")]
    finally:
        rt.close()
