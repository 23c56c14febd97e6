"""Engines for PostgreSQL and SQLite, and the mapping of connection failures to ``Unavailable``."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, unquote_plus

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError

from fleet.domain.redaction import url_without_password
from fleet.errors import InputError, Unavailable

log = logging.getLogger(__name__)

#: PgBouncer's default port: a URL on it is taken for transaction pooling unless
#: ``FLEET_DATABASE_POOLER`` says otherwise.
PGBOUNCER_PORT = 6432
#: Execution option on an engine whose connections prepare nothing on the server.
NO_PREPARE = "fleet_no_prepare"
#: What a prepared-statement error tells the user to set.
POOLER_HINT = (
    "a connection pooler in transaction mode hands this connection's statements to another "
    "server connection: set FLEET_DATABASE_POOLER=transaction (see the production guide)"
)
#: What a pooler's refusal of the startup parameter ``options`` (which a read-only connection
#: of ``fleet check`` sends when no pooler is set) tells the user to set.
STARTUP_HINT = (
    "a connection pooler (PgBouncer) is between fleet and PostgreSQL: set "
    "FLEET_DATABASE_POOLER=transaction (or session, as its pool_mode is; see the production "
    "guide)"
)
#: libpq's words for a failed TLS set-up (a CA file, a certificate, a key, a mode).
_TLS_FAILURES = (
    "certificate",
    "sslmode",
    "sslrootcert",
    "private key",
    "ssl was required",
    "no encryption",
    "ssl error",
    "handshake",
)
#: What a failed TLS set-up tells the user to check.
TLS_HINT = (
    "check the TLS parameters of the database URL (FLEET_DATABASE_URL, or "
    "FLEET_MIGRATE_DATABASE_URL for `fleet migrate`): sslmode, sslrootcert (the CA file), "
    "sslcert and sslkey; see the production guide"
)
_logged_guess: set[str] = set()


def shown(url: URL) -> str:
    """``url`` for messages and logs: its password and ``sslpassword`` masked, the rest (the
    TLS parameters too) as a user wrote it."""
    base, _, query = url_without_password(url.render_as_string(hide_password=True)).partition("?")
    return unquote(base) + (f"?{unquote_plus(query)}" if query else "")  # (as SQLAlchemy quoted)


def tls_hint(problem: str) -> str:
    """``TLS_HINT`` (after "; ") when a driver's ``problem`` is a failed TLS set-up, else ""."""
    lowered = problem.lower()
    return f"; {TLS_HINT}" if any(word in lowered for word in _TLS_FAILURES) else ""


def normalize_url(url: str) -> URL:
    """``postgresql://`` means psycopg 3 here; other drivers are refused with what to write."""
    try:
        parsed = make_url(url)
    except Exception:
        raise InputError(
            f"FLEET_DATABASE_URL {url_without_password(url)!r} is not a database URL; "
            "use postgresql+psycopg://user@host/db "
            "or sqlite:///path/to/fleet.db",
            field="FLEET_DATABASE_URL",
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername not in ("postgresql+psycopg", "sqlite", "sqlite+pysqlite"):
        raise InputError(
            f"database driver {parsed.drivername!r} is not supported; "
            "use postgresql+psycopg or sqlite",
            field="FLEET_DATABASE_URL",
        )
    return parsed


def conninfo(url: URL) -> str:
    """libpq's connection string for a PostgreSQL ``url``, every part and query parameter (the
    TLS ones: ``sslmode``, ``sslrootcert``, ``sslcert``, ...) kept exactly: a URI rendered back
    from the URL turns a space in a file name into "+" and leaves one in a password bare."""
    from psycopg.conninfo import make_conninfo

    parts: dict[str, Any] = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": url.database,
    }
    for key, value in url.query.items():  # (a repeated key: libpq's comma-separated list)
        parts[key] = value if isinstance(value, str) else ",".join(value)
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def encrypted(engine: Engine) -> bool | None:
    """Does ``engine`` reach PostgreSQL over TLS (the first hop: a pooler's, if one is between)?
    None for SQLite."""
    if engine.url.get_backend_name() != "postgresql":
        return None
    with engine.connect() as conn:
        pgconn = getattr(conn.connection.driver_connection, "pgconn", None)
        return bool(pgconn is not None and pgconn.ssl_in_use)


def pooler_mode(url: URL, pooler: str | None) -> str:
    """``FLEET_DATABASE_POOLER``, or when unset what the URL suggests: ``transaction`` on
    PgBouncer's default port (logged once per URL), else ``none``."""
    if pooler is not None:
        return pooler
    if url.get_backend_name() == "postgresql" and url.port == PGBOUNCER_PORT:
        where = shown(url)
        if where not in _logged_guess:
            _logged_guess.add(where)
            log.warning(
                "FLEET_DATABASE_URL %s is on port %d (PgBouncer's default): server-side "
                "prepared statements are off as with FLEET_DATABASE_POOLER=transaction; set "
                "FLEET_DATABASE_POOLER=session or none to keep them",
                where,
                PGBOUNCER_PORT,
            )
        return "transaction"
    return "none"


def prepares(engine: Engine) -> bool:
    """Do ``engine``'s connections prepare statements on the server?"""
    return not engine.get_execution_options().get(NO_PREPARE, False)


#: The most PostgreSQL connections one process's store holds (``FLEET_DATABASE_POOL_SIZE``).
POOL_SIZE = 10
#: How long a statement waits for a free connection of a full pool before the store answers
#: "database busy" (runs in flight share a few connections, each for one statement or
#: transaction at a time).
POOL_TIMEOUT_S = 30.0


