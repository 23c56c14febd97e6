"""``fleet export``, ``fleet erase`` and ``fleet audit ls`` on the store (the operator): the
one-tenant rule, confirmation, bad input as exit 2 with one line, and the audit entries a
command on the store appends (actor ``cli:<user>``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.cli.audited import os_user
from fleet.config import Settings
from fleet.runtime import Runtime, build
from tests.conftest import write_config

WHO = "ada@example.com"


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    config = write_config(tmp_path / "config")
    for name in ("FLEET_DATABASE_URL", "FLEET_REDIS_URL", "FLEET_SERVER", "FLEET_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(config))
    runtime = build(Settings(home=tmp_path / "home", config_dir=config))
    yield runtime
    runtime.close()


def ran(rt: Runtime, text: str, key: str, tenant: str = "default") -> None:
    adm = rt.dispatcher.submit("chat", text, key=key, resource_id=WHO, tenant=tenant)
    rt.dispatcher.drain(adm.task.conversation_id, tenant=tenant)


def fleet(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def test_export_and_erase_on_the_store_are_audited(rt: Runtime, capsys) -> None:
    ran(rt, "canary-one", "k1")
    code, out, err = fleet(capsys, "export", "--resource", WHO)
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert lines[0]["kind"] == "export" and "canary-one" in out
    code, out, err = fleet(capsys, "erase", "--resource", WHO, "--yes")
    assert code == 0, err
    assert out.startswith(f"erased resource '{WHO}' in tenant default: 1 conversations")
    assert rt.store.resource_conversations("default", WHO) == []
    code, out, err = fleet(capsys, "audit", "ls", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert [(e["action"], e["actor"], e["outcome"]) for e in found] == [
        ("resource.erase", f"cli:{os_user()}", "ok"),
        ("resource.export", f"cli:{os_user()}", "ok"),
    ]
    assert WHO not in out and all(e["object"].startswith("resource:") for e in found)
    code, out, _ = fleet(capsys, "audit", "ls", "--action", "resource.erase")
    assert code == 0 and "resource.erase" in out and "resource.export" not in out


def test_a_resource_in_several_tenants_needs_its_tenant(rt: Runtime, capsys) -> None:
    ran(rt, "canary-default", "k1")
    ran(rt, "canary-acme", "k2", tenant="acme")
    code, out, err = fleet(capsys, "erase", "--resource", WHO, "--yes")
    assert code == 2 and out == ""
    said = "fleet: the resource exists in tenants acme, default: name one with --tenant"
    assert err.strip() == said
    assert rt.store.resource_tenants(WHO) == ["acme", "default"]
    code, _, err = fleet(capsys, "erase", "--resource", WHO, "--tenant", "acme", "--yes")
    assert code == 0, err
    assert rt.store.resource_tenants(WHO) == ["default"]
    refused = fleet(capsys, "audit", "ls", "--json")[1]
    assert [e["outcome"] for e in json.loads(refused)] == ["ok", "refused 422"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("erase", "--yes"), "name what to act on: --resource R, or --conversation KEY -d"),
        (("erase", "--conversation", "k1", "--yes"), "--conversation needs its deployment"),
        (("export", "--resource", WHO, "-d", "chat"), "-d names a conversation's deployment"),
        (("erase", "--resource", WHO), "pass --yes to confirm without a terminal"),
        (("erase", "--resource", WHO, "--tenant", "nosuch", "--yes"), "no tenant named 'nosuch'"),
        (("export", "--resource", "a\u0007b"), "resource id"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_erases_nothing(
    rt: Runtime, capsys, args: tuple[str, ...], says: str
) -> None:
    ran(rt, "canary-one", "k1")
    code, out, err = fleet(capsys, *args)
    assert code == 2 and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert rt.store.resource_tenants(WHO) == ["default"]


def test_a_running_resource_is_refused_with_no_cancel(rt: Runtime, capsys) -> None:
    queued = rt.dispatcher.submit("chat", "waits in its queue", key="k1", resource_id=WHO)
    code, _, err = fleet(capsys, "erase", "--resource", WHO, "--no-cancel", "--yes")
    assert code == 2 and "1 task(s) running or waiting; nothing was erased" in err, err
    assert rt.store.get_task(queued.task.id).status.value == "queued"
    code, out, err = fleet(capsys, "erase", "--resource", WHO, "--yes")
    assert code == 0 and "(1 task(s) cancelled first)" in out, err
