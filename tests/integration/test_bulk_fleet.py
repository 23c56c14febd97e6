"""Bulk retries on PostgreSQL and Redis: 1,000 failed tasks over 3 tenants; a retry filtered to
one tenant touches none of the others' tasks, queues each conversation's retries behind what is
there in their order, and the same job asked for again (same idempotency key) retries nothing
twice, nor does a job whose process died after it admitted retries but before it stored its
cursor. A job left by a lost process is finished by a real ``fleet beat`` (the sweeper) from
its cursor."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from fleet.constants import RETRY_LABEL
from fleet.domain import bulk as rules
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import Fleet, fleet_settings, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

TENANTS = ("acme", "bravo", "carol")
PER_TENANT = 334  # 1,002 in all
CONVERSATIONS = 60  # per tenant: several failed tasks each
EVERYONE = rules.Walls(None, None)


@pytest.fixture
def shared_settings(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, Any]:
    config = write_config(tmp_path / "config")
    return fleet_settings(tmp_path, pg_url, redis_url, config, lease_ttl=1.0, sweep_interval=0.5)


def failed_tasks(rt: Runtime) -> dict[str, list[uuid.UUID]]:
    """1,002 tasks over 3 tenants, admitted, then failed (rate limited) as a worker's settle
    leaves them; each tenant's conversations hold several."""
    made: dict[str, list[uuid.UUID]] = defaultdict(list)
    for tenant in TENANTS:
        for i in range(PER_TENANT):
            adm = rt.dispatcher.submit(
                "chat",
                f"{tenant} {i}",
                key=f"c{i % CONVERSATIONS}",
                tenant=tenant,
                labels={"half": str(i % 2)},
            )
            made[tenant].append(adm.task.id)
    with rt.store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET status = 'failed', error_class = 'rate_limit', "
                "error = 'model m failed: HTTP 429', finished_at = now()"
            )
        )
    return made


def retries_of(rt: Runtime, tenant: str) -> list[Any]:
    found = rt.store.list_tasks(TaskFilter(tenants=frozenset({tenant}), limit=5000))
    return [t for t in found if RETRY_LABEL in t.labels]


def test_a_retry_of_one_tenant_touches_no_other_keeps_order_and_runs_once(
    rt: Runtime,
) -> None:
    made = failed_tasks(rt)
    bulk = rt.dispatcher.bulk
    f = rules.parse_filter(
        {"tenant": "acme", "errorClass": "rate_limit"}, "retry", everything=False
    )
    assert bulk.dry_run(f, EVERYONE)[0] == PER_TENANT
    halves = rules.parse_filter(
        {"tenant": "acme", "labels": {"half": "1"}}, "retry", everything=False
    )
    assert bulk.dry_run(halves, EVERYONE)[0] == PER_TENANT // 2  # a label filter, on JSONB
    assert retries_of(rt, "acme") == []  # the dry run changed nothing

    job, new = bulk.start("retry", f, EVERYONE, tenant="acme", owner="ops", idempotency_key="k1")
    assert new and job.matched == PER_TENANT
    # the process dies after it admitted the first ten retries, before it stored its cursor
    first = rt.store.bulk_batch(job)[:10]
    for task in first:
        assert bulk._act(job, task) is None
    done = bulk.run(job.id)
    assert done is not None and (done.status, done.done, done.failed) == ("done", PER_TENANT, 0)
    again, new = bulk.start("retry", f, EVERYONE, tenant="acme", owner="ops", idempotency_key="k1")
    assert not new and again.id == job.id
    assert bulk.run(job.id) is None  # done: nothing runs again

    retries = retries_of(rt, "acme")
    assert Counter(t.labels[RETRY_LABEL] for t in retries) == Counter(str(i) for i in made["acme"])
    assert all(retries_of(rt, other) == [] for other in ("bravo", "carol"))
    # each conversation: the retries queued behind its tasks, in the order of the originals
    by_id = {
        t.id: t for t in rt.store.list_tasks(TaskFilter(tenants=frozenset({"acme"}), limit=5000))
    }
    per_conv: dict[uuid.UUID, list[Any]] = defaultdict(list)
    for r in retries:
        per_conv[r.conversation_id].append(r)
    for conv, rs in per_conv.items():
        rs.sort(key=lambda r: r.seq)
        originals = [by_id[uuid.UUID(r.labels[RETRY_LABEL])] for r in rs]
        assert [o.seq for o in originals] == sorted(o.seq for o in originals)
        before = [t.seq for t in by_id.values() if t.conversation_id == conv]
        assert min(r.seq for r in rs) > max(o.seq for o in originals)
        assert len(before) == 2 * len(rs)
        assert all(r.idempotency_key.startswith("bulk-retry:") for r in rs)


def test_a_job_left_by_a_lost_process_is_finished_by_the_sweeper(rt: Runtime, fleet: Fleet) -> None:
    failed_tasks(rt)
    bulk = rt.dispatcher.bulk
    f = rules.parse_filter({"tenant": "bravo"}, "retry", everything=False)
    job, _ = bulk.start("retry", f, EVERYONE, tenant="bravo", owner="ops", idempotency_key=None)
    left = bulk.run(job.id, max_batches=1)  # one batch, then this process is "lost"
    assert left is not None and left.status == "running" and left.done == rules.BATCH
    fleet.beat()  # a real sweeper: it takes the job up once the claim ran out
    finished = wait_for(
        lambda: (j := rt.store.bulk_job(job.id)) is not None and j.status == "done" and j,
        60,
        what="the sweeper to finish the job",
    )
    assert (finished.done, finished.failed) == (PER_TENANT, 0)
    retries = retries_of(rt, "bravo")
    assert len(retries) == PER_TENANT == len({t.labels[RETRY_LABEL] for t in retries})
