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

from sqlalchemy import make_url

from tests.support.fleet import wait_for


def binary() -> str | None:
    """The pgbouncer executable (``FLEET_TEST_PGBOUNCER``, the PATH, or Debian's place)."""
    found = os.environ.get("FLEET_TEST_PGBOUNCER") or shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


def _free_port() -> int:
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


@contextmanager
def pgbouncer(
    database_url: str, pool_mode: str = "transaction", pool_size: int = 20
) -> Iterator[Bouncer]:
    """PgBouncer on a free port of 127.0.0.1 in ``pool_mode``, passing the database of
    ``database_url`` (trust auth, the URL's user) to its server over at most ``pool_size``
    server connections; stopped after."""
    exe = binary()
    assert exe is not None, "pgbouncer is not installed"
    target = make_url(database_url)
    user = target.username or "postgres"
    port = _free_port()
    # pgbouncer refuses to run as root: it runs as postgres then, which must read the folder
    folder = Path(tempfile.mkdtemp(prefix="fleet-pgbouncer-"))
    folder.chmod(0o777)
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{target.database} = host={target.host or '127.0.0.1'} port={target.port or 5432} "
        f"dbname={target.database}\n"
        "[pgbouncer]\n"
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
    argv = [exe, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(folder / "pgbouncer.ini")]
    popen = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    bouncer = Bouncer(
        target.set(port=port, host="127.0.0.1").render_as_string(hide_password=False),
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
