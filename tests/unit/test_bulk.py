"""Bulk actions: the filter's rules (table tests), and BulkTasks / GetBulkJob over HTTP on an
embedded SQLite runtime: a dry run changes nothing; a key acts only on its own tenant and scope
(the tenant filter is an operator's, within its reach); another key's job answers 404; bad
filters are 422 naming the key; the CLI refuses bad input with exit 2 before anything."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.cli.app import main
from fleet.constants import RETRY_LABEL
from fleet.domain import bulk as rules
from fleet.domain.values import TaskStatus
from fleet.errors import InputError
from fleet.runtime import Runtime
from fleet.store import TaskFilter
from tests.conftest import AGENTS, DEPLOYMENTS
from tests.support.callers import auth, keyed_runtime

# -- the rules ------------------------------------------------------------------------------


def test_a_filter_defaults_to_what_its_action_acts_on() -> None:
    assert rules.parse_filter(None, "retry", everything=False).statuses == (TaskStatus.FAILED,)
    cancel = rules.parse_filter({"deployment": "chat"}, "cancel", everything=False)
    assert TaskStatus.QUEUED in cancel.statuses and TaskStatus.FAILED not in cancel.statuses
    both = rules.parse_filter({"status": ["failed", "cancelled"]}, "retry", everything=False)
    assert both.statuses == (TaskStatus.FAILED, TaskStatus.CANCELLED)
    labelled = rules.parse_filter({"labels": ["team=a", "x=y=z"]}, "retry", everything=False)
    assert labelled.labels == {"team": "a", "x": "y=z"}


@pytest.mark.parametrize(
    ("raw", "action", "field"),
    [
        ({"bogus": 1}, "retry", "filter.bogus"),
        ({"status": "running"}, "retry", "filter.status"),
        ({"status": "succeeded"}, "cancel", "filter.status"),
        ({"status": []}, "retry", "filter.status"),
        ({"since": "yesterday"}, "retry", "filter.since"),
        ({"since": "2026-12-07T09:00:00"}, "retry", "filter.since"),  # no offset
        (
            {"since": "2026-12-07T10:00:00Z", "until": "2026-12-07T09:00:00Z"},
            "retry",
            "filter.since",
        ),
        ({"labels": ["nope"]}, "retry", "filter.labels"),
        ({"errorClass": "slow"}, "retry", "filter.errorClass"),
        ({}, "cancel", "filter"),  # an empty cancel needs `all`
    ],
)
def test_bad_filters_are_refused_naming_the_key(
    raw: dict[str, Any], action: str, field: str
) -> None:
    with pytest.raises(InputError) as err:
        rules.parse_filter(raw, action, everything=False)  # type: ignore[arg-type]
    assert err.value.field == field


def test_an_empty_cancel_is_everything_when_said() -> None:
    found = rules.parse_filter({}, "cancel", everything=True)
    assert set(found.statuses) == set(rules.CANCELLABLE)


def test_a_filter_survives_its_job_as_stored() -> None:
    f = rules.parse_filter(
        {
            "status": "failed",
            "since": "2026-12-07T09:00:00+00:00",
            "labels": {"a": "b"},
            "errorClass": "timeout",
            "tenant": "acme",
        },
        "retry",
        everything=False,
    )
    assert rules.filter_of(f.json()) == f


# -- over HTTP ---------------------------------------------------------------------------------

KEYS = {n: f"{n}-key-0123456789" for n in ("acme", "acme-other", "bravo", "acme-ops", "all-ops")}
CALLERS = {
    "acme": 'source = "api"\ntenant = "acme"\n',
    "acme-other": 'source = "a2a"\ntenant = "acme"\n',  # acme's tenant, another scope
    "bravo": 'source = "api"\ntenant = "bravo"\n',
    "acme-ops": 'source = "api"\ntenant = "acme"\noperator = true\n',
    "all-ops": 'source = "api"\ntenant = "acme"\noperator = true\ntenants = ["*"]\n',
}
STEPPER = 'model = "echo"\nmax_steps = 1\ntools = ["current_time"]\n'  # fails: step limit


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = keyed_runtime(
        tmp_path,
        CALLERS,
        KEYS,
        {**AGENTS, "stepper": STEPPER, "napper": 'model = "echo"\ntools = ["pause"]\n'},
        {**DEPLOYMENTS, "step": 'agent = "stepper"\n', "nap": 'agent = "napper"\n'},
    )
    yield runtime
    runtime.close()


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt), raise_server_exceptions=False) as c:
        yield c


def failed(client: TestClient, who: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        r = client.post(
            "/v1/tasks",
            json={
                "deployment": "step",
                "input": "/tool current_time {}",
                "conversationKey": f"k{i}",
            },
            headers=auth(KEYS, who),
        )
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    for task_id in ids:
        done = client.get(
            f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth(KEYS, who)
        ).json()
        assert (done["status"], done["errorClass"]) == ("failed", "step_limit"), done
    return ids


def bulk(client: TestClient, who: str, **body: Any) -> Any:
    return client.post("/v1/tasks:bulk", json=body, headers=auth(KEYS, who))


def finished_job(client: TestClient, who: str, job_id: str) -> dict[str, Any]:
    for _ in range(200):
        job = client.get(f"/v1/tasks:bulk/{job_id}", headers=auth(KEYS, who)).json()
        if job["status"] == "done":
            return dict(job)
        client.get("/healthz")  # (a round trip: the job's batches run meanwhile)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def retried(rt: Runtime) -> list[str]:
    tasks = rt.store.list_tasks(TaskFilter(limit=1000))
    return sorted(t.labels[RETRY_LABEL] for t in tasks if RETRY_LABEL in t.labels)


def test_a_key_retries_its_own_tenant_and_scope_only(rt: Runtime, client: TestClient) -> None:
    mine = failed(client, "acme", 3)
    other = rt.dispatcher.submit(  # acme's tenant, another scope (an A2A caller's)
        "step", "/tool current_time {}", scope="a2a:acme-other", key="x", tenant="acme"
    ).task
    for _ in range(200):
        if rt.store.get_task(other.id).status == TaskStatus.FAILED:
            break
        client.get("/healthz")  # (a round trip: the embedded run goes on meanwhile)
    assert rt.store.get_task(other.id).status == TaskStatus.FAILED
    failed(client, "bravo", 2)
    dry = bulk(client, "acme", action="retry", filter={"errorClass": "step_limit"}, dryRun=True)
    assert dry.status_code == 200 and dry.json()["matched"] == 3
    assert sorted(dry.json()["sample"]) == sorted(mine)
    assert retried(rt) == []  # the dry run changed nothing
    r = bulk(client, "acme", action="retry", idempotencyKey="j1")
    assert r.status_code == 202 and r.json()["matched"] == 3
    job = finished_job(client, "acme", r.json()["id"])
    assert (job["done"], job["failed"]) == (3, 0)
    assert retried(rt) == sorted(mine)
    again = bulk(client, "acme", action="retry", idempotencyKey="j1")
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert retried(rt) == sorted(mine)  # nothing twice
    # another key's job is not there for it
    for other in ("bravo", "acme-other", "acme-ops"):
        assert (
            client.get(f"/v1/tasks:bulk/{job['id']}", headers=auth(KEYS, other)).status_code == 404
        )


def test_the_tenant_filter_is_an_operators_within_its_reach(
    rt: Runtime, client: TestClient
) -> None:
    failed(client, "bravo", 2)
    failed(client, "acme", 1)
    plain = bulk(client, "acme", action="retry", filter={"tenant": "bravo"}, dryRun=True)
    assert plain.status_code == 403 and plain.json()["invalidParams"][0]["name"] == "filter.tenant"
    out_of_reach = bulk(client, "acme-ops", action="retry", filter={"tenant": "bravo"}, dryRun=True)
    assert out_of_reach.status_code == 403
    own = bulk(client, "acme-ops", action="retry", dryRun=True)
    assert own.json()["matched"] == 1  # every scope of acme: its reach
    every = bulk(client, "all-ops", action="retry", filter={"tenant": "bravo"}, dryRun=True)
    assert every.json()["matched"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "retry", "filter": {"nope": 1}}, "filter.nope"),
        ({"action": "cancel"}, "filter"),
        ({"action": "explode"}, "action"),
        ({"action": "retry", "filter": {"status": "running"}}, "filter.status"),
    ],
)
def test_bad_bulk_requests_are_422_naming_the_field(
    rt: Runtime, client: TestClient, body: dict[str, Any], field: str
) -> None:
    r = client.post("/v1/tasks:bulk", json=body, headers=auth(KEYS, "acme"))
    assert r.status_code == 422, r.text
    assert r.json()["invalidParams"][0]["name"] == field


def test_a_cancel_by_filter_leaves_ended_tasks_alone(rt: Runtime, client: TestClient) -> None:
    done = failed(client, "acme", 1)
    r = bulk(client, "acme", action="cancel", filter={"deployment": "step"})
    assert r.status_code == 202 and r.json()["matched"] == 0  # a failed task is not cancellable
    assert r.json()["status"] == "done"
    assert rt.store.get_task(uuid.UUID(done[0])).status == TaskStatus.FAILED


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tasks", "cancel"], "an empty filter would cancel every unfinished task"),
        (["tasks", "cancel", "abcdef12", "--status", "queued"], "a task id or filters"),
        (["tasks", "retry", "--status", "running"], "status 'running' is not one"),
        (["tasks", "retry", "--error-class", "slow"], "unknown error class 'slow'"),
        (["tasks", "retry", "--since", "yesterday"], "--since 'yesterday' is not a time"),
        (["tasks", "retry", "--label", "nope"], "label 'nope' is not k=v"),
    ],
)
def test_the_cli_refuses_bad_filters_with_exit_2_and_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fleet: ") and says in line


def test_the_ui_lists_failures_by_class_and_retries_a_group_within_reach(
    rt: Runtime, client: TestClient
) -> None:
    mine = failed(client, "acme", 2)
    failed(client, "bravo", 1)
    r = client.post("/ui/login", data={"key": KEYS["acme-ops"], "next": "/ui/failures"})
    assert r.status_code == 200, r.text  # (followed to the page)
    page = client.get("/ui/failures").text
    row = page[page.index('id="class-step_limit"') :]
    assert "the run reached max_steps" in row and "Retry 2" in row  # acme's two, not bravo's
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token is not None
    form = {"csrf": token.group(1), "errorClass": "step_limit", "hours": "24"}
    assert client.post("/ui/failures/retry", data={**form, "csrf": "0" * 32}).status_code == 403
    done = client.post("/ui/failures/retry", data=form)
    assert done.status_code == 200 and "2 of 2 retried" in done.text, done.text
    assert retried(rt) == sorted(mine)


def test_a_label_filter_matches_exactly_the_labelled(rt: Runtime, client: TestClient) -> None:
    ids = {}
    for team in ("a", "b", "a"):
        r = client.post(
            "/v1/tasks",
            json={"deployment": "step", "input": "/tool current_time {}", "labels": {"team": team}},
            headers=auth(KEYS, "acme"),
        )
        ids.setdefault(team, []).append(r.json()["id"])
    for task_id in [*ids["a"], *ids["b"]]:
        client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth(KEYS, "acme"))
    dry = bulk(client, "acme", action="retry", filter={"labels": {"team": "a"}}, dryRun=True)
    assert sorted(dry.json()["sample"]) == sorted(ids["a"])
    none = bulk(client, "acme", action="retry", filter={"labels": {"team": "c"}}, dryRun=True)
    assert none.json()["matched"] == 0


def test_the_ui_cancels_a_group_of_unfinished_tasks_within_reach(
    rt: Runtime, client: TestClient
) -> None:
    napping = {}
    for who in ("acme", "acme", "bravo"):
        r = client.post(
            "/v1/tasks",
            json={"deployment": "nap", "input": '/tool pause {"duration": "1h"}'},
            headers=auth(KEYS, who),
        )
        napping.setdefault(who, []).append(uuid.UUID(r.json()["id"]))
    for task_id in [*napping["acme"], *napping["bravo"]]:
        for _ in range(200):
            if rt.store.get_task(task_id).status == TaskStatus.WAITING:
                break
            client.get("/healthz")  # (a round trip: the embedded run goes on meanwhile)
    client.post("/ui/login", data={"key": KEYS["acme-ops"], "next": "/ui/failures"})
    page = client.get("/ui/failures").text
    row = page[page.index('id="pending-nap-waiting"') :]
    assert "Cancel 2" in row[: row.index("</tr>")]  # acme's two, not bravo's
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token is not None
    form = {"csrf": token.group(1), "deployment": "nap", "status": "waiting"}
    done = client.post("/ui/failures/cancel", data=form)
    assert done.status_code == 200 and "2 of 2 cancelled" in done.text, done.text
    assert [rt.store.get_task(i).status for i in napping["acme"]] == [TaskStatus.CANCELLED] * 2
    assert rt.store.get_task(napping["bravo"][0]).status == TaskStatus.WAITING


def test_a_retry_whose_conversation_was_deleted_meanwhile_is_refused(
    rt: Runtime, client: TestClient
) -> None:
    ids = failed(client, "acme", 2)
    bulk_ = rt.dispatcher.bulk
    walls = rules.Walls(frozenset({"acme"}), "api:acme")
    job, _ = bulk_.start(
        "retry",
        rules.parse_filter(None, "retry", everything=False),
        walls,
        tenant="acme",
        owner="acme",
        idempotency_key=None,
    )
    batch = rt.store.bulk_batch(job)  # the batch is read; then a conversation is deleted
    gone = rt.store.get_task(uuid.UUID(ids[0]))
    rt.dispatcher.lifecycle.delete("step", gone.key, by="test", tenant="acme", own="acme")
    outcome = [bulk_._act(job, task) for task in batch]
    assert outcome[1] is None and "conversation was deleted" in (outcome[0] or "")
    assert retried(rt) == [ids[1]]  # no fresh conversation for the deleted one
