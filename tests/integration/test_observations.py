"""Observations: older history distilled by a model, journaled by range (SQLite and
PostgreSQL): the same range never calls the model twice and always reads the same bytes;
reflections condense observations; runs see them ahead of their recent window."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolSpec
from fleet.agents.models.echo import EchoModel
from fleet.agents.tokens import estimate
from fleet.config import Settings
from fleet.recall import observer
from fleet.runtime import Runtime, build
from tests.conftest import write_config

AGENTS = {
    "keeper": 'model = "echo"\n[history]\nmax_items = 4\n'
    "[observations]\ntoken_threshold = 200\nreflect_threshold = 250\n",
}


class Counting:
    """The echo model, counting its calls (the observer's and reflector's)."""

    name = "echo"
    provider = "echo"

    def __init__(self) -> None:
        self.calls = 0
        self.inner = EchoModel()

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        self.calls += 1
        return self.inner.complete(messages, tools)


@pytest.fixture
def rt(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config", AGENTS, {"keep": 'agent = "keeper"\n'})
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    runtime.dispatcher.sources.jobs = None  # observe inline after each settle
    yield runtime
    runtime.close()


def counting(rt: Runtime) -> Counting:
    model = Counting()
    rt.dispatcher.sources._models["keeper:observer"] = model
    return model


def chat(rt: Runtime, n: int, key: str = "k") -> list:
    done = []
    for i in range(n):
        task = rt.dispatcher.submit("keep", f"message number {i} " + "word " * 30, key=key).task
        rt.dispatcher.drain(task.conversation_id)
        done.append(task)
    return done


def test_history_past_the_threshold_is_observed_and_the_range_is_journaled(rt: Runtime) -> None:
    model = counting(rt)
    tasks = chat(rt, 8)
    conv = tasks[0].conversation_id
    rows = rt.store.observations(conv)
    assert model.calls >= 1 and rows
    first = rows[0]
    assert first.level == 0 and first.from_message_id < first.to_message_id
    # the same range again: the journaled text, byte for byte, and no model call
    calls = model.calls
    again, called = observer.observe_range(
        rt.store,
        model,
        conv,
        generation=0,
        level=0,
        span=(first.from_message_id, first.to_message_id),
        lines=["anything"],
        tok=estimate(),
        now=rt.dispatcher.clock(),
    )
    assert (again.text, called, model.calls) == (first.text, False, calls)
    assert again.text.encode() == first.text.encode()
    # nothing new to observe: the job makes no call
    assert rt.dispatcher.sources.memorize(conv)["observer_calls"] == 0
    assert model.calls == calls
    # never what is still in the recent window (the newest 4 messages)
    newest = [m.id for m in rt.store.messages(conv)][-4:]
    assert all(r.to_message_id < min(newest) for r in rt.store.observations(conv))


def test_a_run_sees_observations_ahead_of_its_recent_window(rt: Runtime) -> None:
    counting(rt)
    tasks = chat(rt, 8)
    (run,) = rt.store.runs_of(tasks[-1].id)
    messages = run.context["messages"]
    kinds = [m.get("kind") for m in messages]
    assert "fleet_observations" in kinds
    at = kinds.index("fleet_observations")
    assert messages[at]["content"].startswith(observer.OBSERVATIONS_PREAMBLE)
    assert all(k is None for k in kinds[at + 1 :])  # then the recent window and the input
    used = run.context["memory"]["observations"]
    assert used and {"from_message_id", "to_message_id", "level"} <= set(used[0])
    assert tasks[-1].id and rt.store.get_task(tasks[-1].id).reply.endswith("[history: 4]")  # type: ignore[union-attr]


def test_reflections_condense_observations_once(rt: Runtime) -> None:
    model = counting(rt)
    conv = chat(rt, 16)[0].conversation_id
    rows = rt.store.observations(conv)
    reflections = [r for r in rows if r.level == 1]
    assert reflections, "observations past reflect_threshold were not condensed"
    text, record = observer.shown(rows)
    assert text is not None
    covered = [(r["from_message_id"], r["to_message_id"]) for r in record]
    # a reflection stands in for the observations it covers: no range is shown twice
    for (a, b), (c, d) in itertools.pairwise(covered):
        assert b < c or (a, b) == (c, d)
    calls = model.calls
    assert rt.dispatcher.sources.memorize(conv)["observer_calls"] == 0
    assert model.calls == calls


def test_recall_observations_searches_them_when_offered(tmp_path: Path, db_url: str) -> None:
    from fleet.agents.tools import ToolContext, executor

    agents = {"keeper": AGENTS["keeper"] + "tool = true\n", "plain": 'model = "echo"\n'}
    config = write_config(
        tmp_path / "config", agents, {"keep": 'agent = "keeper"\n', "plain": 'agent = "plain"\n'}
    )
    rt = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    rt.dispatcher.sources.jobs = None
    try:
        counting(rt)
        tasks = chat(rt, 8)
        agent = rt.config.agents["keeper"]
        tools = rt.dispatcher.sources.tools(agent, tasks[0], tasks[0].id, lambda a: None)
        (search,) = [t for t in tools if t.name == "recall_observations"]
        found = executor.call(
            search,
            {"query": "message number 1"},
            ToolContext(task_id="t", run_id="r"),
            timeout_s=10,
        )
        assert found.error is None and found.text.startswith("[messages #")
        plain = rt.dispatcher.sources.tools(
            rt.config.agents["plain"], tasks[0], tasks[0].id, lambda a: None
        )
        assert plain == []  # never registered unless configured
    finally:
        rt.close()
