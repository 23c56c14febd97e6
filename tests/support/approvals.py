"""Two tenants whose tasks wait for approvals, on an embedded SQLite runtime: the CLI's and the
UI's tests of approvals share it.

Tenant alpha and tenant bravo each have an API key and an operator key (reaching its own tenant
alone); ``boss`` is an operator of every tenant. A task of deployment ``shop`` calls a tool that
needs an approval (``/tool count {}``), so once run it waits, holding nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from fleet.config import Settings
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import Runtime, build
from tests.conftest import AGENTS, DEPLOYMENTS, write_config
from tests.support.callers import write_callers

KEYS = {
    name: f"{name}-key-0123456789" for name in ("alpha", "bravo", "alpha-ops", "bravo-ops", "boss")
}
CALLERS = {
    "alpha": 'source = "api"\ntenant = "alpha"\n',
    "bravo": 'source = "api"\ntenant = "bravo"\n',
    "alpha-ops": 'source = "api"\ntenant = "alpha"\noperator = true\n',
    "bravo-ops": 'source = "api"\ntenant = "bravo"\noperator = true\n',
    "boss": 'source = "api"\noperator = true\ntenants = ["*"]\n',
}
SHOP_AGENT = """
    model = "echo"
    tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
"""
#: The input that makes a ``shop`` task call the tool needing an approval.
ASK = "/tool count {}"


def write_approvals_config(root: Path) -> Path:
    config = write_config(
        root, {**AGENTS, "shop": SHOP_AGENT}, {**DEPLOYMENTS, "shop": 'agent = "shop"\n'}
    )
    return write_callers(config, CALLERS, KEYS)


def approvals_runtime(tmp_path: Path) -> Runtime:
    config = write_approvals_config(tmp_path / "config")
    return build(Settings(home=tmp_path / "home", config_dir=config))


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def park(rt: Runtime, api: TestClient, who: str, key: str = "k", ask: str = ASK) -> Task:
    """A ``shop`` task submitted with ``who``'s key, run until it waits for its approval
    (``ask``: the input that calls the tool, with its arguments)."""
    r = api.post(
        "/v1/tasks",
        json={"deployment": "shop", "input": ask, "conversationKey": key},
        headers=auth(who),
    )
    assert r.status_code == 202, r.text
    task = rt.store.get_task(uuid.UUID(r.json()["id"]))
    rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
    parked = rt.store.get_task(task.id)
    assert parked.status == TaskStatus.WAITING, parked
    return parked


def pending_ids(rt: Runtime, task: Task) -> list[str]:
    return [w.id for w in rt.store.waits_of(task.id, pending=True)]


def resume(rt: Runtime, task: Task) -> Task:
    """Run the task on from its decision (the test's runtime runs nothing by itself)."""
    rt.dispatcher.drain(task.conversation_id, tenant=task.tenant)
    return rt.store.get_task(task.id)
