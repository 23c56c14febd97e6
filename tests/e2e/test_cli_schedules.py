"""``fleet schedules ls|add|rm`` as users run it (embedded): the JSON records, the table, and
refusals (exit 2, one line naming the option)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.test_cli import SHIPPED_CONFIG, Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    config = tmp_path / "config"
    shutil.copytree(SHIPPED_CONFIG, config, ignore=shutil.ignore_patterns("__pycache__"))
    (config / "schedules").mkdir()
    (config / "schedules" / "digest.toml").write_text(
        'deployment = "support"\ncron = "0 8 * * 1-5"\ntimezone = "Europe/Berlin"\n'
        'input = "Write today\'s digest."\n'
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    env = {"FLEET_CONFIG_DIR": str(config), "FLEET_HOME": str(home), "COLUMNS": "120"}
    return Cli(cwd, home, env)


def test_add_ls_rm(cli: Cli) -> None:
    made = cli.json(
        "schedules", "add", "pulse", "-d", "triage", "--every", "15m", "-i", "check the queue"
    )
    assert (made["name"], made["every"], made["scope"], made["source"]) == (
        "pulse",
        900.0,
        "api",
        "api",
    )
    assert made["nextTick"][14:19] in ("00:00", "15:00", "30:00", "45:00")
    listed = cli.json("schedules", "ls")
    assert [(s["name"], s["source"], s["state"]) for s in listed] == [
        ("digest", "file", "unsynced"),  # no beat has stored it: ls writes nothing
        ("pulse", "api", "new"),
    ]
    assert listed[0]["nextTick"] is not None and "fleet beat" in listed[0]["note"]
    table = cli.ok("schedules", "ls")
    assert "cron 0 8 * * 1-5 Europe/Berlin" in table and "every 15m" in table
    assert "not stored yet" in table
    assert cli.ok("schedules", "rm", "pulse") == "schedule pulse deleted\n"
    assert [s["name"] for s in cli.json("schedules", "ls")] == ["digest"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--cron", "0 8 * * 1-8"), "fleet: --cron: cron '0 8 * * 1-8': day of week 8 is out"),
        (("--every", "0.5s"), "fleet: --every: must be at least 1s"),
        (("--every", "1m", "--cron", "* * * * *"), "exactly one of cron"),
        (("--every", "1m", "--timezone", "Moon/Base"), "fleet: --timezone: 'Moon/Base' is not"),
        (("--every", "1m", "--overlap", "wait"), "fleet: --overlap: "),
        (("--every", "1m", "--catch-up", "all"), "fleet: --catch-up: "),
        (("--every", "1m", "--end-at", "soon"), "fleet: --end-at: "),
        (
            ("--every", "1m", "--end-at", "2020-01-01T00:00:00Z"),
            "fleet: --end-at: 2020-01-01T00:00:00+00:00 is not after the first tick",
        ),
        (("--every", "1m", "--caller", "ops"), "fleet: --caller: no caller named 'ops'"),
    ],
)
def test_bad_values_exit_2_naming_the_option(cli: Cli, args: tuple[str, ...], says: str) -> None:
    r = cli("schedules", "add", "pulse", "-d", "triage", "-i", "x", *args)
    assert r.code == 2
    assert says in r.one_error_line()


def test_rm_refuses_a_files_schedule_and_a_missing_one(cli: Cli) -> None:
    r = cli("schedules", "rm", "digest")  # (no beat has stored it yet: it is the file's still)
    assert r.code == 2 and "config/schedules/digest.toml" in r.one_error_line()
    r = cli("schedules", "rm", "nothing")
    assert r.code == 2 and r.one_error_line() == "fleet: no schedule named 'nothing'"
    r = cli("schedules", "add", "digest", "-d", "triage", "--every", "1h", "-i", "x")
    assert r.code == 2 and "exists in scope 'api'" in r.one_error_line()


def test_check_shows_each_schedule_and_fails_a_bad_key_naming_file_and_key(cli: Cli) -> None:
    r = cli("check")  # (the embedded database does not exist yet: that line fails)
    shown = r.out
    assert "ok    schedules: digest (cron 0 8 * * 1-5 Europe/Berlin) on support: next tick" in shown
    config = Path(cli.env["FLEET_CONFIG_DIR"])
    (config / "schedules" / "broken.toml").write_text(
        'deployment = "support"\ncron = "0 8 * * 1-5"\ntimezone = "Europe/Berlni"\ninput = "x"\n'
    )
    r = cli("check")
    assert r.code != 0
    assert (
        f"FAIL  config: {config}/schedules/broken.toml: timezone: 'Europe/Berlni' is not a time "
        "zone name" in r.out
    )
