"""A real PgBouncer in front of one test database: written config, a child process, killed after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import URL, make_url

from tests.support.fleet import wait_for
from tests.support.tls import Issued

#: libpq's TLS parameters: on the bouncer's URL only when clients speak TLS to it.
_TLS_QUERY = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl")


def binary() -> str | None:
    """The pgbouncer executable (``FLEET_TEST_PGBOUNCER``, the PATH, or Debian's place)."""
    found = os.environ.get("FLEET_TEST_PGBOUNCER") or shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (for a test server to listen on)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Bouncer:
    """A running pgbouncer; ``url`` reaches the one database through it."""

    def __init__(self, url: str, folder: Path, popen: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.folder = folder
        self.popen = popen

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _tls_settings(target: URL, client_tls: Issued | None, folder: Path) -> str:
    """pgbouncer.ini's TLS lines: toward the server as ``target``'s libpq parameters say
    (``sslmode``, ``sslrootcert``, ``sslcert``/``sslkey``), toward clients with ``client_tls``."""
    query = {k: str(v) for k, v in target.query.items()}
    lines = []
    if query.get("sslmode"):
        lines.append(f"server_tls_sslmode = {query['sslmode']}")
    for key, setting in (
        ("sslrootcert", "server_tls_ca_file"),
        ("sslcert", "server_tls_cert_file"),
        ("sslkey", "server_tls_key_file"),
    ):
        if query.get(key):
            lines.append(f"{setting} = {query[key]}")
    if client_tls is not None:  # (copied: the bouncer's account must read its key)
        shutil.copy(client_tls.cert, folder / "client-tls.pem")
        shutil.copy(client_tls.key, folder / "client-tls.key")
        lines += [
            "client_tls_sslmode = require",
            f"client_tls_cert_file = {folder / 'client-tls.pem'}",
            f"client_tls_key_file = {folder / 'client-tls.key'}",
        ]
    return "".join(f"{line}\n" for line in lines)


def _give_away(folder: Path) -> None:
    """As root pgbouncer runs as postgres: hand it the folder's files (keys stay 0600)."""
    if os.geteuid() != 0:
        return
    import pwd

    account = pwd.getpwnam("postgres")
    for path in folder.iterdir():
        os.chown(path, account.pw_uid, account.pw_gid)
        path.chmod(0o600 if path.suffix == ".key" else 0o644)


@contextmanager
def pgbouncer(
    database_url: str,
    pool_mode: str = "transaction",
    pool_size: int = 20,
    *,
    client_tls: Issued | None = None,
    client_ca: Path | None = None,
    every_database: bool = False,
) -> Iterator[Bouncer]:
    """PgBouncer on a free port of 127.0.0.1 in ``pool_mode``, passing the database of
    ``database_url`` (or, ``every_database``, any database of its server) as the URL's user
    (trust auth) to its server over at most ``pool_size`` server connections; stopped after.

    The bouncer reaches its server with TLS as the URL's libpq parameters say (``sslmode``,
    ``sslrootcert``: its ``server_tls_*`` settings). With ``client_tls`` (a certificate and
    key) it speaks TLS to clients too, and its URL verifies it with ``client_ca``."""
    exe = binary()
    assert exe is not None, "pgbouncer is not installed"
    target = make_url(database_url)
    user = target.username or "postgres"
    port = free_port()
    # pgbouncer refuses to run as root: it runs as postgres then, which must read the folder
    folder = Path(tempfile.mkdtemp(prefix="fleet-pgbouncer-"))
    folder.chmod(0o777)
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    where = f"host={target.host or '127.0.0.1'} port={target.port or 5432}"
    route = (
        f"* = {where}"
        if every_database
        else f"{target.database} = {where} dbname={target.database}"
    )
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{route}\n"
        "[pgbouncer]\n"
        f"{_tls_settings(target, client_tls, folder)}"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {folder}\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'userlist.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\n"
        "max_client_conn = 500\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
        "log_connections = 0\n"
        "log_disconnections = 0\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    for name in ("userlist.txt", "pgbouncer.ini"):
        (folder / name).chmod(0o644)
    _give_away(folder)
    argv = [exe, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(folder / "pgbouncer.ini")]
    popen = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    query = {k: v for k, v in target.query.items() if k not in _TLS_QUERY}
    if client_tls is not None:
        assert client_ca is not None, "client_tls needs client_ca, the CA its URL verifies with"
        query |= {"sslmode": "verify-full", "sslrootcert": str(client_ca)}
    bouncer = Bouncer(
        target.set(port=port, host="127.0.0.1", query=query).render_as_string(hide_password=False),
        folder,
        popen,
    )
    try:

        def accepts() -> bool:
            if popen.poll() is not None:
                raise AssertionError(f"pgbouncer exited ({popen.returncode}):\n{bouncer.log()}")
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
            except OSError:
                return False
            return True

        wait_for(accepts, 10, what="pgbouncer to accept connections")
        yield bouncer
    finally:
        popen.terminate()
        try:
            popen.wait(5)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        shutil.rmtree(folder, ignore_errors=True)
