"""Semantic recall: search latency by resource size, exact and in the database, and embedding
throughput; one run prints them side by side.

recall      one resource whose conversations hold 1k and 10k stored, embedded messages (20
            conversations each, inserted in bulk), on PostgreSQL and on SQLite. Per sample a
            question is recalled (``fleet.recall.search.recall``: the search, then neighbours read)
            once with each search: ``exact`` (the worker scores the candidates, vectors pooled in
            memory) and the database's (pgvector; sqlite-vec) where it has one — the same hits.
            Baseline: the recent-window history read a claim does anyway (PostgreSQL). Sizes and
            searches take turns.
embedding   the background job's rate: stored messages embedded (local wordllama) and written,
            per second, in its batches of 256.
Run: ``python -m bench.recall [--samples N]`` (PostgreSQL on 127.0.0.1; it makes and drops its
own database, and a SQLite file in a temporary folder). sqlite-vec needs an sqlite3 that loads
extensions: this Python's, or pysqlite3 (installed with the dev extras).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from datetime import UTC, datetime

from sqlalchemy import text

from bench.context import submission
from bench.dispatch import PG_ADMIN, admin, pct
from fleet.config import RecallConfig
from fleet.domain.redaction import Redactor
from fleet.recall import embeddings, indexer, search
from fleet.store import Store, db, migrate, pg
from fleet.store import schema as s

SIZES = (1_000, 10_000)
WORDS = [
    "order",
    "parcel",
    "refund",
    "invoice",
    "delivery",
    "address",
    "payment",
    "card",
    "account",
    "password",
    "shipping",
    "warranty",
    "return",
    "exchange",
    "discount",
    "coupon",
    "subscription",
    "plan",
    "upgrade",
    "cancel",
    "support",
    "ticket",
    "manager",
    "weekend",
    "morning",
    "evening",
    "city",
    "train",
    "flight",
    "hotel",
    "dinner",
    "coffee",
    "tea",
    "dog",
    "cat",
    "garden",
]


def now() -> datetime:
    return datetime.now(UTC)


def sentence(rng: random.Random) -> str:
    return "I " + " ".join(rng.choice(WORDS) for _ in range(12)) + "."


def fill(store: Store, resource: str, size: int, rng: random.Random) -> list[uuid.UUID]:
    """20 conversations of one resource holding ``size`` messages in all (not embedded)."""
    convs = []
    per = size // 20
    for c in range(20):
        task = store.admit(submission(f"{resource}-{c}", "first"), now()).task
        with store.tx() as conn:
            conn.execute(
                s.tasks.update()
                .where(s.tasks.c.id == task.id)
                .values(status="succeeded", finished_at=now(), resource_id=resource)
            )
            conn.execute(
                s.messages.insert(),
                [
                    {
                        "conversation_id": task.conversation_id,
                        "generation": 0,
                        "task_id": task.id,
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": sentence(rng),
                        "delivery": "accepted",
                        "created_at": now(),
                    }
                    for i in range(per)
                ],
            )
        convs.append(task.conversation_id)
    return convs


def vector_store(url: str) -> Store | None:
    """A second store on ``url`` searching in the database, or None (with why, printed)."""
    store = Store.open(url, Redactor(()))
    found = store.enable_vector_search()
    if found.method == "exact" and store.dialect == "sqlite":
        store.dispose()
        try:
            import pysqlite3.dbapi2 as module  # type: ignore[import-not-found]
        except ImportError:
            print(f"sqlite: {found.detail}")
            return None
        store = Store(db.create(url, sqlite_module=module), Redactor(()))
        found = store.enable_vector_search()
    if found.method == "exact":
        print(f"{store.dialect}: {found.detail}")
        store.dispose()
        return None
    return store


def measure(
    name: str, url: str, samples: int, rng: random.Random, embedder: embeddings.Embedder
) -> tuple[list[str], tuple[int, float]]:
    """Fill ``url``'s database, embed it, time recall with each search; table rows and
    (messages embedded, seconds)."""
    exact = Store.open(url, Redactor(()))
    resources: dict[int, list[uuid.UUID]] = {}
    embedded, spent = 0, 0.0
    for size in SIZES:
        convs = fill(exact, f"user-{size}", size, rng)
        t0 = time.perf_counter()
        for conv in convs:
            embedded += indexer.embed_pending(exact, embedder, conv, namespace="default", now=now())
        spent += time.perf_counter() - t0
        resources[size] = convs
    with exact.tx() as conn:
        conn.execute(text("ANALYZE"))
    stores = {"exact": exact}
    fast = vector_store(url)
    if fast is not None:
        stores[fast.vector_search.method] = fast
    cfg = RecallConfig(scope="resource", top_k=5, threshold=0.0, message_range=1)
    timings: dict[tuple[int, str], list[float]] = {
        (n, m): [] for n in SIZES for m in [*stores, "history"]
    }
    for i in range(samples + 5):
        for size, convs in resources.items():
            task = exact.admit(submission(f"user-{size}-q{i}", "q"), now()).task
            task = task.model_copy(update={"resource_id": f"user-{size}"})
            query = sentence(rng)
            hits = []
            for method, store in stores.items():
                t0 = time.perf_counter()
                found = search.recall(
                    store, embedder, cfg, task, query, namespace="default", already=set()
                )
                took = (time.perf_counter() - t0) * 1000
                assert found.record["method"] == method
                hits.append([(h["id"], h["score"]) for h in found.record["hits"]])
                if i >= 5:
                    timings[size, method].append(took)
            ids = [[i for i, _ in h] for h in hits]
            assert all(x == ids[0] for x in ids), f"the searches found different hits: {hits}"
            if exact.dialect == "postgresql":
                t0 = time.perf_counter()
                exact.first(pg.HEAD_WITH_CONTEXT, {"conv": convs[0], "history": 41})
                if i >= 5:
                    timings[size, "history"].append((time.perf_counter() - t0) * 1000)
    rows = []
    for size in SIZES:
        cells = []
        for method in stores:
            t = timings[size, method]
            cells.append(f"{method} {pct(t, 50):6.2f} / {pct(t, 99):6.2f} ms")
        h = timings[size, "history"]
        base = f"history read {pct(h, 50):.2f} / {pct(h, 99):.2f} ms" if h else ""
        rows.append(
            f"{name:<10} {size:>7,}   " + "   ".join(cells) + (f"   ({base})" if base else "")
        )
    for store in stores.values():
        store.dispose()
    return rows, (embedded, spent)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100, help="timed samples per size")
    args = ap.parse_args()
    name = f"fleet_bench_recall_{uuid.uuid4().hex[:6]}"
    admin(f'CREATE DATABASE "{name}"')
    url = db.normalize_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = db.create(url)
    migrate.upgrade(engine)
    engine.dispose()
    rng = random.Random(7)
    embedder = embeddings.LocalEmbedder()
    embedder.embed(["warm up"])  # load the model outside the timings
    try:
        with tempfile.TemporaryDirectory() as tmp:
            lite = f"sqlite:///{tmp}/bench.db"
            engine = db.create(lite)
            migrate.upgrade(engine)
            engine.dispose()
            pg_rows, (n_pg, t_pg) = measure("postgresql", url, args.samples, rng, embedder)
            lite_rows, (n_lite, t_lite) = measure("sqlite", lite, args.samples, rng, embedder)
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(
        f"embedding (local wordllama, batches of {indexer.BATCH}, embed + write): "
        f"postgresql {n_pg / t_pg:,.0f} messages/s ({n_pg} in {t_pg:.1f}s), "
        f"sqlite {n_lite / t_lite:,.0f} messages/s ({n_lite} in {t_lite:.1f}s)"
    )
    print(
        f"recall latency p50 / p99 per search, resource scope, top 5, message_range 1; "
        f"{args.samples} samples per size, searches and sizes in turn"
    )
    print(f"{'database':<10} {'messages':>7}   searches")
    for row in pg_rows + lite_rows:
        print(row)


if __name__ == "__main__":
    main()
