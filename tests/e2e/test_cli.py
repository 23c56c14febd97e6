"""The real ``fleet`` console script, run in subprocesses: the foundation's acceptance.

Each test gets an empty working directory and its own ``FLEET_HOME``; no ``FLEET_*`` variable of
the calling shell leaks in. Embedded mode is the default (no database or Redis URL).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect

import fleet
from tests.conftest import write_config

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config"
SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
#: The shipped GitHub trigger's signing secret: the trigger answers 503 while it is unset.
SHIPPED_ENV = {"FLEET_GITHUB_WEBHOOK_SECRET": "a-webhook-signing-secret"}
UNREACHABLE_PG = "postgresql+psycopg://postgres@127.0.0.1:1/x"


def _command() -> list[str]:
    """The installed console script when there is one, else the module it points at."""
    script = Path(sys.executable).with_name("fleet")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fleet.cli"]


@dataclass
class Cli:
    """Runs ``fleet`` in ``cwd`` with a clean ``FLEET_*`` environment."""

    cwd: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def __call__(self, *args: str, stdin: str | None = None, **extra: str) -> Result:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
        env.update(self.env)
        env.update(extra)
        proc = subprocess.run(
            [*_command(), *args],
            cwd=self.cwd,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Result(args, proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, **extra: str) -> str:
        """Run; it must exit 0 and write nothing to stderr. Returns stdout."""
        r = self(*args, **extra)
        assert (r.code, r.err) == (0, ""), r
        return r.out

    def json(self, *args: str, **extra: str) -> Any:
        return json.loads(self.ok(*args, "--json", **extra))


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def one_error_line(self) -> str:
        """The single ``fleet: …`` line a refused command writes to stderr (never a traceback)."""
        lines = self.err.splitlines()
        assert len(lines) == 1, self
        assert lines[0].startswith("fleet: "), self
        assert "Traceback" not in self.err + self.out, self
        return lines[0]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    env = {"FLEET_CONFIG_DIR": str(SHIPPED_CONFIG), "FLEET_HOME": str(home), **SHIPPED_ENV}
    return Cli(cwd, home, env)


def _tables(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        return sorted(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _two_turns(cli: Cli) -> list[dict[str, Any]]:
    """The README's two commands; returns ``tasks ls --json`` afterwards."""
    first = cli.ok("run", "support", "My order hasn't arrived", "--conversation", "ticket-4711")
    assert first == "echo: My order hasn't arrived [history: 0]\n"
    second = cli.ok("run", "support", "It was order 1234", "--conversation", "ticket-4711")
    assert second == "echo: It was order 1234 [history: 2]\n"
    tasks: list[dict[str, Any]] = cli.json("tasks", "ls")
    assert [(t["seq"], t["status"], t["conversation"]) for t in tasks] == [
        (1, "succeeded", "api:ticket-4711"),
        (2, "succeeded", "api:ticket-4711"),
    ]
    assert [t["reply"] for t in tasks] == [first.strip(), second.strip()]
    return tasks


# -- embedded -----------------------------------------------------------------------------------


def test_version(cli: Cli) -> None:
    assert cli.ok("--version") == f"fleet {fleet.__version__}\n"


def test_embedded_conversation_continues(cli: Cli) -> None:
    tasks = _two_turns(cli)

    # --json prints the task record; a third turn sees both earlier exchanges.
    third = cli.json("run", "support", "Thanks", "-c", "ticket-4711")
    assert third["status"] == "succeeded"
    assert third["conversation"] == "api:ticket-4711"
    assert third["seq"] == 3
    assert third["reply"] == "echo: Thanks [history: 4]"
    uuid.UUID(third["id"])
    assert third["startedAt"] is not None
    assert third["finishedAt"] is not None
    assert third["startedAt"] <= third["finishedAt"]
    assert third["id"] not in {t["id"] for t in tasks}

    shown = cli.json("tasks", "show", tasks[0]["id"])
    assert shown.pop("deliveries") == []  # the detail adds the reply's delivery journal
    assert shown.pop("pendingApprovals") == []  # and the approvals a waiting task asks for
    assert shown.pop("waitingFor") == []  # and what a waiting task waits for
    assert shown == tasks[0]
    assert shown["input"] == [{"type": "text", "text": "My order hasn't arrived"}]

    # Filter by the scoped key the CLI printed.
    listed = cli.json("tasks", "ls", "--conversation", "api:ticket-4711")
    assert [t["seq"] for t in listed] == [1, 2, 3]

    # The SQLite file lives under FLEET_HOME, `fleet check` names it, and the cwd stays clean.
    db_file = cli.home / "fleet.db"
    assert db_file.is_file()
    checked = cli.ok("check")
    assert str(db_file) in checked
    assert "FAIL" not in checked
    assert list(cli.cwd.iterdir()) == []


