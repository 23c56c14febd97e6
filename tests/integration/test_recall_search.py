"""The database's vector search (pgvector, sqlite-vec) finds what exact search finds: the same
hits, scores and scope rules, over the same stored messages, for several settings.

Skipped (with the reason) where the database has no vector search: PostgreSQL without the
``vector`` extension; SQLite when neither this Python's sqlite3 nor pysqlite3 loads sqlite-vec.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.config import RecallConfig, Settings
from fleet.domain.redaction import Redactor
from fleet.recall import search
from fleet.runtime import Runtime, build
from fleet.store import Store, db
from tests.conftest import write_config

DATA = json.loads((Path(__file__).parents[1] / "data" / "recall_set.json").read_text())
AGENTS = {"keeper": 'model = "echo"\n[history]\nmax_items = 2\n[recall]\nthreshold = 0.0\n'}
DEPLOYMENTS = {"keep": 'agent = "keeper"\n'}
SETTINGS = [
    RecallConfig(top_k=5, threshold=0.0, message_range=0),
    RecallConfig(top_k=3, threshold=0.45, message_range=1),
    RecallConfig(top_k=5, threshold=-1.0, filter={"role": {"eq": "user"}}),
    RecallConfig(top_k=4, threshold=0.0, filter={"labels.team": {"in": ["blue"]}}),
    RecallConfig(top_k=5, threshold=0.0, scope="resource", max_candidates=30),
    RecallConfig(top_k=50, threshold=0.0, scope="resource"),
]


def _vector_store(url: str) -> Store:
    """A store on ``url`` using the database's vector search, or skip saying why not."""
    store = Store.open(url, Redactor(()))
    found = store.enable_vector_search()
    if found.method == "exact" and store.dialect == "sqlite":
        store.dispose()
        try:  # the standard library's sqlite3 may be built without loadable extensions
            import pysqlite3.dbapi2 as module  # type: ignore[import-not-found]
        except ImportError:
            pytest.skip(f"no vector search: {found.detail}; pysqlite3 is not installed either")
        store = Store(db.create(url, sqlite_module=module), Redactor(()))
        found = store.enable_vector_search()
    if found.method == "exact":
        store.dispose()
        pytest.skip(f"no vector search in this database: {found.detail}")
    return store


@pytest.fixture
def rt(tmp_path: Path, db_url: str) -> Iterator[Runtime]:
    """Two conversations of resource u-1 (and one of u-2, one in another scope), embedded."""
    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    (config / "fleet.toml").write_text('[embeddings]\nsearch = "exact"\n')
    runtime = build(Settings(home=tmp_path / "home", database_url=db_url, config_dir=config))
    runtime.dispatcher.sources.jobs = None  # embed inline after each settle
    facts = DATA["facts"]
    for i, fact in enumerate(facts):
        key, resource = ("a", "u-1") if i % 3 == 0 else ("b", "u-1") if i % 3 == 1 else ("c", "u-2")
        team = "blue" if i % 2 else "red"
        task = runtime.dispatcher.submit(
            "keep", fact, key=key, resource_id=resource, labels={"team": team}
        ).task
        runtime.dispatcher.drain(task.conversation_id)
    other = runtime.dispatcher.submit(
        "keep", facts[0], key="w", scope="webhook:hook", resource_id="u-1"
    ).task
    runtime.dispatcher.drain(other.conversation_id)
    yield runtime
    runtime.close()


def _search(store: Store, rt: Runtime, cfg: RecallConfig, question: str, key: str) -> dict:
    task = rt.dispatcher.submit("keep", question, key=key, resource_id="u-1").task
    found = search.recall(
        store,
        rt.dispatcher.sources.embedder,
        cfg,
        task,
        question,
        namespace="default",
        already=frozenset(),
    )
    return found.record


def test_vector_search_finds_what_exact_search_finds(rt: Runtime, db_url: str) -> None:
    vector = _vector_store(db_url)
    assert rt.store.vector_search.method == "exact"
    try:
        compared = 0
        for n, cfg in enumerate(SETTINGS):
            for q, (question, _) in enumerate(DATA["questions"][:8]):
                key = "a" if q % 2 else f"new-{n}-{q}"
                exact = _search(rt.store, rt, cfg, question, key)
                fast = _search(vector, rt, cfg, question, key)
                assert exact["method"] == "exact"
                assert fast["method"] == vector.vector_search.method
                want = [(h["id"], h["score"]) for h in exact["hits"]]
                got = [(h["id"], h["score"]) for h in fast["hits"]]
                assert [i for i, _ in got] == [i for i, _ in want], (cfg, question)
                assert all(abs(a[1] - b[1]) <= 2e-4 for a, b in zip(got, want, strict=True))
                assert fast["recalled"] == exact["recalled"]
                if not cfg.filter:
                    assert fast["searched"] == exact["searched"]
                compared += len(want)
                # never another scope's or another resource's messages
                convs = {h["conversation"] for h in fast["hits"]}
                if cfg.scope == "resource":
                    assert convs <= {"api:a", "api:b"}, convs
                else:
                    assert convs <= {f"api:{key}"}, convs
        assert compared > 100, "the settings found too little to compare"
    finally:
        vector.dispose()


def test_the_probe_creates_pgvector_once_and_reports_it(pg_url: str) -> None:
    store = _vector_store(pg_url)
    try:
        again = Store.open(pg_url, Redactor(()))
        assert again.enable_vector_search(create=False).method == "pgvector"
        assert again.vector_search.detail.startswith("pgvector (extension vector ")
        again.dispose()
    finally:
        store.dispose()


def test_an_unknown_conversation_finds_nothing(db_url: str, rt: Runtime) -> None:
    vector = _vector_store(db_url)
    try:
        hits, searched = vector.nearest(
            b"\0\0\x80?" * 256,
            model=rt.dispatcher.sources.embedder.name,
            limit=100,
            top_k=5,
            threshold=-1.0,
            exclude=set(),
            conversation_id=uuid.uuid4(),
        )
        assert (hits, searched) == ([], 0)
    finally:
        vector.dispose()


def test_fleet_check_reports_the_search(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.checks import run_checks

    config = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(config))
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_DATABASE_URL", db_url)
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    probed = Store.open(db_url, Redactor(()))
    want = probed.enable_vector_search(create=False)
    probed.dispose()
    (recall,) = [r for r in run_checks() if r.name == "recall"]
    assert recall.state == "ok"
    assert recall.detail.startswith(f"keeper: {want.detail}, embeddings by local wordllama")
    assert want.method in {"pgvector", "sqlite-vec"} or "exact search (" in want.detail
    (config / "fleet.toml").write_text('[embeddings]\nsearch = "exact"\n')
    (recall,) = [r for r in run_checks() if r.name == "recall"]
    assert 'exact search in the worker ([embeddings] search = "exact")' in recall.detail
