"""Alembic environment: fleet's tables (the Core metadata) are the target; the URL comes from
fleet's settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from fleet.store import db
from fleet.store.schema import metadata

config = context.config
target_metadata = metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from fleet.config import load_settings

    settings = load_settings()
    url = config.get_main_option("sqlalchemy.url")
    if not url:  # (plain `alembic upgrade`: the URL `fleet migrate` would use)
        url = settings.migrate_database_url or settings.resolved_database_url
    engine = db.create(url, pooler=settings.database_pooler)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("fleet migrations run online only: use `fleet migrate`")
run_migrations_online()
