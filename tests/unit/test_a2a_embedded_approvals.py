"""A2A approvals in embedded mode (SQLite, no Redis, an open API): the same input-required
task and decision data part over plain JSON-RPC (v0.3 ``message/send``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.runtime import build
from tests.conftest import AGENTS, DEPLOYMENTS, write_config

REFUNDER = """
    model = "echo"
    tools = [{ tool = "tests.support.shop_tools:count", approval = "required" }]
"""


def send(client: TestClient, *parts: dict[str, Any], task: dict[str, Any] | None = None) -> Any:
    message: dict[str, Any] = {"role": "user", "messageId": f"m-{id(parts)}", "parts": list(parts)}
    if task is not None:
        message |= {"taskId": task["id"], "contextId": task["contextId"]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    r = client.post("/a2a/refunds", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_input_required_and_a_decision_in_embedded_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_TEST_COUNTER", str(tmp_path / "count.txt"))
    config = write_config(
        tmp_path / "config",
        {**AGENTS, "refunder": REFUNDER},
        {**DEPLOYMENTS, "refunds": 'agent = "refunder"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config))
    try:
        with TestClient(create_app(rt)) as client:
            task = send(client, {"kind": "text", "text": "/tool count {}"})["result"]
            assert task["status"]["state"] == "input-required", task
            text, data = task["status"]["message"]["parts"]
            [approval] = data["data"]["pendingApprovals"]
            assert approval["tool"] == "count" and approval["id"] in text["text"]

            refused = send(client, {"kind": "text", "text": "ok"}, task=task)["error"]
            assert refused["code"] == -32602 and "input-required" in refused["message"]

            answer = {"kind": "data", "data": {"decision": "reject", "reason": "no"}}
            done = send(client, answer, task=task)["result"]
            assert done["id"] == task["id"] and done["status"]["state"] == "completed", done
        [wait] = rt.store.waits_of(uuid.UUID(task["id"]))
        assert (wait.status, wait.decided_by, wait.reason) == ("rejected", "a2a:anonymous", "no")
        assert not (tmp_path / "count.txt").exists()
    finally:
        rt.close()
