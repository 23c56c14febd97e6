"""Process settings from ``FLEET_*`` environment variables (12-factor)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import (
    AfterValidator,
    Field,
    FilePath,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleet.config.base import (
    Duration,
    PositiveDuration,
    Retention,
    _at_least,
    _reason,
)
from fleet.constants import (
    AUDIT_RETENTION_S,
    DEFAULT_EMBEDDED_RUNS,
    DEFAULT_MAX_DELEGATION_DEPTH,
    DELIVERY_CLAIM_MARGIN_S,
    ERASED_HOLD_S,
    EVENT_LOOKBACK_S,
    FAIR_HOLD_S,
    MAX_EMBEDDED_RUNS,
    MIN_DATABASE_POOL_SIZE,
    MIN_UI_SECRET_BYTES,
)
from fleet.errors import ConfigError, raise_all


def host_ports(value: str | None) -> tuple[tuple[str, int], ...]:
    """``"host:port,host:port"`` → ``((host, port), …)``; ValueError names a bad item."""
    found = []
    for item in filter(None, (part.strip() for part in (value or "").split(","))):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port separated by commas, got {item!r}")
        found.append((host.strip("[]"), int(port)))
    return tuple(found)


def _host_ports(value: str | None) -> str | None:
    host_ports(value)
    return value


class Settings(BaseSettings):
    """Process settings; each field is also the environment variable ``FLEET_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="FLEET_", extra="ignore", frozen=True)

    #: Folder for the embedded SQLite database and other local state.
    home: Path = Path(".fleet")
    #: SQLAlchemy URL of the store (``postgresql+psycopg://user@host/db`` or
    #: ``sqlite:///path``); unset means the embedded SQLite file ``<home>/fleet.db``.
    database_url: str | None = None
    #: What stands between fleet and PostgreSQL: ``transaction`` (PgBouncer in transaction mode
    #: before 1.21, or any pooler that hands a client's statements to other server connections)
    #: turns off server-side prepared statements everywhere fleet connects; ``session`` and
    #: ``none`` keep them. Unset: ``transaction`` when the URL's port is 6432 (PgBouncer's
    #: default; logged once), else ``none``.
    database_pooler: Literal["none", "transaction", "session"] | None = None
    #: The most PostgreSQL connections one process holds, however many runs it has in flight:
    #: a run takes one per statement or transaction, never while it waits on a model or a tool.
    #: At least 2 (a prefork pool process's drain keeps one and opens each transaction on a
    #: second); raise it when statements wait for a free connection ("database busy").
    database_pool_size: Annotated[
        int,
        Field(le=1000),
        _at_least(
            MIN_DATABASE_POOL_SIZE,
            f"must be at least {MIN_DATABASE_POOL_SIZE}: a worker's drain keeps one connection "
            "and opens each transaction on a second; set FLEET_DATABASE_POOL_SIZE="
            f"{MIN_DATABASE_POOL_SIZE} or more (default 10)",
        ),
    ] = 10
    #: URL ``fleet migrate`` uses instead of ``database_url`` (a direct or session-mode
    #: connection to the same database); unset: ``database_url``.
    migrate_database_url: str | None = None
    #: Redis URL of the broker and leases (``redis://[[user]:password@]host:port/db``, or
    #: ``rediss://…`` for TLS); unset (and no ``redis_sentinels``) means embedded mode (one
    #: process, no Redis). With sentinels, its scheme, user, password and database still count;
    #: its host and port do not (the sentinels name the master).
    redis_url: str | None = None
    #: PEM file of the CA(s) that signed the Redis server's certificate (``rediss://``); unset:
    #: the system's trusted CAs. The certificate and its host name are always verified.
    redis_tls_ca_file: FilePath | None = None
    #: PEM client certificate fleet presents to Redis (for ``tls-auth-clients yes``); needs
    #: ``redis_tls_key_file``.
    redis_tls_cert_file: FilePath | None = None
    #: PEM private key of ``redis_tls_cert_file``.
    redis_tls_key_file: FilePath | None = None
    #: Redis Sentinel addresses, ``host:port`` separated by commas; set, fleet asks them for
    #: the master named by ``redis_sentinel_master`` (broker, leases, hints, fair queue) and
    #: follows a failover.
    redis_sentinels: Annotated[str | None, AfterValidator(_host_ports)] = None
    #: Name of the master the sentinels monitor (``sentinel monitor NAME …``); needed with
    #: ``redis_sentinels``.
    redis_sentinel_master: str | None = None
    #: Password of the sentinels themselves (``requirepass`` in their config), when they have
    #: one; the master's password comes from ``redis_url``.
    redis_sentinel_password: SecretStr | None = None
    #: Folder with ``agents/``, ``deployments/``, ``triggers/``, ``callers/``, ``tenants/`` and
    #: ``fleet.toml``.
    config_dir: Path = Path("config")
    #: Base URL of the OpenAI-compatible endpoint used by ``provider = "openai"`` models (Azure,
    #: vLLM, Ollama, LiteLLM).
    openai_base_url: str = "https://api.openai.com/v1"
    #: API key for that endpoint (redacted wherever it would be stored or logged); unset: no key
    #: is sent.
    openai_api_key: SecretStr | None = None
    #: Base URL of the Anthropic Messages API used by ``provider = "anthropic"`` models.
    anthropic_base_url: str = "https://api.anthropic.com"
    #: API key for that endpoint (redacted wherever it would be stored or logged).
    anthropic_api_key: SecretStr | None = None
    #: Lease time-to-live: a dead worker's conversation is free again after this long.
    lease_ttl: Annotated[
        Duration, _at_least(1.0, "must be at least 1s so heartbeats can renew it")
    ] = 10.0
    #: How often the sweeper recovers expired leases and re-sends lost wake-ups.
    sweep_interval: PositiveDuration = 5.0
    #: A process's entry in the fleet's registry (``fleet workers ls``) lives this long unless
    #: renewed; each process renews it every third of it.
    registry_ttl: Annotated[Duration, _at_least(1.0, "must be at least 1s so renewals keep up")] = (
        30.0
    )
    #: How long past a reply delivery attempt's timeout its claim holds: a worker that dies
    #: mid-attempt leaves it this long before the sweeper starts the next attempt elsewhere.
    delivery_claim_margin: PositiveDuration = DELIVERY_CLAIM_MARGIN_S
    #: How often the sweeper enforces retention and the stored cap (batched deletes).
    prune_interval: PositiveDuration = 60.0
    #: How often a run is tried before its task fails (crash recovery retries).
    max_attempts: int = Field(default=3, ge=1, le=100)
    #: How long one drain may keep a worker on one conversation before yielding to others.
    drain_budget: PositiveDuration = 5.0
    #: A turn picked from the fair queue and not done within this long goes back to its
    #: tenant's due work unless its conversation's lease is held (its worker died first).
    turn_hold: Annotated[
        Duration,
        _at_least(1.0, "must be at least 1s (it covers a pick up to its lease)"),
    ] = FAIR_HOLD_S
    #: On SIGTERM (or Ctrl-C) a run's current step may take this long to finish before its task
    #: is handed back anyway; ``fleet serve`` drains in-flight requests for as long.
    shutdown_grace: Annotated[Duration, _at_least(0, "must be zero or more seconds")] = 10.0
    #: Embedded ``fleet serve`` (``--runs``) and the SDK: runs this process holds in flight at
    #: once, a thread each (started as needed) draining one conversation in order; a run
    #: waiting on its model or a tool holds no database connection.
    embedded_concurrency: int = Field(default=DEFAULT_EMBEDDED_RUNS, ge=1, le=MAX_EMBEDDED_RUNS)
    #: An event that arrives before the wait for it (``wait_for_event``) is kept this long: a
    #: wait that starts within it is resolved at once. Ids are remembered a day longer.
    event_lookback: Annotated[Duration, _at_least(0, "must be zero or more seconds")] = (
        EVENT_LOOKBACK_S
    )
    #: How long the audit log keeps an entry (the sweeper removes older ones).
    audit_retention: Retention = AUDIT_RETENTION_S
    #: How long an erased resource (``fleet erase --resource``) refuses new tasks naming it.
    erased_hold: Retention = ERASED_HOLD_S
    #: How many delegations deep (``call_agent``, ``start_agent``) a chain of tasks may go;
    #: ``0`` refuses every delegation.
    max_delegation_depth: int = Field(default=DEFAULT_MAX_DELEGATION_DEPTH, ge=0, le=20)
    #: Log level of fleet's own loggers (``DEBUG`` shows tracebacks).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    #: ``text``, or ``json``: one JSON object per line with the ids and labels of the run.
    log_format: Literal["text", "json"] = "text"
    #: Workers send Celery task events, so Flower (or ``celery events``) shows their tasks.
    celery_events: bool = True
    #: ``/metrics`` on the API port answers only ``Authorization: Bearer <this>`` (or an
    #: operator key); unset (and no ``api_metrics_port``): it answers anyone, as before.
    metrics_token: SecretStr | None = None
    #: ``fleet serve --metrics-port``: the API's metrics on a port of their own, without a key
    #: (not ``FLEET_METRICS_PORT``, the worker's and beat's: one host may run all three); the
    #: API port's ``/metrics`` then needs ``metrics_token`` or an operator key.
    api_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    #: Base URL of a ``fleet serve`` the CLI should talk to instead of the store.
    server: str | None = None
    #: API key the CLI sends to ``server``.
    api_key: SecretStr | None = None
    #: Longest a task event stream stays open; the client then reconnects with its last id.
    event_stream_max: PositiveDuration = 300.0
    #: Longest a quiet task event stream goes without a keep-alive comment (each waits a random
    #: half to whole of it): below the idle timeout of any proxy in front of the API.
    event_keepalive: Annotated[
        Duration,
        _at_least(1.0, "must be at least 1s (each quiet stream writes once per interval)"),
    ] = 15.0
    #: Model steps stream their text to the task's watchers as it is written (``delta``
    #: events); off: watchers see each step's text once it is journaled.
    stream_deltas: bool = True
    #: A task's recent deltas kept for streams that join mid-step or reconnect (per task, the
    #: newest entries, each the deltas a worker sent at once; a stream that missed older ones
    #: gets the finished step's text instead).
    delta_buffer: int = Field(default=2000, ge=10, le=100_000)
    #: Seconds a task's delta buffer outlives its last delta (up to a tenth less: the TTL is
    #: set again at most once a tenth of it).
    delta_ttl: PositiveDuration = 300.0
    #: Signs the operator UI's session cookies, at least 32 bytes (``openssl rand -hex 32``);
    #: unset: a random one per process (sessions end when it restarts; set it when several API
    #: processes serve the UI).
    ui_secret: SecretStr | None = None

    @model_validator(mode="after")
    def _redis_pairs(self) -> Settings:
        if self.redis_sentinels and not self.redis_sentinel_master:
            raise ValueError("FLEET_REDIS_SENTINEL_MASTER: needed with FLEET_REDIS_SENTINELS")
        if bool(self.redis_tls_cert_file) != bool(self.redis_tls_key_file):
            raise ValueError(
                "FLEET_REDIS_TLS_CERT_FILE and FLEET_REDIS_TLS_KEY_FILE: set both or neither"
            )
        return self

    @property
    def resolved_database_url(self) -> str:
        """The store URL, defaulting to the embedded SQLite file."""
        return self.database_url or f"sqlite:///{(self.home / 'fleet.db').as_posix()}"

    @property
    def embedded(self) -> bool:
        """True when no Redis is configured: one process runs everything."""
        return not self.redis_url and not self.redis_sentinels

    def secrets(self) -> tuple[str, ...]:
        """Secret values that redaction must remove wherever they appear."""
        keys = (
            self.openai_api_key,
            self.anthropic_api_key,
            self.api_key,
            self.ui_secret,
            self.metrics_token,
            self.redis_sentinel_password,
        )
        values = [s.get_secret_value() for s in keys if s]
        if self.redis_url:
            values.append(unquote(urlsplit(self.redis_url).password or ""))
        return tuple(v for v in values if v)


def short_ui_secret(settings: Settings) -> ConfigError | None:
    """``FLEET_UI_SECRET`` when it is set but too short to sign sessions safely (the value is
    never shown): ``fleet check`` refuses it, a start warns (for one release, so upgraded
    processes still start)."""
    secret = settings.ui_secret
    if secret is None or len(secret.get_secret_value().encode()) >= MIN_UI_SECRET_BYTES:
        return None
    return ConfigError(
        "environment",
        "FLEET_UI_SECRET",
        f"holds fewer than {MIN_UI_SECRET_BYTES} bytes; give a longer secret, e.g. `openssl "
        "rand -hex 32` (a shorter one could be guessed, and operator UI sessions forged with it)",
    )


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; bad values raise ConfigError naming each variable
    (``ConfigErrors`` when several are bad)."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        found: dict[str, ConfigError] = {}  # every variable once (a union's members repeat it)
        for err in exc.errors():
            name = "FLEET_" + str(err["loc"][0]).upper() if err["loc"] else "FLEET_*"
            found.setdefault(name, ConfigError("environment", name, _reason(err)))
        raise_all(list(found.values()))
        raise  # (pydantic reports at least one error)
