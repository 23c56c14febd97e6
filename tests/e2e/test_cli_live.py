"""`fleet run --live` shows each step while the task runs: embedded, and through `fleet serve`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import _command
from tests.support.serve import serving

pytestmark = pytest.mark.timeout(120)

SLOW = '/tool current_time {}\n/tool wait {"seconds": 2}'


def _env(tmp_path: Path) -> dict[str, str]:
    config = write_config(tmp_path / "config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    return {**env, "FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(tmp_path / "home")}


def _live_run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[list[str], str, bool]:
    """Run ``fleet … run … --live``; the stderr lines, stdout, and whether the first tool step
    was printed while the command was still waiting (the wait tool still had ~2 s to go)."""
    with subprocess.Popen(
        [*_command(), *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        lines: list[str] = []
        live = False
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("· step 2  tool current_time"):
                live = proc.poll() is None  # printed before the run ended
        out = proc.stdout.read()
        assert proc.wait(60) == 0, (lines, out)
    return lines, out, live


def _check(lines: list[str], out: str, live: bool) -> None:
    assert live, f"the step was not shown while the task ran: {lines}"
    assert lines[0] == "· queued"
    assert lines[1].startswith("· running: attempt 1 on ")
    assert lines[2].startswith("· step 1  model echo  ") and "→ current_time, wait" in lines[2]
    assert lines[3].startswith("· step 2  tool current_time  {} → 20")
    assert lines[4].startswith('· step 3  tool wait  {"seconds": 2} → waited 2s')
    assert lines[5].startswith("· step 4  model echo")
    assert lines[6:] == ["· succeeded"]
    assert out.startswith("echo: /tool current_time {}")


def test_embedded_run_shows_steps_live(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    _check(*_live_run(["run", "tooly", SLOW, "--live"], _env(tmp_path), cwd))


def test_run_through_a_server_shows_steps_live(tmp_path: Path) -> None:
    env = _env(tmp_path)
    with serving(env, tmp_path / "api.log") as url:
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        _check(*_live_run(["--server", url, "run", "tooly", SLOW, "--live"], env, cwd))


def test_no_live_view_without_a_terminal_unless_asked(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = subprocess.run(
        [*_command(), "run", "tooly", "/tool current_time {}"],
        cwd=cwd,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (r.returncode, r.stderr) == (0, ""), r
