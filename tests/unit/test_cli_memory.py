"""``fleet memory`` through a server (``--server``): every subcommand uses the memory API with
the key in FLEET_API_KEY (never a local store), within the tenants the key reaches."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.cli import main
from fleet.runtime import Runtime
from tests.support.approvals import KEYS, approvals_runtime
from tests.support.inprocess import served


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = approvals_runtime(tmp_path)
    for name in ("FLEET_DATABASE_URL", "FLEET_REDIS_URL", "FLEET_SERVER", "FLEET_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    # The CLI's own home and config are not the server's: a local fallback would show.
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "cli-home"))
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    yield runtime
    runtime.close()


@pytest.fixture
def api(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    with served(rt, monkeypatch) as client:
        yield client


def fleet(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    who: str,
    *args: str,
    stdin: str = "",
) -> tuple[int, str, str]:
    """``fleet --server … ARGS`` with ``who``'s key."""
    monkeypatch.setenv("FLEET_API_KEY", KEYS[who])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main(["--server", "http://fleet.test", *args])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def test_every_subcommand_goes_through_the_server(rt, api, capsys, monkeypatch, tmp_path) -> None:
    said = fleet(capsys, monkeypatch, "alpha-ops", "memory", "set", "prefs", "--json", stdin="Tea.")
    assert said == (0, '{"namespace": "default", "block": "prefs", "version": 1}\n', "")
    found = rt.store.get_block("default", "prefs", tenant="alpha")
    assert found is not None and found.value == "Tea."  # the key's own tenant, on the server
    assert fleet(capsys, monkeypatch, "alpha-ops", "memory", "get", "prefs") == (0, "Tea.\n", "")
    code, out, _ = fleet(capsys, monkeypatch, "alpha-ops", "memory", "ls", "--json")
    assert code == 0 and [(b["block"], b["version"]) for b in json.loads(out)] == [("prefs", 1)]
    code, out, _ = fleet(capsys, monkeypatch, "alpha-ops", "memory", "history", "prefs", "--json")
    assert code == 0 and [v["author"] for v in json.loads(out)] == ["operator:alpha-ops"]
    # the operator of every tenant names alpha
    code, out, _ = fleet(capsys, monkeypatch, "boss", "memory", "get", "prefs", "-t", "alpha")
    assert (code, out) == (0, "Tea.\n")
    assert not (tmp_path / "cli-home").exists() and not (tmp_path / ".fleet").exists()


@pytest.mark.parametrize("who", ["bravo-ops", "bravo"])
def test_another_tenants_key_cannot_read_or_write_a_block(rt, api, capsys, monkeypatch, who):
    assert fleet(capsys, monkeypatch, "alpha-ops", "memory", "set", "prefs", stdin="Tea.")[0] == 0
    refusal = "no tenant 'alpha' among this key's" if who == "bravo-ops" else "not an operator"
    for args in (
        ("get", "prefs", "-t", "alpha"),
        ("ls", "-t", "alpha"),
        ("history", "prefs", "-t", "alpha"),
        ("set", "prefs", "-t", "alpha"),
    ):
        code, out, err = fleet(capsys, monkeypatch, who, "memory", *args, stdin="Coffee.")
        assert (code, out) == (2, "") and err.count("\n") == 1 and refusal in err, (args, err)
    # its own tenant has no such block
    code, _, err = fleet(capsys, monkeypatch, "bravo-ops", "memory", "get", "prefs")
    assert code == 2 and "no memory block 'prefs'" in err
    found = rt.store.get_block("default", "prefs", tenant="alpha")
    assert found is not None and (found.value, found.version) == ("Tea.", 1)
