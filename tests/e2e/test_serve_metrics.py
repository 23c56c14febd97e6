"""``fleet serve --metrics-port N``: the metrics on a port of their own without a key, and the
API port's ``/metrics`` asking for the token or an operator key (a real ``fleet serve``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_config
from tests.support.serve import free_port, serving

pytestmark = pytest.mark.timeout(120)

TOKEN = "metrics-token-0123456789abcdef"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    config = write_config(tmp_path / "config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    return {**env, "FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(tmp_path / "home"), **extra}


def test_a_metrics_port_of_its_own_needs_no_key_and_the_api_port_then_asks(tmp_path: Path) -> None:
    port = free_port()
    env = _env(tmp_path, FLEET_METRICS_TOKEN=TOKEN)
    with serving(env, tmp_path / "api.log", "--metrics-port", str(port)) as url:
        r = httpx.post(f"{url}/v1/tasks", json={"deployment": "chat", "input": "hi"})
        assert r.status_code == 202, r.text
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scraped.status_code == 200, scraped.text
        assert scraped.headers["content-type"].startswith("text/plain")
        assert "fleet_backlog_up 1.0" in scraped.text
        assert 'fleet_tasks_submitted_total{deployment="chat",outcome="new"} 1.0' in scraped.text
        assert httpx.get(f"http://127.0.0.1:{port}/v1/tasks", timeout=10).status_code == 404
        closed = httpx.get(f"{url}/metrics", timeout=10)
        assert closed.status_code == 401, closed.text
        assert closed.headers["content-type"] == "application/problem+json"
        assert f"without a key on port {port}" in closed.json()["detail"]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{url}/metrics", headers=auth, timeout=10).status_code == 200


def test_the_metrics_port_must_differ_from_the_api_port(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "fleet.cli", "serve", "--port", "8123", "--metrics-port", "8123"]
    env = _env(tmp_path)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == [
        "fleet: --metrics-port 8123 is the API's --port: give it a port of its own"
    ]