def test_embedded_check_before_first_run_creates_nothing(cli: Cli) -> None:
    out = cli.ok("check")
    assert str(cli.home / "fleet.db") in out
    assert not cli.home.exists()


def test_secrets_are_redacted_before_the_store(cli: Cli) -> None:
    view = cli.json("run", "support", f"my key is {SECRET}", "-c", "leaky")
    shown = cli.json("tasks", "show", view["id"])
    for record in (view, shown):
        text = json.dumps(record)
        assert SECRET not in text
        assert record["input"] == [{"type": "text", "text": "my key is [REDACTED]"}]
        assert record["reply"] == "echo: my key is [REDACTED] [history: 0]"
    # Nowhere in the database: not in messages, runs, traces or snapshots either.
    conn = sqlite3.connect(cli.home / "fleet.db")
    try:
        dump = "\n".join(conn.iterdump())
    finally:
        conn.close()
    assert "[REDACTED]" in dump
    assert SECRET not in dump
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in dump


def test_cancel_a_queued_task(cli: Cli, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        agents={"slowish": '[model]\nprovider = "echo"\ndelay_ms = 200\n'},
        deployments={"slowish": 'agent = "slowish"\n'},
    )
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    # Embedded `--no-wait` admits without running: the task stays queued.
    queued = cli.json("run", "slowish", "later", "-c", "k", "--no-wait")
    assert (queued["status"], queued["seq"], queued["startedAt"]) == ("queued", 1, None)

    result = cli.json("tasks", "cancel", queued["id"])
    assert result["effect"] == "cancelled"
    assert result["task"]["status"] == "cancelled"
    shown = cli.json("tasks", "show", queued["id"])
    assert shown["status"] == "cancelled"
    assert (shown["attempts"], shown["startedAt"], shown["reply"]) == (0, None, None)
    assert shown["finishedAt"] is not None

    # Cancelling again changes nothing; the cancelled head does not block the conversation.
    again = cli.json("tasks", "cancel", queued["id"])
    assert (again["effect"], again["task"]["status"]) == ("finished", "cancelled")
    assert cli.ok("run", "slowish", "now", "-c", "k").startswith("echo: now [history: ")
    listed = cli.json("tasks", "ls", "-c", "k")
    assert [(t["seq"], t["status"]) for t in listed] == [(1, "cancelled"), (2, "succeeded")]


def test_short_ids_whole_rows_in_a_pipe(cli: Cli, tmp_path: Path) -> None:
    tasks = _two_turns(cli)
    markup = cli.json("run", "support", "[bold]x[/bold] :thumbs_up:", "-c", "styled")
    listing = cli.ok("tasks", "ls", COLUMNS="80")
    lines = listing.splitlines()
    assert len(lines) == 1 + 3, listing  # a pipe: one line per task, whatever COLUMNS says
    assert lines[0].split() == [
        "id",
        "deployment",
        "conversation",
        "seq",
        "status",
        "created",
        "reply/error",
    ]
    for task in [*tasks, markup]:  # each id as its first 8 characters, whole, on its row
        row = next(line for line in lines if line.startswith(task["id"][:8] + " "))
        assert "succeeded" in row.split(), listing

    # what `tasks ls` shows is what `tasks show` / `cancel` take; markup prints as typed
    shown = cli.ok("tasks", "show", markup["id"][:8], COLUMNS="80")
    assert markup["id"] in shown
    assert "[bold]x[/bold] :thumbs_up:" in shown
    assert "echo: [bold]x[/bold] :thumbs_up: [history: 0]" in shown
    assert cli.json("tasks", "show", tasks[1]["id"][:6].upper()) == {
        **tasks[1],
        "deliveries": [],
        "pendingApprovals": [],
        "waitingFor": [],
    }
    with_dash = tasks[0]["id"][:13]  # e.g. 67bdb609-1a2b
    assert cli.json("tasks", "cancel", with_dash)["task"]["id"] == tasks[0]["id"]

    # two queued tasks whose ids share a prefix: it names both, and more characters pick one
    config = write_config(
        tmp_path / "config",
        agents={"slowish": '[model]\nprovider = "echo"\n'},
        deployments={"slowish": 'agent = "slowish"\n'},
    )
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    queued = [cli.json("run", "slowish", f"q{i}", "-c", "q", "--no-wait") for i in range(2)]
    twins = ["67bdb609-1111-4000-8000-0000000000a1", "67bdb609-2222-4000-8000-0000000000b2"]
    conn = sqlite3.connect(cli.home / "fleet.db")
    try:
        for task, twin in zip(queued, twins, strict=True):
            conn.execute(
                "UPDATE tasks SET id = ? WHERE id = ?",
                (uuid.UUID(twin).hex, uuid.UUID(task["id"]).hex),
            )
        conn.commit()
    finally:
        conn.close()
    r = cli("tasks", "show", "67BDB6")
    assert r.code == 2, r
    assert r.one_error_line() == (
        f"fleet: task id prefix '67BDB6' is ambiguous: it matches {twins[0]}, {twins[1]}; "
        "give more characters"
    )
    assert cli.json("tasks", "cancel", "67bdb609-2")["task"]["id"] == twins[1]


