"""``pause`` in embedded mode (SQLite, no Redis, one process): the run stops for its pause and
the process's own wake-up resumes it at its time."""

from __future__ import annotations

import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.config import Settings
from fleet.runtime import build
from tests.conftest import AGENTS, DEPLOYMENTS, write_config


def test_a_pause_ends_at_its_time_in_embedded_mode(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        {**AGENTS, "napper": 'model = "echo"\ntools = ["pause"]\n'},
        {**DEPLOYMENTS, "nap": 'agent = "napper"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config))
    try:
        with TestClient(create_app(rt)) as client:
            body = {"deployment": "nap", "input": '/tool pause {"duration": "1s"}'}
            task = client.post("/v1/tasks", json=body).json()
            done = client.get(f"/v1/tasks/{task['id']}", params={"wait": 30}).json()
        assert done["status"] == "succeeded", done
        runs = rt.store.runs_of(uuid.UUID(task["id"]))
        assert [r.status for r in runs] == ["waiting", "succeeded"]
    finally:
        rt.close()
