"""``fleet tenants`` as users run it (embedded): the JSON records, the table at 80 columns, one
tenant, and an unknown one (exit 2, one line)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleet.config import Settings
from fleet.runtime import build
from tests.e2e.test_cli import SHIPPED_CONFIG, Cli

#: A tenant name as long as they come (63 characters): the table folds it, never a header.
LONG = "a-customer-whose-name-is-as-long-as-a-tenant-name-may-ever-be-x"
HEADERS = (
    "tenant",
    "weight",
    "running",
    "queued",
    "waiting",
    "oldest due",
    "tokens/day",
    "refused",
)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    config = tmp_path / "config"
    shutil.copytree(SHIPPED_CONFIG, config, ignore=shutil.ignore_patterns("__pycache__"))
    (config / "tenants").mkdir()
    (config / "tenants" / "acme.toml").write_text("weight = 3\ntokens_per_day = 2500000\n")
    (config / "tenants" / f"{LONG}.toml").write_text("weight = 2\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    env = {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home), "COLUMNS": "80"}
    return Cli(cwd, home, env)


def queue_for_acme(cli: Cli, count: int) -> None:
    """Tasks of tenant acme left queued (nothing runs them: no `fleet serve`)."""
    rt = build(Settings(home=cli.home, config_dir=Path(cli.env["FLEET_CONFIG_DIR"])))
    try:
        for n in range(count):
            rt.dispatcher.submit("support", "wait", scope="api:acme", key=f"k{n}", tenant="acme")
    finally:
        rt.close()


def test_ls_json_has_each_tenants_figures(cli: Cli) -> None:
    task = cli.json("run", "support", "My order hasn't arrived", "-c", "ticket-4711")
    runs = cli.json("tasks", "show", task["id"], "--trace")["runs"]
    used = sum(r["usage"]["promptTokens"] + r["usage"]["completionTokens"] for r in runs)
    queue_for_acme(cli, 2)
    found = {t["tenant"]: t for t in cli.json("tenants", "ls")}
    assert sorted(found) == sorted(["acme", "default", LONG])
    acme, default = found["acme"], found["default"]
    assert (acme["weight"], acme["queued"], acme["running"]) == (3, 2, 0)
    assert (acme["tokensToday"], acme["tokensPerDay"]) == (0, 2500000)
    assert acme["quotas"] == {"tokens_per_day": 2500000} and acme["refusedToday"] == 0
    assert (default["queued"], default["tokensToday"], default["tokensPerDay"]) == (0, used, None)
    assert used > 0
    shown = cli.json("tenants", "show", "acme")
    assert shown["oldestDueSeconds"] >= acme["oldestDueSeconds"] > 0  # it still waits
    still = {k: v for k, v in acme.items() if k != "oldestDueSeconds"}
    assert {k: v for k, v in shown.items() if k != "oldestDueSeconds"} == still


def test_in_a_pipe_each_tenant_is_one_whole_line(cli: Cli) -> None:
    cli.ok("run", "support", "My order hasn't arrived", "-c", "ticket-4711")
    queue_for_acme(cli, 3)
    table = cli.ok("tenants", "ls")
    lines = table.splitlines()
    assert lines[0].split() == [w for h in HEADERS for w in h.split()], table
    acme = next(line for line in lines if line.startswith("acme "))
    assert acme.split()[:5] == ["acme", "3", "0", "3", "0"]  # weight, running, queued, waiting
    assert acme.split()[6] == "0/2.5M"  # nothing used today of its 2,500,000
    assert any(line.startswith(f"{LONG} ") for line in lines), table  # whole, never folded
    assert len(lines) == 1 + 1 + 1 + 1, table


def test_show_one_and_an_unknown_one_exits_2(cli: Cli) -> None:
    queue_for_acme(cli, 1)
    shown = cli.ok("tenants", "show", "acme")
    assert shown.startswith("acme  weight 3\n"), shown
    assert "queued 1" in shown and "tokens today 0 of 2,500,000" in shown
    assert "quotas: tokens_per_day 2,500,000" in shown
    r = cli("tenants", "show", "nope")
    assert r.code == 2, r
    assert r.one_error_line() == "fleet: no tenant 'nope'"