# -- bad input: exit 2, one line, no traceback ------------------------------------------------

BAD_INPUT = [
    (("run", "nope", "hi"), "no deployment named 'nope'"),
    (("run", "support", ""), "input is empty"),
    (("run", "support", "hi", "--conversation", ""), "--conversation '' is empty"),
    (("run", "support", "hi", "--conversation", "   "), "--conversation '   ' is blank"),
    (("run", "support", "hi", "--label", "nokey"), "'nokey'"),
    (("run", "support", "hi", "--bogus"), "--bogus"),
    (("run", "tiny", "this is more than ten bytes"), "at most 10"),
    (("tasks", "show", "xyz"), "'xyz' is not a UUID"),
    (("tasks", "show", "67bdb"), "at least 6 hex characters"),
    (("tasks", "cancel", "ABCDEF"), "no task with an id starting 'ABCDEF'"),
    (("tasks", "show", "00000000-0000-0000-0000-000000000000"), "no task"),
    (("tasks", "ls", "--status", "bogus"), "'bogus'"),
    (("frobnicate",), "frobnicate"),
    (("tasks", "ls", "--deployment", "nosuch"), "no deployment named 'nosuch'"),
    (("--server", "notaurl", "tasks", "ls"), "not an http(s) URL"),
    (("--server", "http://[::1", "tasks", "ls"), "not an http(s) URL"),
]


