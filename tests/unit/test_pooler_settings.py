"""FLEET_DATABASE_POOLER: which mode a URL and the setting give, and what an engine prepares."""

from __future__ import annotations

import logging

import psycopg.errors
import pytest
from sqlalchemy.exc import ProgrammingError

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
