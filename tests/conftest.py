"""Shared fixtures: real PostgreSQL (a template database cloned per test), real Redis, configs.

Locally a missing service skips the tests that need it; with CI=true it fails them.

``FLEET_TEST_BACKEND`` picks the PostgreSQL the database fixtures reach:

- ``local`` (default): the server of ``FLEET_TEST_PG_URL`` (127.0.0.1:5432);
- ``tls``: a TLS-only server the session starts (``tests/support/postgres_tls.py``), reached
  with ``sslmode=verify-full`` and the test CA;
- ``tls-pgbouncer``: the same server behind a PgBouncer in transaction mode (TLS on both of
  its sides, ``verify-full`` toward the server), with ``FLEET_DATABASE_POOLER=transaction``.

Both TLS backends also put Redis on TLS: a TLS-only redis-server with an ACL user that the
session starts (``FLEET_TEST_REDIS_TLS=1`` does that with ``local`` too).

``make test-core`` runs the tests marked ``core`` (the dispatch invariants) under each.
"""

from __future__ import annotations

import atexit
import os
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, text

from fleet.config import FleetConfig, Settings, load_config
from fleet.domain.redaction import Redactor
from fleet.store import Store, db, migrate

if TYPE_CHECKING:
    from tests.support.anthropic_server import FakeAnthropic
    from tests.support.openai_server import FakeOpenAI
    from tests.support.postgres_tls import TlsPostgres

