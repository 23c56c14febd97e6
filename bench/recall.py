"""Semantic recall on PostgreSQL: search latency by resource size, and embedding throughput.

recall      one resource whose conversations hold 1k and 10k stored, embedded messages (20
            conversations each, inserted in bulk). Per sample a question is recalled
            (``fleet.recall.search.recall``: candidates read, query embedded, exact scoring,
            neighbours read) — against a baseline in the same run: the recent-window history
            read a claim does anyway (``fleet.store.pg.HEAD_WITH_CONTEXT``). Sizes take turns.
            pgvector is not used: the server here has no ``vector`` extension (exact search).
embedding   the background job's rate: stored messages embedded (local wordllama) and written,
            per second, in its batches of 256.
Run: ``python -m bench.recall [--samples N]`` (PostgreSQL on 127.0.0.1; it makes and drops its
own database).
"""

from __future__ import annotations

import argparse
import random
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
                text(
                    "UPDATE tasks SET status = 'succeeded', finished_at = now(), "
                    "resource_id = :r WHERE id = :t"
                ),
                {"r": resource, "t": task.id},
            )
            conn.execute(
                text(
                    """INSERT INTO messages (conversation_id, generation, task_id, role, content,
                                        delivery, created_at)
                       VALUES (:c, 0, :t, :role, :content, 'accepted', now())"""
                ),
                [
                    {
                        "c": task.conversation_id,
                        "t": task.id,
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": sentence(rng),
                    }
                    for i in range(per)
                ],
            )
        convs.append(task.conversation_id)
    return convs


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
    store = Store.open(url, Redactor(()))
    rng = random.Random(7)
    embedder = embeddings.LocalEmbedder()
    embedder.embed(["warm up"])  # load the model outside the timings
    try:
        resources: dict[int, list[uuid.UUID]] = {}
        embedded, spent = 0, 0.0
        for size in SIZES:
            convs = fill(store, f"user-{size}", size, rng)
            t0 = time.perf_counter()
            for conv in convs:
                embedded += indexer.embed_pending(
                    store, embedder, conv, namespace="default", now=now()
                )
            spent += time.perf_counter() - t0
            resources[size] = convs
        with store.tx() as conn:
            conn.execute(text("ANALYZE"))
        print(
            f"embedding (local wordllama, batches of {indexer.BATCH}): {embedded} messages in "
            f"{spent:.1f}s = {embedded / spent:,.0f} messages/s (embed + write)"
        )
        cfg = RecallConfig(scope="resource", top_k=5, threshold=0.0, message_range=1)
        timings: dict[int, dict[str, list[float]]] = {
            n: {"recall": [], "history": []} for n in SIZES
        }
        with store.pinned():
            for i in range(args.samples + 5):
                for size, convs in resources.items():
                    task = store.admit(submission(f"user-{size}-q{i}", "q"), now()).task
                    task = task.model_copy(update={"resource_id": f"user-{size}"})
                    query = sentence(rng)
                    t0 = time.perf_counter()
                    found = search.recall(
                        store, embedder, cfg, task, query, namespace="default", already=set()
                    )
                    t1 = time.perf_counter()
                    store.first(pg.HEAD_WITH_CONTEXT, {"conv": convs[0], "history": 41})
                    t2 = time.perf_counter()
                    assert found.record["searched"] == size
                    if i >= 5:
                        timings[size]["recall"].append((t1 - t0) * 1000)
                        timings[size]["history"].append((t2 - t1) * 1000)
        print(
            f"recall latency, exact search over the resource's messages; {args.samples} "
            "samples per size, sizes in turn; baseline: the claim's history read"
        )
        print(
            f"{'messages':>10}  {'recall p50':>11} {'p99':>9}  {'history read p50':>16} {'p99':>8}"
        )
        for size in SIZES:
            r, h = timings[size]["recall"], timings[size]["history"]
            print(
                f"{size:>10,}  {pct(r, 50):>8.2f} ms {pct(r, 99):>6.2f} ms  "
                f"{pct(h, 50):>13.2f} ms {pct(h, 99):>5.2f} ms"
            )
    finally:
        store.dispose()
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
