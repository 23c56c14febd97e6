"""fleet against a real TLS-only PostgreSQL with ``sslmode=verify-full``: the engine, the async
intake and the event hub's connections, `fleet migrate` and `fleet check`, a client certificate;
a bad TLS set-up is one clear line naming the setting, never a trace."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from fleet.api.event_hub import LoopMarks
from fleet.domain.redaction import Redactor
from fleet.store import Store, db
from fleet.store.aio import AsyncStatements
from tests.conftest import BACKEND, POOLER
from tests.support.pgbouncer import binary, pgbouncer
from tests.support.postgres_tls import CERT_USER, TlsPostgres
from tests.support.tls import TestCA

pytestmark = [pytest.mark.pg, pytest.mark.timeout(120)]

#: Is this connection encrypted, as the server sees it (and which role logged in)?
SSL_IN_USE = "SELECT s.ssl, current_user AS role FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()"


@pytest.fixture
def tls_db(pg_tls: TlsPostgres) -> Iterator[str]:
    """A fresh empty database on the TLS server (its name)."""
    name = f"fleet_tls_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq(pg_tls.admin_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(libpq(pg_tls.admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``fleet ARGS`` in a child process with ``FLEET_*`` settings from ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args],
        env={**os.environ, "FLEET_HOME": str(tmp / "home"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"sslmode": "disable"}, "no encryption"),  # plain TCP: pg_hba.conf rejects it
        ({"host": "wrong.example", "hostaddr": "127.0.0.1"}, "does not match host name"),
        ({"sslrootcert": "OTHER_CA"}, "certificate verify failed"),
    ],
    ids=["plain", "wrong-hostname", "wrong-ca"],
)
def test_the_server_takes_only_verified_tls(
    tmp_path: Path, pg_tls: TlsPostgres, change: dict[str, str], refusal: str
) -> None:
    with psycopg.connect(libpq(pg_tls.url())) as conn:  # verify-full with the right CA: in
        assert conn.pgconn.ssl_in_use
        assert conn.execute(SSL_IN_USE).fetchone() == (True, "postgres")
    if change.get("sslrootcert") == "OTHER_CA":
        change = {"sslrootcert": str(TestCA(tmp_path / "other", "another CA").cert)}
    with pytest.raises(psycopg.OperationalError, match=refusal):
        psycopg.connect(libpq(pg_tls.url(**change)), connect_timeout=5).close()


def test_every_connection_fleet_opens_verifies_the_server(
    tmp_path: Path, pg_tls: TlsPostgres, tls_db: str, config_dir: Path
) -> None:
    """`fleet migrate` (on FLEET_MIGRATE_DATABASE_URL), `fleet check`, the store's engine, the
    async intake's and the event hub's connections: all over verify-full, with a CA file whose
    path has a space and a "+" (a URI rendered back from the URL turns them into each other),
    and a password and an ``sslpassword`` that no output shows."""
    folder = tmp_path / "my certs+1"
    folder.mkdir()
    ca = shutil.copy(pg_tls.ca.cert, folder / "ca.pem")
    secret = pg_tls.url(tls_db, sslrootcert=str(ca), sslpassword="s3cret-key-pass").replace(
        "postgres@", "postgres:hunter2-db-pass@"
    )
    settings = {"FLEET_CONFIG_DIR": str(config_dir), "FLEET_DATABASE_POOLER": "none"}
    migrated = cli(
        tmp_path,
        "migrate",
        FLEET_DATABASE_URL="postgresql://nobody@127.0.0.1:1/unused",  # migrate does not use it
        FLEET_MIGRATE_DATABASE_URL=secret,
        **settings,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "migrated from empty" in migrated.stdout
    checked = cli(tmp_path, "check", "--connect", "--json", FLEET_DATABASE_URL=secret, **settings)
    results = {r["name"]: r for r in json.loads(checked.stdout)}
    assert results["database"]["state"] == "ok", checked.stdout + checked.stderr
    assert f"sslrootcert={ca}" in results["database"]["detail"]  # as the user wrote it
    assert "reachable over TLS" in results["database"]["detail"]
    for shown in (checked.stdout, checked.stderr, migrated.stdout, migrated.stderr):
        assert "hunter2" not in shown and "s3cret" not in shown

    store = Store.open(secret, Redactor(()), pooler="none")
    try:
        with store.engine.connect() as conn:
            assert tuple(conn.exec_driver_sql(SSL_IN_USE).one()) == (True, "postgres")

        async def on_the_loop() -> tuple[object, object]:
            statements = AsyncStatements.for_engine(store.engine, size=1)
            marks = LoopMarks(store)
            try:
                row = await statements.first(SSL_IN_USE, {})
                return row, await marks([uuid.uuid4()])
            finally:
                await statements.close()
                await marks.close()

        row, marks = asyncio.run(on_the_loop())
        assert row == {"ssl": True, "role": "postgres"}
        assert marks == {}
    finally:
        store.dispose()


def test_a_client_certificate_logs_in_through_the_url(tmp_path: Path, pg_tls: TlsPostgres) -> None:
    """``sslcert``/``sslkey`` reach libpq from the engine and the async connections alike; the
    server's ``cert`` rule refuses the role without one."""
    issued = pg_tls.ca.issue(CERT_USER, client=True)
    url = pg_tls.url(user=CERT_USER, sslcert=str(issued.cert), sslkey=str(issued.key))
    store = Store.open(url, Redactor(()), pooler="none")
    try:
        with store.engine.connect() as conn:
            assert tuple(conn.exec_driver_sql(SSL_IN_USE).one()) == (True, CERT_USER)

        async def first() -> object:
            statements = AsyncStatements.for_engine(store.engine, size=1)
            try:
                return await statements.first(SSL_IN_USE, {})
            finally:
                await statements.close()

        assert asyncio.run(first()) == {"ssl": True, "role": CERT_USER}
    finally:
        store.dispose()
    with pytest.raises(psycopg.OperationalError, match="certificate"):
        psycopg.connect(libpq(pg_tls.url(user=CERT_USER)), connect_timeout=5).close()