def create(
    url: str,
    *,
    readonly: bool = False,
    pool_size: int = POOL_SIZE,
    sqlite_module: Any = None,
    pooler: str | None = None,
) -> Engine:
    """An engine for ``url``; ``readonly`` never creates a file, table or row.

    ``sqlite_module``: another DB-API module for SQLite than the standard library's (one whose
    SQLite can load extensions, say). ``pooler``: ``FLEET_DATABASE_POOLER`` (see
    ``pooler_mode``); in transaction mode nothing is prepared on the server.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite(parsed, readonly=readonly, module=sqlite_module)
    mode = pooler_mode(parsed, pooler)
    connect_args: dict[str, Any] = {"connect_timeout": 5, "application_name": "fleet"}
    options: dict[str, Any] = {}
    if readonly and mode == "none":
        connect_args["options"] = "-c default_transaction_read_only=on"
    elif readonly:  # (a pooler may refuse the startup parameter: each transaction says it)
        options["postgresql_readonly"] = True
    if mode == "transaction":
        # psycopg prepares nothing, not even a statement executed with ``prepare=True``
        connect_args["prepare_threshold"] = None
        options[NO_PREPARE] = True
    return create_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_S,
        pool_pre_ping=False,
        pool_recycle=1800,
        # Errors are logged; what a statement was given (keys, inputs) stays out of the log.
        hide_parameters=True,
        connect_args=connect_args,
        execution_options=options,
    )


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (None for other databases or in-memory SQLite)."""
    parsed = normalize_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or not parsed.database
        or parsed.database == ":memory:"
    ):
        return None
    return Path(parsed.database)


def _sqlite(url: URL, *, readonly: bool, module: Any = None) -> Engine:
    path = url.database or ":memory:"
    if path != ":memory:":
        if readonly:
            url = url.set(database=f"file:{Path(path).resolve()}?mode=ro", query={"uri": "true"})
        else:
            folder = Path(path).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # e.g. FLEET_HOME names a file
                raise InputError(
                    f"cannot create the database folder {str(folder)!r}: "
                    f"{exc.strerror or exc}; check FLEET_HOME or FLEET_DATABASE_URL",
                    field="FLEET_HOME",
                ) from None
    extra: dict[str, Any] = {} if module is None else {"module": module}
    engine = create_engine(
        url,
        hide_parameters=True,
        connect_args={"timeout": 30, "check_same_thread": False},
        **extra,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN IMMEDIATE: a transaction takes the write lock
        # up front instead of failing with SQLITE_BUSY when it upgrades from a read.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not readonly:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        # Deleted content is overwritten, not left in free pages (an erasure must not linger).
        cur.execute("PRAGMA secure_delete=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # reads (``StoreBase.read``) take no write lock: in WAL mode they see the last commit
        deferred = readonly or conn.get_execution_options().get("fleet_read", False)
        conn.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

    return engine


def is_outage(exc: BaseException) -> bool:
    """Is this a backing service being down or saturated (503), rather than a bug (500)?"""
    import psycopg
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    return is_prepared_statement_error(exc) or isinstance(  # (a pooler's: the setting fixes it)
        exc,
        OperationalError
        | InterfaceError
        | PoolTimeoutError
        | psycopg.OperationalError
        | psycopg.InterfaceError
        | RedisConnectionError
        | RedisTimeoutError
        | ConnectionError,
    )


def describe(exc: BaseException) -> str:
    """First line of a driver error, without the SQL or a trace; when a connection pooler's
    mode is the cause, also what to set (``FLEET_DATABASE_POOLER``)."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    first = text[0] if text else type(orig).__name__
    if is_prepared_statement_error(exc):
        return f"{first}; {POOLER_HINT}"
    if "unsupported startup parameter" in first:
        return f"{first}; {STARTUP_HINT}"
    return first


@contextmanager
def unavailable_on_outage(what: str = "database") -> Iterator[None]:
    """Turn a lost or refused connection into ``Unavailable`` (HTTP 503, CLI exit 1)."""
    import psycopg

    try:
        yield
    except (DBAPIError, psycopg.Error) as exc:
        # (the hot path's statements run on the driver connection directly: psycopg's own)
        if is_prepared_statement_error(exc):  # describe names FLEET_DATABASE_POOLER
            raise Unavailable(f"{what} unavailable: {describe(exc)}") from None
        if isinstance(exc, OperationalError | InterfaceError) and _is_connection_error(exc):
            problem = describe(exc)
            raise Unavailable(f"{what} unavailable: {problem}{tls_hint(problem)}") from None
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            problem = describe(exc)
            raise Unavailable(f"{what} unavailable: {problem}{tls_hint(problem)}") from None
        raise
    except SQLAlchemyTimeoutError:
        raise Unavailable(f"{what} busy: no connection free in the pool; retry") from None


def is_prepared_statement_error(exc: BaseException) -> bool:
    """A server connection that lacks, already has, or has another statement of a name this
    client prepared (``bind message supplies 14 parameters, but prepared statement "_pg3_0"
    requires 3``): the mark of a transaction-mode pooler between them."""
    from psycopg.errors import (
        DuplicatePreparedStatement,
        InvalidSqlStatementName,
        ProtocolViolation,
    )

    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, ProtocolViolation):
        return "prepared statement" in str(orig)
    return isinstance(orig, DuplicatePreparedStatement | InvalidSqlStatementName)


def _is_connection_error(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    text = describe(exc).lower()
    return any(
        s in text
        for s in (
            "connection",
            "could not connect",
            "server closed",
            "unable to open database",
            "timeout",
            "terminating",
            "no such table",
            "does not exist",
            "readonly database",
        )
    )