@pytest.mark.parametrize(("args", "says"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_exits_2_with_one_line(
    cli: Cli, tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    config = write_config(
        tmp_path / "config",
        agents={"support": 'model = "echo"\n', "tiny": 'model = "echo"\nmax_input_bytes = 10\n'},
        deployments={"support": 'agent = "support"\n', "tiny": 'agent = "tiny"\n'},
    )
    r = cli(*args, FLEET_CONFIG_DIR=str(config))
    assert r.code == 2, r
    assert says in r.one_error_line()
    assert r.out == ""


def test_input_within_max_input_bytes_runs(cli: Cli, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        agents={"tiny": 'model = "echo"\nmax_input_bytes = 10\n'},
        deployments={"tiny": 'agent = "tiny"\n'},
    )
    assert cli.ok("run", "tiny", "ten bytes!", FLEET_CONFIG_DIR=str(config)) == (
        "echo: ten bytes! [history: 0]\n"
    )


def test_unreachable_database_exits_1_with_the_reason(cli: Cli) -> None:
    r = cli("run", "support", "hi", FLEET_DATABASE_URL=UNREACHABLE_PG)
    assert r.code == 1, r
    line = r.one_error_line()
    assert "unavailable" in line
    assert "127.0.0.1" in line
    assert not cli.home.exists()


# -- fleet check --------------------------------------------------------------------------------

BROKEN = [
    ("deployments", 'agent = "support"\n[conversations]\nqueue_mode = "fifo"\n', "queue_mode"),
    ("deployments", 'agent = "support"\nbogus = 1\n', "bogus"),
    ("deployments", "agent = \n", "TOML"),
    ("deployments", 'agent = "missing"\n', "agent"),
    ("agents", 'model = "gpt"\n', "model.provider"),
    ("agents", 'tools = ["shop.nothere:lookup"]\n', "tools[0] (shop.nothere:lookup): cannot"),
    ("agents", 'tools = ["shell"]\n', "tools.0.tool"),
    ("agents", 'tools = [{ tool = "wait", name = "call_agent" }]\n', "'call_agent' is one of"),
    # a [reply] header whose environment variable is not set (FLEET_* are cleared for the CLI)
    (
        "deployments",
        'agent = "support"\n[reply]\nurl = "https://example.com/x"\n'
        'headers = { Authorization = "FLEET_TEST_REPLY_TOKEN" }\n',
        "reply.headers.Authorization",
    ),
]


def _broken_config(root: Path, section: str, body: str) -> Path:
    """The shipped support agent and deployment, with one file replaced by ``body``."""
    agents = {"support": (SHIPPED_CONFIG / "agents" / "support.toml").read_text()}
    deployments = {"support": 'agent = "support"\n'}
    (agents if section == "agents" else deployments)["support"] = body
    return write_config(root, agents=agents, deployments=deployments)


def _the_failure(r: Result) -> str:
    assert "Traceback" not in r.out + r.err, r
    failed = [line for line in r.out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1, r
    return failed[0]


@pytest.mark.parametrize(("section", "body", "key"), BROKEN, ids=[b[2] for b in BROKEN])
def test_check_broken_config_exits_2_naming_file_and_key(
    cli: Cli, tmp_path: Path, section: str, body: str, key: str
) -> None:
    config = _broken_config(tmp_path / "config", section, body)
    r = cli("check", FLEET_CONFIG_DIR=str(config))
    assert r.code == 2, r
    line = _the_failure(r)
    assert str(config / section / "support.toml") in line
    assert key in line
    assert not cli.home.exists(), "check must not create the SQLite file"


def test_run_refuses_broken_config_with_the_same_line(cli: Cli, tmp_path: Path) -> None:
    section, body, _ = BROKEN[0]
    config = _broken_config(tmp_path / "config", section, body)
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    line = _the_failure(cli("check"))
    run = cli("run", "support", "hi")
    assert run.code == 2, run
    assert run.one_error_line() == "fleet: " + line.split("config: ", 1)[1]
    assert not cli.home.exists()


def test_check_unreachable_database_exits_1_with_the_reason(cli: Cli) -> None:
    r = cli("check", FLEET_DATABASE_URL=UNREACHABLE_PG)
    assert r.code == 1, r
    line = _the_failure(r)
    assert "database" in line
    assert "127.0.0.1" in line
    assert "refused" in line.lower()


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.mark.pg
def test_postgres_flow_needs_migrate_first(cli: Cli, empty_pg_url: str) -> None:
    cli.env["FLEET_DATABASE_URL"] = empty_pg_url

    r = cli("run", "support", "My order hasn't arrived", "--conversation", "ticket-4711")
    assert r.code == 1, r
    assert "fleet migrate" in r.one_error_line()
    checked = cli("check")
    assert checked.code == 1, checked
    assert "fleet migrate" in _the_failure(checked)
    assert _tables(empty_pg_url) == [], "run and check must not create tables"

    assert "migrated" in cli.ok("migrate")
    assert "nothing to do" in cli.ok("migrate")
    assert "FAIL" not in cli.ok("check")
    _two_turns(cli)
    assert not cli.home.exists(), "fleet mode with a database URL writes no SQLite file"


@pytest.mark.pg
def test_postgres_check_broken_config_creates_no_table(
    cli: Cli, tmp_path: Path, empty_pg_url: str
) -> None:
    section, body, key = BROKEN[0]
    config = _broken_config(tmp_path / "config", section, body)
    r = cli("check", FLEET_CONFIG_DIR=str(config), FLEET_DATABASE_URL=empty_pg_url)
    assert r.code == 2, r
    config_failures = [line for line in r.out.splitlines() if line.startswith("FAIL  config")]
    assert len(config_failures) == 1, r
    assert key in config_failures[0]
    assert _tables(empty_pg_url) == []


def test_bad_settings_are_bad_input_and_passwords_stay_hidden(cli: Cli, tmp_path: Path) -> None:
    r = cli("check", FLEET_LEASE_TTL="abc")
    assert r.code == 2 and "FLEET_LEASE_TTL" in r.out, r
    r = cli("check", FLEET_DATABASE_URL="postgresql://u:TOPSECRET@127.0.0.1:abc/x")
    assert r.code == 2 and "TOPSECRET" not in r.out + r.err, r
    r = cli("tasks", "ls", FLEET_DATABASE_URL="postgresql://u:TOPSECRET@127.0.0.1:abc/x")
    assert r.code == 2 and "TOPSECRET" not in r.out + r.err, r
    r = cli("--server", "http://u:SRVPW@127.0.0.1:1", "tasks", "ls")
    assert r.code == 1 and "SRVPW" not in r.out + r.err and "cannot reach" in r.err, r
    r = cli("check", FLEET_REDIS_URL="redis://:REDISPW@127.0.0.1:1/0")
    assert r.code == 1 and "REDISPW" not in r.out + r.err, r


def test_check_reads_caller_keys_as_the_server_will(cli: Cli, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        agents={"support": 'model = "echo"\n'},
        deployments={"support": 'agent = "support"\n'},
    )
    (config / "callers").mkdir()
    (config / "callers" / "ops.toml").write_text(
        'source = "api"\nkey_env = "FLEET_TEST_UNSET_KEY"\ndeployments = ["*"]\n'
    )
    r = cli("check", FLEET_CONFIG_DIR=str(config))
    assert r.code == 2 and "FLEET_TEST_UNSET_KEY is not set" in r.out, r


def test_worker_refuses_a_node_name_with_spaces(cli: Cli) -> None:
    r = cli("worker", "--name", "fleet one@%h", FLEET_REDIS_URL="redis://127.0.0.1:9/0")
    assert r.code == 2, r
    assert r.one_error_line() == (
        "fleet: --name 'fleet one@%h': a node name is one word without spaces, e.g. fleet1@%h"
    )