CI = os.environ.get("CI", "").lower() == "true"
PG_ADMIN_URL = os.environ.get(
    "FLEET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = ("local", "tls", "tls-pgbouncer")
BACKEND = os.environ.get("FLEET_TEST_BACKEND", "local")
if BACKEND not in BACKENDS:
    raise pytest.UsageError(f"FLEET_TEST_BACKEND={BACKEND!r}: use one of {', '.join(BACKENDS)}")
if BACKEND == "tls-pgbouncer":
    # every process of the session (workers and servers inherit it) talks through the bouncer
    os.environ["FLEET_DATABASE_POOLER"] = "transaction"
#: ``FLEET_DATABASE_POOLER`` for the stores tests open themselves (``Store.open(url, …,
#: pooler=POOLER)``): processes and runtimes read it from the environment.
POOLER = os.environ.get("FLEET_DATABASE_POOLER")
REDIS_BASE = os.environ.get("FLEET_TEST_REDIS_URL", "redis://127.0.0.1:6379")
#: The TLS backends (or ``FLEET_TEST_REDIS_TLS=1`` with any): ``redis_base`` is a TLS-only
#: redis-server with an ACL user that the session starts (``tests/support/redis_servers.py``);
#: ``FLEET_TEST_REDIS_URL`` is then not used.
REDIS_TLS = BACKEND != "local" or os.environ.get("FLEET_TEST_REDIS_TLS", "") == "1"


def _claim_redis_db() -> int:
    """A Redis database number no other local pytest session is using (one lock file each).

    Tests empty their database; two sessions on one database would wipe each other's queues.
    """
    import fcntl

    for number in range(1, 12):
        handle = open(f"/tmp/fleet-test-redis-{number}.lock", "w")  # noqa: SIM115
        atexit.register(handle.close)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _LOCKS.append(handle)  # held until the session's process exits
        return number
    raise RuntimeError("all Redis databases 1-11 are in use by other test sessions")


_LOCKS: list[object] = []
REDIS_URL = f"{REDIS_BASE.rstrip('/')}/{_claim_redis_db()}"


def need(service: str, problem: str | None) -> None:
    """Skip (locally) or fail (CI=true) when a real service the test needs is missing."""
    if problem is None:
        return
    message = f"{service} unavailable: {problem}"
    if CI:
        pytest.fail(message + " (CI=true: real services are required)", pytrace=False)
    pytest.skip(message)


def _pg_problem(admin_url: str) -> str | None:
    try:
        eng = create_engine(admin_url, connect_args={"connect_timeout": 3})
        with eng.connect() as conn:
            conn.execute(text("SELECT 1"))
        eng.dispose()
    except Exception as exc:
        return str(exc).splitlines()[0]
    return None


def _on(url: str, database: str) -> str:
    """``url`` with another database (its libpq parameters, TLS ones too, kept)."""
    return db.normalize_url(url).set(database=database).render_as_string(hide_password=False)


class PgServer:
    """The PostgreSQL of this session's backend: where databases are made (``admin_url``,
    always direct) and the URL a test gets for one (``url_for``: through the bouncer under
    ``tls-pgbouncer``; ``direct_url_for``: never)."""

    def __init__(self, admin_url: str, bouncer_url: str | None = None) -> None:
        self.admin_url = admin_url
        self.bouncer_url = bouncer_url

    def url_for(self, database: str) -> str:
        return _on(self.bouncer_url or self.admin_url, database)

    def direct_url_for(self, database: str) -> str:
        return _on(self.admin_url, database)

    def admin(self, sql: str) -> None:
        eng = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with eng.connect() as conn:
                conn.execute(text(sql))
        finally:
            eng.dispose()


@pytest.fixture(scope="session")
def pg_tls() -> Iterator[TlsPostgres]:
    """A TLS-only PostgreSQL of this session's own (``verify-full`` URLs: ``pg_tls.url()``)."""
    from tests.support.postgres_tls import binaries, postgres_tls

    need("PostgreSQL (TLS)", None if binaries() else "PostgreSQL's initdb is not installed")
    with postgres_tls() as server:
        yield server


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[PgServer]:
    """The session backend's PostgreSQL (see ``FLEET_TEST_BACKEND``)."""
    if BACKEND == "local":
        need("PostgreSQL", _pg_problem(PG_ADMIN_URL))
        yield PgServer(PG_ADMIN_URL)
        return
    server: TlsPostgres = request.getfixturevalue("pg_tls")
    if BACKEND == "tls":
        yield PgServer(server.admin_url)
        return
    from tests.support.pgbouncer import binary, pgbouncer

    need("PgBouncer", None if binary() else "pgbouncer is not installed (`make pgbouncer`)")
    listener = server.ca.issue("pgbouncer")
    with pgbouncer(
        server.admin_url,
        pool_size=20,
        client_tls=listener,
        client_ca=server.ca.cert,
        every_database=True,
    ) as bouncer:
        yield PgServer(server.admin_url, bouncer.url)


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer) -> Iterator[str]:
    """A database migrated to head once per session; tests clone it (procrastinate's way)."""
    name = f"fleet_tpl_{os.getpid()}"
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}"')
    pg_server.admin(f'CREATE DATABASE "{name}"')
    engine = db.create(pg_server.direct_url_for(name))  # as FLEET_MIGRATE_DATABASE_URL would
    migrate.upgrade(engine)
    engine.dispose()
    yield name
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    name = f"fleet_t_{uuid.uuid4().hex[:12]}"
    pg_server.admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield pg_server.url_for(name)
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh PostgreSQL database with no tables at all (a direct URL, whatever the backend:
    what migrations need)."""
    name = f"fleet_e_{uuid.uuid4().hex[:12]}"
    pg_server.admin(f'CREATE DATABASE "{name}"')
    yield pg_server.direct_url_for(name)
    pg_server.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pgbouncer_url(request: pytest.FixtureRequest, empty_pg_url: str) -> Iterator[tuple[str, str]]:
    """A fresh empty database and PgBouncer (transaction mode) in front of it: the direct URL
    and the bouncer's, the bouncer stopped after. Its server connections: 20, or what the
    test's ``pgbouncer_pool_size`` mark says. Toward a TLS server (``FLEET_TEST_BACKEND``) it
    verifies the server as the direct URL does."""
    from tests.support.pgbouncer import binary, pgbouncer

    need("PgBouncer", None if binary() else "pgbouncer is not installed (`make pgbouncer`)")
    mark = request.node.get_closest_marker("pgbouncer_pool_size")
    with pgbouncer(empty_pg_url, pool_size=mark.args[0] if mark else 20) as bouncer:
        yield empty_pg_url, bouncer.url


#: Test modules that exercise Alembic itself: their fresh SQLite databases are migrated step by
#: step, never copied from the template.
_MIGRATING = ("test_migrations", "test_schema_compat", "test_schema_revision")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite database migrated by Alembic to head, once per test process."""
    path = tmp_path_factory.mktemp("sqlite-template") / "fleet.db"
    engine = db.create(f"sqlite:///{path}")
    _real_upgrade(engine)
    engine.dispose()
    return path


_real_upgrade = migrate.upgrade


@pytest.fixture(autouse=True)
def _fresh_sqlite_from_template(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, sqlite_template: Path
) -> None:
    """A fresh SQLite database that a test (or the embedded runtime it builds) migrates to head
    gets the template's pages instead: the same schema, made by the same migrations once per
    test process, without running Alembic's steps again for every test (a third of a second
    each). Databases that are not empty, other targets and PostgreSQL migrate as always."""
    if request.module.__name__.rpartition(".")[2] in _MIGRATING:
        return

    def upgrade(engine: Any, revision: str = "head") -> None:
        if revision != "head" or engine.dialect.name != "sqlite" or _has_tables(engine):
            _real_upgrade(engine, revision)
            return
        import sqlite3

        source = sqlite3.connect(sqlite_template)
        try:
            with engine.connect() as conn:
                source.backup(conn.connection.driver_connection)
        finally:
            source.close()

    monkeypatch.setattr(migrate, "upgrade", upgrade)


