"""Real ``redis-server`` processes for tests: a TLS-only server with a password, and a Sentinel
group (a master, a replica, three sentinels), each on free ports of 127.0.0.1, killed after."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.support.fleet import wait_for
from tests.support.pgbouncer import free_port
from tests.support.tls import TestCA

#: The master name the sentinels of ``sentinel_group`` watch.
MASTER = "fleetmaster"
#: How long a sentinel waits before it calls the master down (small: tests wait for it).
DOWN_AFTER_MS = 1000


def binary() -> str | None:
    """The redis-server executable, if installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )


class RedisServer:
    """One ``redis-server`` child process (a data server or a sentinel) on ``port``."""

    def __init__(self, name: str, port: int, folder: Path, args: list[str]) -> None:
        exe = binary()
        assert exe is not None, "redis-server is not installed"
        self.name = name
        self.port = port
        self.log_path = folder / f"{name}.log"
        argv = [exe, *args, "--logfile", str(self.log_path), "--dir", str(folder)]
        self.popen = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_listening()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _wait_listening(self) -> None:
        import socket

        def accepts() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}):\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            except OSError:
                return False
            return True

        wait_for(accepts, 10, what=f"{self.name} to listen on {self.port}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no save, as a crashed node."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(5)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


_DATA = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]


@dataclass(frozen=True)
class TlsRedis:
    """A TLS-only server: ``url`` reaches it as the user ``fleet`` with ``password``."""

    server: RedisServer
    ca: TestCA
    password: str

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"rediss://fleet:{self.password}@127.0.0.1:{self.port}/0"

    def settings(self) -> dict[str, Any]:
        """The fleet settings beside ``url`` (keyword arguments) that reach it."""
        return {"redis_tls_ca_file": self.ca.cert}


@contextmanager
def tls_redis(folder: Path, password: str = "s3cret-redis-pass") -> Iterator[TlsRedis]:
    """``redis-server`` with no plain port, TLS on a free one (a certificate from a test CA
    for 127.0.0.1 and localhost), the default user off and an ACL user ``fleet``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = TestCA(folder / "ca")
    issued = ca.issue("redis")
    port = free_port()
    args = [
        *_DATA,
        "--port",
        "0",
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(issued.cert),
        "--tls-key-file",
        str(issued.key),
        "--tls-ca-cert-file",
        str(ca.cert),
        "--tls-auth-clients",
        "optional",
        *("--user", "default", "off"),
        *("--user", "fleet", "on", f">{password}", "~*", "&*", "+@all"),
    ]
    server = RedisServer("redis-tls", port, folder, args)
    try:
        yield TlsRedis(server, ca, password)
    finally:
        server.stop()


@dataclass
class SentinelGroup:
    """A master, its replica and three sentinels watching ``MASTER`` (password ``password``);
    with ``ca``, every one of them speaks TLS only (certificates from that test CA)."""

    master: RedisServer
    replica: RedisServer
    sentinels: list[RedisServer]
    password: str
    ca: TestCA | None = None

    def client(self, port: int, **options: Any) -> Any:
        """A plain redis-py client of one of the group's servers (TLS when the group has it)."""
        tls = {"ssl": True, "ssl_ca_certs": str(self.ca.cert)} if self.ca else {}
        return redis.Redis(port=port, socket_timeout=2, **tls, **options)

    @property
    def addresses(self) -> str:
        """``FLEET_REDIS_SENTINELS``."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    @property
    def url(self) -> str:
        """``FLEET_REDIS_URL``: the master's password and database (the sentinels say where)."""
        return f"{'rediss' if self.ca else 'redis'}://:{self.password}@localhost/0"

    def settings(self) -> dict[str, Any]:
        """The fleet settings beside ``url`` that reach the master through the sentinels."""
        found = {"redis_sentinels": self.addresses, "redis_sentinel_master": MASTER}
        return found | ({"redis_tls_ca_file": self.ca.cert} if self.ca else {})

    def sentinel(self, i: int = 0) -> Any:
        return self.client(self.sentinels[i].port, decode_responses=True)

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers sees it."""
        for i in range(len(self.sentinels)):
            try:
                _, port = self.sentinel(i).sentinel_get_master_addr_by_name(MASTER)
                return int(port)
            except (redis.RedisError, TypeError):
                continue
        return None

    def ready(self) -> bool:
        """Every sentinel knows the replica and the two other sentinels, and the replica is in
        sync: a failover can happen."""
        try:
            info = self.client(self.replica.port, password=self.password).info("replication")
            if info.get("master_link_status") != "up":
                return False
            for i in range(len(self.sentinels)):
                s = self.sentinel(i)
                if len(s.sentinel_slaves(MASTER)) < 1 or len(s.sentinel_sentinels(MASTER)) < 2:
                    return False
        except redis.RedisError:
            return False
        return True

    def fail_over(self) -> None:
        """SIGKILL the master."""
        self.master.kill()


def _listen(port: int, tls: list[str]) -> list[str]:
    """Listen on ``port``: plain, or (``tls``: the TLS options) TLS only."""
    return ["--port", "0", "--tls-port", str(port), *tls] if tls else ["--port", str(port)]


@contextmanager
def sentinel_group(
    folder: Path, password: str = "group-pass-1234", *, tls: bool = False
) -> Iterator[SentinelGroup]:
    """The group on free ports (TLS only with ``tls``); returns once a failover could happen."""
    folder.mkdir(parents=True, exist_ok=True)
    auth = ["--requirepass", password, "--masterauth", password]
    ca = TestCA(folder / "ca") if tls else None
    tls_args: list[str] = []
    if ca is not None:
        issued = ca.issue("redis")
        tls_args = [
            *("--tls-cert-file", str(issued.cert), "--tls-key-file", str(issued.key)),
            *("--tls-ca-cert-file", str(ca.cert), "--tls-auth-clients", "no"),
            *("--tls-replication", "yes"),
        ]
    with ExitStack() as stack:
        m_port, r_port = free_port(), free_port()
        master = RedisServer("master", m_port, folder, [*_DATA, *_listen(m_port, tls_args), *auth])
        stack.callback(master.stop)
        replica = RedisServer(
            "replica",
            r_port,
            folder,
            [
                *_DATA,
                *_listen(r_port, tls_args),
                *auth,
                *("--replicaof", "127.0.0.1", str(m_port)),
            ],
        )
        stack.callback(replica.stop)
        sentinels = []
        for i in range(3):
            port = free_port()
            conf = folder / f"sentinel-{i}.conf"
            conf.write_text(
                "bind 127.0.0.1\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {m_port} 2\n"
                f"sentinel auth-pass {MASTER} {password}\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            args = [str(conf), "--sentinel", *_listen(port, tls_args)]
            sentinel = RedisServer(f"sentinel-{i}", port, folder, args)
            stack.callback(sentinel.stop)
            sentinels.append(sentinel)
        group = SentinelGroup(master, replica, sentinels, password, ca)
        wait_for(group.ready, 20, interval=0.1, what="the sentinels to see the replica")
        yield group
