"""Where fleet's Redis is and how to reach it: one server or a Sentinel-watched master, TLS, auth.

Every Redis client fleet makes comes from here (the lease, the hints, the fair queue's pushes,
the event hub's subscriber, health checks, ``fleet check``) and so do Celery's broker settings,
so each of them uses the same server, password, certificates and failover.

With sentinels every client asks them for the master's address when it connects, and again
after a connection fails, so after a failover each client reaches the new master on its own.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fleet.config.settings import host_ports
from fleet.domain.redaction import url_without_password

if TYPE_CHECKING:
    from fleet.config import Settings

#: Sentinel connections: short timeouts (an unreachable sentinel is skipped for the next one).
_SENTINEL_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True, repr=False)
class RedisTarget:
    """A Redis server (``url``), or the master ``master`` that ``sentinels`` know about."""

    #: ``redis://`` or ``rediss://`` (TLS) with user, password and database; with sentinels
    #: its host and port are not used.
    url: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    sentinel_password: str | None = None

    def __repr__(self) -> str:
        """Where, never a password (a target may end up in a log or a traceback)."""
        return f"RedisTarget({self.shown})"

    @classmethod
    def of(cls, settings: Settings) -> RedisTarget | None:
        """The settings' Redis, or None in embedded mode."""
        if settings.embedded:
            return None
        password = settings.redis_sentinel_password

        def path(value: object) -> str | None:
            return str(value) if value else None

        return cls(
            url=settings.redis_url or "redis://localhost:6379/0",
            ca_file=path(settings.redis_tls_ca_file),
            cert_file=path(settings.redis_tls_cert_file),
            key_file=path(settings.redis_tls_key_file),
            sentinels=host_ports(settings.redis_sentinels),
            master=settings.redis_sentinel_master,
            sentinel_password=password.get_secret_value() if password else None,
        )

    @classmethod
    def coerce(cls, target: RedisTarget | str) -> RedisTarget:
        """A target from a plain URL (tests and benches pass one) or the target itself."""
        return cls(target) if isinstance(target, str) else target

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "rediss"

    @property
    def shown(self) -> str:
        """Where this is, for messages and logs: no password."""
        if not self.sentinels:
            return url_without_password(self.url)
        where = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        db = _parse(self.url).get("db", 0)
        tls = ", TLS" if self.tls else ""
        return f"master {self.master!r} of sentinels {where} (db {db}{tls})"

    def ssl_options(self) -> dict[str, Any]:
        """redis-py's TLS keyword arguments: verify the certificate and the host name."""
        if not self.tls:
            return {}
        options: dict[str, Any] = {
            "ssl_cert_reqs": ssl.CERT_REQUIRED,
            "ssl_check_hostname": True,
            "ssl_ca_certs": self.ca_file,
        }
        if self.cert_file:
            options |= {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        return options

    def _sentinel_options(self) -> dict[str, Any]:
        """How to talk to the sentinels themselves: their password, the same TLS as the master."""
        options: dict[str, Any] = {
            "socket_connect_timeout": _SENTINEL_TIMEOUT_S,
            "socket_timeout": _SENTINEL_TIMEOUT_S,
            "password": self.sentinel_password,
        }
        if self.tls:
            options |= {"ssl": True, **self.ssl_options()}
        return options

    def _master_options(self) -> dict[str, Any]:
        """The master's user, password and database from the URL, and TLS, for ``master_for``."""
        parsed = _parse(self.url)
        options: dict[str, Any] = {
            k: parsed[k] for k in ("username", "password", "db") if k in parsed
        }
        if self.tls:
            options |= {"ssl": True, **self.ssl_options()}
        return options

    def client(self, **options: Any) -> Any:
        """A redis-py client (``options``: timeouts, retry, ...) to the server or master."""
        import redis
        from redis.sentinel import Sentinel

        from fleet.dispatch import sentinel_clients

        if not self.sentinels:
            return redis.Redis.from_url(self.url, **self.ssl_options(), **options)
        assert self.master
        return sentinel_clients.master(
            self._sentinel(Sentinel), self.master, **self._master_options(), **options
        )

    def async_client(self, **options: Any) -> Any:
        """The same as ``client``, for asyncio (``redis.asyncio``)."""
        import redis.asyncio as aioredis
        from redis.asyncio.sentinel import Sentinel

        from fleet.dispatch import sentinel_clients

        if not self.sentinels:
            return aioredis.Redis.from_url(self.url, **self.ssl_options(), **options)
        assert self.master
        return sentinel_clients.master(
            self._sentinel(Sentinel), self.master, **self._master_options(), **options
        )

    def _sentinel(self, cls: Any) -> Any:
        """A ``redis.sentinel.Sentinel`` (or asyncio's: ``cls``) over the sentinels."""
        return cls(list(self.sentinels), sentinel_kwargs=self._sentinel_options())

    def celery(self) -> dict[str, Any]:
        """Celery's ``broker_url``, ``broker_transport``, ``broker_use_ssl`` and the transport
        options to merge (the transports: kombu's, see ``fleet.dispatch.broker_transport``)."""
        conf: dict[str, Any] = {"broker_use_ssl": self.ssl_options() or None}
        if not self.sentinels:
            return conf | {
                "broker_url": self.url,
                "broker_transport": None,
                "broker_transport_options": {},
            }
        # kombu's sentinel transport: the first URL's user, password and database are the
        # master's; each further URL only names a sentinel.
        parts = urlsplit(self.url)
        auth = parts.netloc.rpartition("@")[0]
        db = _parse(self.url).get("db", 0)
        urls = [f"sentinel://{auth + '@' if auth else ''}{h}:{p}/{db}" for h, p in self.sentinels]
        return conf | {
            "broker_url": ";".join(urls),
            "broker_transport": "fleet.dispatch.broker_transport:SentinelTransport",
            "broker_transport_options": {
                "master_name": self.master,
                "sentinel_kwargs": self._sentinel_options(),
            },
        }


def _parse(url: str) -> dict[str, Any]:
    from redis.connection import parse_url

    return dict(parse_url(url))  # type: ignore[no-untyped-call]


def describe(exc: BaseException) -> str:
    """A Redis connection failure in words that point at the setting to fix."""
    from redis.exceptions import AuthenticationError, ResponseError

    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS", "NOPERM"))
    ):
        return f"{text} (check the user and password in FLEET_REDIS_URL)"
    if "CERTIFICATE_VERIFY_FAILED" in str(exc) or isinstance(exc, ssl.SSLError):
        return (
            f"{text} (TLS: is FLEET_REDIS_TLS_CA_FILE the CA that signed the server's "
            "certificate, and does the certificate name the host in FLEET_REDIS_URL?)"
        )
    if "Connection reset by peer" in str(exc) or "Connection closed by server" in str(exc):
        return f"{text} (a TLS-only server answers plain redis:// like this: use rediss://)"
    return text