def _has_tables(engine: Any) -> bool:
    from sqlalchemy import inspect

    with engine.connect() as conn:
        return bool(inspect(conn).get_table_names())


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = db.create(url)
    migrate.upgrade(engine)  # (from the template: _fresh_sqlite_from_template)
    engine.dispose()
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Runs a test once on SQLite and once on PostgreSQL (one store, two backends)."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, Redactor(("sk-test-secret-value-1234567890",)), pooler=POOLER)
    yield s
    s.dispose()


def redis_client(url: str) -> Any:
    """A redis-py client of the tests' Redis (over TLS with its CA when ``REDIS_TLS``)."""
    from fleet.dispatch.redis_target import RedisTarget

    ca = os.environ.get("FLEET_REDIS_TLS_CA_FILE")
    return RedisTarget(url, ca_file=ca).client(socket_connect_timeout=3)


@pytest.fixture(scope="session")
def redis_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Redis database URL of this session's backend: the local Redis, or (``REDIS_TLS``)
    a TLS-only redis-server with an ACL user started for the session, its CA in
    ``FLEET_REDIS_TLS_CA_FILE`` for every runtime, worker and server the tests start."""
    if not REDIS_TLS:
        yield REDIS_URL
        return
    from tests.support.redis_servers import tls_redis

    with tls_redis(tmp_path_factory.mktemp("redis-tls")) as server:
        os.environ["FLEET_REDIS_TLS_CA_FILE"] = str(server.ca.cert)
        try:
            yield server.url
        finally:
            del os.environ["FLEET_REDIS_TLS_CA_FILE"]


@pytest.fixture
def redis_url(redis_base: str) -> Iterator[str]:
    """A real Redis database of this session's own, emptied before the test."""
    client = redis_client(redis_base)
    try:
        client.ping()
    except Exception as exc:
        need("Redis", str(exc))
    client.flushdb()
    yield redis_base
    client.flushdb()
    client.close()


AGENTS = {
    "echo": 'model = "echo"\ninstructions = "Be brief."\n',
    "slow": '[model]\nprovider = "echo"\ndelay_ms = [0, 50]\n',
    "tools": 'model = "echo"\ntools = ["wait", "current_time"]\nmax_steps = 4\n',
    "small": 'model = "echo"\n[history]\nmax_items = 3\nmax_bytes = 200\n',
    "sleepy": '[model]\nprovider = "echo"\ndelay_ms = 2500\n',
    # its first word is out at once, the rest ~2 s later: a step seen to be under way
    "paced": '[model]\nprovider = "echo"\nstream_ms = 500\n',
}
DEPLOYMENTS = {
    "chat": 'agent = "echo"\n',
    "slowchat": 'agent = "slow"\n',
    "burst": 'agent = "echo"\n[conversations]\nqueue_mode = "collect"\ndebounce = "1s"\n',
    "solo": 'agent = "echo"\nkind = "singleton"\n',
    "tooly": 'agent = "tools"\n',
    "short": 'agent = "small"\n',
    "once": 'agent = "echo"\nmax_attempts = 1\n',
    "sleepy": 'agent = "sleepy"\n',
    "paced": 'agent = "paced"\n',
}


def write_config(
    root: Path, agents: dict[str, str] | None = None, deployments: dict[str, str] | None = None
) -> Path:
    """Write a config/ folder (agents/*.toml, deployments/*.toml) and return it."""
    for section, files in (
        ("agents", agents or AGENTS),
        ("deployments", deployments or DEPLOYMENTS),
    ):
        folder = root / section
        folder.mkdir(parents=True, exist_ok=True)
        for name, body in files.items():
            (folder / f"{name}.toml").write_text(textwrap.dedent(body))
    return root


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config")


@pytest.fixture
def fleet_config(config_dir: Path) -> FleetConfig:
    return load_config(config_dir)


@pytest.fixture
def settings(tmp_path: Path, config_dir: Path) -> Settings:
    return Settings(
        home=tmp_path / "home", config_dir=config_dir, lease_ttl=2.0, sweep_interval=1.0
    )


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI API on 127.0.0.1 (``tests.support.openai_server``), for one test."""
    from tests.support.openai_server import FakeOpenAI

    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropic]:
    """A fake Anthropic API on 127.0.0.1 (``tests.support.anthropic_server``), for one test."""
    from tests.support.anthropic_server import FakeAnthropic

    with FakeAnthropic() as srv:
        yield srv