@pytest.fixture(scope="module")
def plain_server(pg_tls: TlsPostgres) -> Iterator[str]:
    """A PostgreSQL endpoint without TLS (a PgBouncer that speaks plain TCP to its clients)."""
    if binary() is None:
        pytest.skip("pgbouncer is not installed (`make pgbouncer`)")
    with pgbouncer(pg_tls.admin_url, every_database=True) as bouncer:
        yield bouncer.url


@pytest.mark.parametrize(
    "problem",
    ["missing-ca", "wrong-hostname", "server-without-tls", "default-ca-missing"],
)
def test_a_bad_tls_setup_is_one_clear_line(
    tmp_path: Path, pg_tls: TlsPostgres, plain_server: str, config_dir: Path, problem: str
) -> None:
    url, reason = {
        "missing-ca": (pg_tls.url(sslrootcert=str(tmp_path / "nope.pem")), "does not exist"),
        "wrong-hostname": (
            pg_tls.url(host="wrong.example", hostaddr="127.0.0.1"),
            'does not match host name "wrong.example"',
        ),
        "server-without-tls": (
            plain_server + f"?sslmode=verify-full&sslrootcert={pg_tls.ca.cert}",
            "server does not support SSL",
        ),
        "default-ca-missing": (pg_tls.url().split("&sslrootcert=")[0], "root certificate"),
    }[problem]
    env = {
        "FLEET_CONFIG_DIR": str(config_dir),
        "FLEET_DATABASE_URL": url,
        "HOME": str(tmp_path),  # libpq's default CA: ~/.postgresql/root.crt (absent)
    }
    for args in (("migrate",), ("check",)):
        done = cli(tmp_path, *args, **env)
        said = done.stdout + done.stderr
        assert done.returncode == 1, said
        assert reason in said, said
        assert "FLEET_DATABASE_URL" in said and "sslrootcert" in said, said
        assert "Traceback" not in said, said


@pytest.mark.core
def test_the_session_backend_is_what_it_says(pg_url: str) -> None:
    """Under ``FLEET_TEST_BACKEND`` the tests' databases really are behind TLS (and PgBouncer)."""
    store = Store.open(pg_url, Redactor(()), pooler=POOLER)
    try:
        with store.engine.connect() as conn:
            client_tls = conn.connection.driver_connection.pgconn.ssl_in_use  # type: ignore[union-attr]
            server_tls, server_port = conn.exec_driver_sql(
                "SELECT s.ssl, inet_server_port() FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()"
            ).one()
        url_port = store.engine.url.port
    finally:
        store.dispose()
    if BACKEND == "local":
        assert server_port == url_port
        return
    assert client_tls and server_tls
    assert store.engine.url.query.get("sslmode") == "verify-full"
    if BACKEND == "tls":
        assert server_port == url_port
    else:  # the bouncer's port is not the server's
        assert server_port != url_port
        assert os.environ.get("FLEET_DATABASE_POOLER") == "transaction"
        assert not db.prepares(store.engine)
