"""The authorize policy: asked before admission, at run start, and at memory tool calls."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from fleet import policy
from fleet.api.app import create_app
from fleet.config import Settings
from fleet.domain.values import TaskStatus
from fleet.errors import ConfigError, Forbidden
from fleet.runtime import Runtime, build
from fleet.store import schema as s
from tests.conftest import write_config
from tests.support import policies

AGENTS = {"noter": 'model = "echo"\nnotes = true\n'}
DEPLOYMENTS = {"chat": 'agent = "noter"\nnamespace = "acme"\n'}


def runtime(tmp_path: Path, rule: str) -> Runtime:
    root = write_config(tmp_path / "config", AGENTS, DEPLOYMENTS)
    (root / "fleet.toml").write_text(f'authorize = "tests.support.policies:{rule}"\n')
    return build(Settings(home=tmp_path / "home", config_dir=root))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    policies.ASKED.clear()
    yield
    policies.ASKED.clear()


def drain(rt: Runtime, task_id):
    rt.dispatcher.drain(rt.store.get_task(task_id).conversation_id)
    return rt.store.get_task(task_id)


@pytest.mark.parametrize(
    ("verdict", "allowed"),
    [(True, True), (None, True), (False, False)],
)
def test_check_reads_the_verdict(verdict, allowed):
    access = policy.Access("dispatch", "ops", "api", "chat", "api:k")
    if allowed:
        policy.check(lambda a: verdict, access)
    else:
        with pytest.raises(Forbidden, match="not authorized to dispatch in conversation 'api:k'"):
            policy.check(lambda a: verdict, access)


def test_a_failing_policy_refuses():
    with pytest.raises(
        Forbidden, match=r"the authorize policy failed \(RuntimeError: policy database down"
    ):
        policy.check(policies.broken, policy.Access("recall", None, "api", "chat", "api:k"))


def test_a_policy_that_does_not_import_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError) as info:
        runtime(tmp_path, "nowhere_to_be_found")
    assert info.value.key == "authorize" and info.value.file.endswith("fleet.toml")


def test_dispatch_recall_and_notes_are_asked_with_who_and_where(tmp_path: Path):
    rt = runtime(tmp_path, "record_all")
    task = rt.dispatcher.submit(
        "chat", '/tool memory_set {"key": "k", "body": "v"}', key="t-1", caller="ops"
    ).task
    assert drain(rt, task.id).status == TaskStatus.SUCCEEDED
    assert [
        (a.action, a.caller, a.scope, a.deployment, a.conversation, a.namespace)
        for a in policies.ASKED
    ] == [
        ("dispatch", "ops", "api", "chat", "api:t-1", "acme"),
        ("recall", "ops", "api", "chat", "api:t-1", "acme"),
        ("notes", "ops", "api", "chat", "api:t-1", "acme"),
    ]
    assert policies.ASKED[0].conversation_id is None  # not admitted yet: a new conversation
    assert policies.ASKED[1].conversation_id == task.conversation_id
    rt.close()


def test_a_refused_dispatch_is_a_403_and_admits_nothing(tmp_path: Path):
    rt = runtime(tmp_path, "no_vip")
    with TestClient(create_app(rt)) as client:
        refused = client.post(
            "/v1/tasks", json={"deployment": "chat", "input": "hi", "conversationKey": "vip-1"}
        )
        ok = client.post(
            "/v1/tasks", json={"deployment": "chat", "input": "hi", "conversationKey": "t-2"}
        )
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "vip conversations are closed to this caller" in refused.json()["detail"]
    assert ok.status_code == 202
    with rt.store.read() as conn:
        keys = conn.execute(select(s.conversations.c.key)).scalars().all()
    assert keys == ["t-2"]
    rt.close()


def test_a_refused_recall_fails_the_run_before_the_model_sees_anything(tmp_path: Path):
    rt = runtime(tmp_path, "no_recall")
    task = rt.dispatcher.submit("chat", "hello", key="t-3").task
    done = drain(rt, task.id)
    assert done.status == TaskStatus.FAILED
    assert done.error == "not authorized to recall in conversation 'api:t-3'"
    assert rt.store.journal(task.id) == []  # no model step ran
    rt.close()


def test_a_refused_notes_call_is_an_error_result_and_the_run_goes_on(tmp_path: Path):
    rt = runtime(tmp_path, "no_notes")
    task = rt.dispatcher.submit("chat", '/tool memory_set {"key": "k", "body": "v"}', key="t").task
    done = drain(rt, task.id)
    assert done.status == TaskStatus.SUCCEEDED
    (tool,) = [j for j in rt.store.journal(task.id) if j.kind == "tool"]
    assert tool.output == "error: not authorized to notes in conversation 'api:t'"
    assert rt.store.list_notes(task.conversation_id, rt.dispatcher.clock()) == []
    rt.close()


def test_the_policy_sees_the_caller_a_run_was_submitted_by(tmp_path: Path):
    rt = runtime(tmp_path, "record_all")
    root = rt.config.root
    (root / "callers").mkdir(exist_ok=True)
    (root / "callers" / "ops.toml").write_text(
        textwrap.dedent('source = "api"\nkey_env = "FLEET_T_OPS_KEY"\n')
    )
    rt.close()
    import os

    os.environ["FLEET_T_OPS_KEY"] = "ops-key-123456"
    try:
        rt = build(Settings(home=tmp_path / "home", config_dir=root))
        with TestClient(create_app(rt)) as client:
            answer = client.post(
                "/v1/tasks",
                json={"deployment": "chat", "input": "hi", "conversationKey": "t-9"},
                headers={"Authorization": "Bearer ops-key-123456"},
            ).json()
        assert rt.store.get_task(uuid.UUID(answer["id"])).caller == "ops"
        assert policies.ASKED[0].caller == "ops"
        rt.close()
    finally:
        del os.environ["FLEET_T_OPS_KEY"]
