"""A real PostgreSQL that speaks only TLS: its own cluster (initdb), a certificate from the test CA,
``hostssl`` the only way in over TCP, on a free port of 127.0.0.1; stopped and removed after."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tests.support.fleet import wait_for
from tests.support.pgbouncer import free_port
from tests.support.tls import TestCA

#: The role a client certificate logs in as (``cert`` authentication: the certificate's CN).
CERT_USER = "fleet_cert"


def binaries() -> Path | None:
    """PostgreSQL's server programs: ``FLEET_TEST_PG_BIN``, else Debian's newest version."""
    chosen = os.environ.get("FLEET_TEST_PG_BIN")
    if chosen:
        return Path(chosen) if (Path(chosen) / "initdb").exists() else None
    root = Path("/usr/lib/postgresql")
    versions = sorted(
        (p for p in root.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@dataclass(frozen=True)
class TlsPostgres:
    """A running TLS-only server; ``url`` builds URLs that verify it (``verify-full``)."""

    port: int
    ca: TestCA
    folder: Path
    popen: subprocess.Popen[bytes]

    def url(
        self,
        database: str = "postgres",
        *,
        host: str = "localhost",
        user: str = "postgres",
        sslmode: str = "verify-full",
        **query: str,
    ) -> str:
        """A ``postgresql+psycopg`` URL to ``database`` with libpq's TLS parameters (the test
        CA as ``sslrootcert``), plus any other libpq parameters in ``query``."""
        params = {"sslmode": sslmode, "sslrootcert": str(self.ca.cert), **query}
        return (
            f"postgresql+psycopg://{user}@{host}:{self.port}/{database}?"
            f"{urlencode(params, safe='/')}"
        )

    @property
    def admin_url(self) -> str:
        return self.url()

    def log(self) -> str:
        path = self.folder / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _as_postgres() -> dict[str, Any]:
    """Popen arguments that run a child as ``postgres`` when we are root (the server refuses
    root), else as ourselves."""
    if os.geteuid() != 0:
        return {}
    account = pwd.getpwnam("postgres")
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _give(path: Path, mode: int) -> None:
    """Hand ``path`` to the server's account with ``mode`` (a key others may read is refused)."""
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(mode)


CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{folder}'
ssl = on
ssl_cert_file = '{folder}/server.crt'
ssl_key_file = '{folder}/server.key'
ssl_ca_file = '{ca}'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
"""

#: TLS only over TCP; a client certificate is the password of ``CERT_USER``.
HBA = f"""
local     all  all                    trust
hostssl   all  {CERT_USER}  127.0.0.1/32  cert
hostssl   all  all          127.0.0.1/32  trust
hostnossl all  all          0.0.0.0/0     reject
"""


@contextmanager
def postgres_tls() -> Iterator[TlsPostgres]:
    """A fresh TLS-only PostgreSQL cluster (initdb, a few seconds), stopped and removed after."""
    bin_dir = binaries()
    assert bin_dir is not None, "PostgreSQL's server programs (initdb) are not installed"
    folder = Path(tempfile.mkdtemp(prefix="fleet-pg-tls-"))
    folder.chmod(0o755)
    ca = TestCA(folder / "ca")
    for path in (ca.folder, ca.cert):
        path.chmod(0o755 if path.is_dir() else 0o644)
    issued = ca.issue("postgres")
    home = folder / "server"
    home.mkdir()
    shutil.copy(issued.cert, home / "server.crt")
    shutil.copy(issued.key, home / "server.key")
    _give(home, 0o700)
    _give(home / "server.crt", 0o644)
    _give(home / "server.key", 0o600)
    data = home / "data"
    user = _as_postgres()
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
    initdb += ["-E", "UTF8", "--no-sync", "--no-instructions"]
    subprocess.run(initdb, check=True, capture_output=True, **user)
    port = free_port()
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(CONF.format(port=port, folder=home, ca=ca.cert))
    (data / "pg_hba.conf").write_text(HBA)
    log = (folder / "postgres.log").open("wb")
    popen = subprocess.Popen(
        [str(bin_dir / "postgres"), "-D", str(data)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **user,
    )
    server = TlsPostgres(port, ca, folder, popen)
    try:
        wait_for(lambda: _accepts(server), 30, interval=0.1, what="the TLS PostgreSQL to start")
        _create_cert_user(server)
        yield server
    finally:
        popen.send_signal(signal.SIGINT)  # fast shutdown: sessions end, no checkpoint wait
        try:
            popen.wait(15)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _create_cert_user(server: TlsPostgres) -> None:
    import psycopg

    with psycopg.connect(_libpq(server.admin_url), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {CERT_USER} LOGIN")


def _accepts(server: TlsPostgres) -> bool:
    import psycopg

    if server.popen.poll() is not None:
        raise AssertionError(f"postgres exited ({server.popen.returncode}):\n{server.log()}")
    try:
        psycopg.connect(_libpq(server.admin_url), connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True
