"""``fleet run`` prints the reply as the model writes it: embedded, and through ``fleet serve``;
``--no-stream`` and ``--json`` print it once, as before."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_cli import _command
from tests.e2e.test_cli_live import _env
from tests.support.serve import serving

pytestmark = pytest.mark.timeout(120)

WORDS = " ".join(f"w{i}" for i in range(15))
REPLY = f"echo: {WORDS} [history: 0]"


def _config(tmp_path: Path) -> dict[str, str]:
    env = _env(tmp_path)
    config = Path(env["FLEET_CONFIG_DIR"])
    streamer = '[model]\nprovider = "echo"\nstream_ms = 100\n'
    (config / "agents" / "streamer.toml").write_text(streamer)
    (config / "deployments" / "talk.toml").write_text('agent = "streamer"\n')
    return env


def _streamed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[str, str]:
    """Run ``fleet … run talk WORDS …``: stdout, and what of it had come while the command
    still ran (its first read)."""
    with subprocess.Popen(
        [*_command(), *argv], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = os.read(proc.stdout.fileno(), 65536)
        early = first.decode() if proc.poll() is None else ""
        rest = proc.stdout.read()
        err = proc.stderr.read().decode()
        assert proc.wait(60) == 0, err
    return (first + rest).decode(), early


@pytest.mark.parametrize("where", ["embedded", "server"])
def test_the_reply_is_printed_as_it_is_written(tmp_path: Path, where: str) -> None:
    env = _config(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    argv = ["run", "talk", WORDS, "--stream"]
    if where == "embedded":
        out, early = _streamed(argv, env, cwd)
    else:
        with serving(env, tmp_path / "api.log") as url:
            out, early = _streamed(["--server", url, *argv], env, cwd)
    assert out == REPLY + "\n", "the reply once, whole"
    assert early and REPLY.startswith(early) and len(early) < len(REPLY), (
        f"text came while the model was still writing: {early!r}"
    )


def test_no_stream_and_json_print_the_reply_once(tmp_path: Path) -> None:
    env = _config(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    plain = subprocess.run(
        [*_command(), "run", "talk", WORDS, "--no-stream"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert plain.stdout == REPLY + "\n"
    as_json = subprocess.run(
        [*_command(), "run", "talk", WORDS, "--stream", "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(as_json.stdout)["reply"] == REPLY
