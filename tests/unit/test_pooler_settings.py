"""FLEET_DATABASE_POOLER: which mode a URL and the setting give, and what an engine prepares."""

from __future__ import annotations

import logging

import psycopg.errors
import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError

from fleet.config import load_settings
from fleet.errors import ConfigError, Unavailable
from fleet.store import db


@pytest.mark.parametrize(
    ("url", "setting", "mode"),
    [
        ("postgresql://u@db:5432/fleet", None, "none"),
        ("postgresql://u@db/fleet", None, "none"),
        ("postgresql://u@bouncer:6432/fleet", None, "transaction"),
        ("postgresql://u@bouncer:6432/fleet", "session", "session"),
        ("postgresql://u@bouncer:6432/fleet", "none", "none"),
        ("postgresql://u@db:5432/fleet", "transaction", "transaction"),
        ("sqlite:///x.db", None, "none"),
    ],
)
def test_pooler_mode(url: str, setting: str | None, mode: str) -> None:
    assert db.pooler_mode(db.normalize_url(url), setting) == mode


def test_a_guess_from_the_port_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fleet.store.db"):
        db.pooler_mode(db.normalize_url("postgresql://u@guess-logged:6432/fleet"), None)
    assert "FLEET_DATABASE_POOLER" in caplog.text


@pytest.mark.parametrize(("pooler", "prepares"), [("transaction", False), ("session", True)])
def test_engine_prepares_unless_transaction_pooling(pooler: str, prepares: bool) -> None:
    engine = db.create("postgresql://u@db:5432/fleet", pooler=pooler)
    try:
        assert db.prepares(engine) is prepares
    finally:
        engine.dispose()


def test_settings_read_the_pooler_and_the_migration_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_DATABASE_POOLER", "transaction")
    monkeypatch.setenv("FLEET_MIGRATE_DATABASE_URL", "postgresql://u@db:5432/fleet")
    settings = load_settings()
    assert settings.database_pooler == "transaction"
    assert settings.migrate_database_url == "postgresql://u@db:5432/fleet"
    monkeypatch.setenv("FLEET_DATABASE_POOLER", "statement")
    with pytest.raises(ConfigError, match="FLEET_DATABASE_POOLER"):
        load_settings()


@pytest.mark.parametrize(
    "error", [psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName]
)
def test_a_prepared_statement_error_names_the_setting(error: type[Exception]) -> None:
    for raised in (error("prepared statement"), ProgrammingError("x", {}, error("gone"))):
        with (
            pytest.raises(Unavailable, match="FLEET_DATABASE_POOLER=transaction"),
            db.unavailable_on_outage(),
        ):
            raise raised


def test_other_programming_errors_pass_through() -> None:
    with pytest.raises(psycopg.errors.UndefinedTable), db.unavailable_on_outage():
        raise psycopg.errors.UndefinedTable("no such table")


BIND = 'bind message supplies 14 parameters, but prepared statement "_pg3_0" requires 3'
STARTUP = (
    'connection failed: connection to server at "127.0.0.1", port 6433 failed: FATAL:  '
    "unsupported startup parameter: options"
)


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        (psycopg.errors.ProtocolViolation(BIND), db.POOLER_HINT),
        (OperationalError("SELECT 1", {}, psycopg.errors.ProtocolViolation(BIND)), db.POOLER_HINT),
        (
            psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_1" already exists'),
            db.POOLER_HINT,
        ),
        (
            psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_2" does not exist'),
            db.POOLER_HINT,
        ),
        (psycopg.OperationalError(STARTUP), db.STARTUP_HINT),
        (OperationalError(None, None, psycopg.OperationalError(STARTUP)), db.STARTUP_HINT),
        (psycopg.errors.ProtocolViolation("invalid message format"), None),
        (psycopg.OperationalError("connection refused"), None),
    ],
)
def test_a_poolers_mistake_is_described_naming_the_setting(
    error: Exception, hint: str | None
) -> None:
    """Every path that shows a database error (503s, the beat's and the workers' warnings,
    `fleet check`) describes it with db.describe: a pooler's mistake names what to set."""
    described = db.describe(error)
    first = str(getattr(error, "orig", None) or error).splitlines()[0]
    assert described == (first if hint is None else f"{first}; {hint}")
    if hint is not None:
        assert "FLEET_DATABASE_POOLER=transaction" in described
        assert db.is_outage(error)  # a 503, never a 500


def test_a_bind_message_mismatch_is_unavailable_naming_the_setting() -> None:
    for raised in (
        psycopg.errors.ProtocolViolation(BIND),
        OperationalError("SELECT 1", {}, psycopg.errors.ProtocolViolation(BIND)),
    ):
        with pytest.raises(Unavailable) as caught, db.unavailable_on_outage():
            raise raised
        assert caught.value.message == f"database unavailable: {BIND}; {db.POOLER_HINT}"


def test_a_wake_up_task_that_meets_a_pooler_mistake_logs_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's fleet.turn, fleet.drain or fleet.deliver: one warning naming
    FLEET_DATABASE_POOLER, no traceback (the sweep sends the message again)."""
    from fleet.dispatch import tasks

    for raised in (
        OperationalError("SELECT 1", {}, psycopg.errors.ProtocolViolation(BIND)),
        Unavailable(f"database unavailable: {BIND}; {db.POOLER_HINT}"),
    ):

        def broken(error: Exception = raised) -> object:
            raise error

        monkeypatch.setattr(tasks, "runtime", broken)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fleet.dispatch.tasks"):
            assert tasks.turn.run() is None
            assert tasks.drain.run("00000000-0000-0000-0000-000000000001") is None
            assert tasks.deliver.run("00000000-0000-0000-0000-000000000002") is None
        assert [r.levelname for r in caplog.records] == ["WARNING"] * 3
        assert all(r.exc_info is None for r in caplog.records)
        assert all("FLEET_DATABASE_POOLER=transaction" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(tasks, "runtime", lambda: (_ for _ in ()).throw(KeyError("bug")))
    with pytest.raises(KeyError):  # a bug still raises (and Celery logs its traceback)
        tasks.turn.run()
