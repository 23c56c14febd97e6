"""Callers: bearer API keys, stored hashed, each bound to a tenant, one scope and a set of
deployments."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.config import FleetConfig
from fleet.constants import DEFAULT_TENANT
from fleet.domain import keys
from fleet.errors import ConfigError, FleetError, Forbidden

log = logging.getLogger(__name__)


class Unauthorized(FleetError):
    """No valid credentials were sent."""

    status = 401
    title = "Unauthorized"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: a name, its tenant, the scope its keys and conversations live in, what it
    may run."""

    name: str
    scope: str
    #: Deployments it may use; None means all.
    deployments: frozenset[str] | None = None
    #: May use the operator UI and endpoints (every scope of its deployments, in ``reach``).
    operator: bool = False
    #: The tenant its conversations, quotas and budget are (``default``: the open API's).
    tenant: str = DEFAULT_TENANT
    #: Tenants the operator endpoints show it (None: all); its own alone unless it lists more.
    reach: frozenset[str] | None = frozenset({DEFAULT_TENANT})
    #: May export and erase a person's data of its own tenant (``erase = true``).
    erase: bool = False

    def reaches(self, tenant: str) -> bool:
        """May its operator calls see this tenant's conversations?"""
        return self.reach is None or tenant in self.reach

    def sees(self, tenant: str, scope: str) -> bool:
        """May it read a conversation (or its tasks, runs, events) of this tenant and scope
        through the ordinary API: its own tenant and scope, or its tenant's singletons?"""
        return tenant == self.tenant and keys.readable_by(scope, self.scope)

    def check_deployment(self, deployment: str) -> None:
        if self.deployments is not None and deployment not in self.deployments:
            raise Forbidden(
                f"caller {self.name!r} may not use deployment {deployment!r}", field="deployment"
            )

    def check_source(self, source: str) -> None:
        """Refuse a key of another source: an A2A key cannot submit as ``api`` and so on."""
        if not (self.scope == source or self.scope.startswith(f"{source}:")):
            raise Forbidden(
                f"this key belongs to scope {self.scope!r}; it cannot be used for {source!r} calls"
            )


#: The caller of an API with no keys configured (development; a warning is logged).
ANONYMOUS = Caller(name="anonymous", scope="api", deployments=None, reach=None)


def require_operator(caller: Caller) -> Caller:
    """The caller, if the operator endpoints are for it: an operator key, or anyone at an open
    API (no callers configured: its UI is open too). Else 403."""
    if caller is not ANONYMOUS and not caller.operator:
        raise Forbidden(
            f"caller {caller.name!r} is not an operator (operator = true in its caller file)"
        )
    return caller


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Maps key hashes to callers; with no callers configured, every request is ``ANONYMOUS``."""

    def __init__(self, callers: Mapping[str, Caller]) -> None:
        self._by_hash = dict(callers)

    @classmethod
    def from_config(cls, config: FleetConfig, environ: Mapping[str, str] | None = None) -> KeyRing:
        env = os.environ if environ is None else environ
        found: dict[str, Caller] = {}
        for name, c in config.callers.items():
            if c.key_sha256 is not None:
                digest = c.key_sha256
            else:
                assert c.key_env is not None
                raw = env.get(c.key_env)
                if not raw:
                    raise ConfigError(
                        str(config.root / "callers" / f"{name}.toml"),
                        "key_env",
                        f"environment variable {c.key_env} is not set",
                    )
                digest = hash_key(raw)
            deployments = None if "*" in c.deployments else frozenset(c.deployments)
            if digest in found:
                raise ConfigError(
                    str(config.root / "callers" / f"{name}.toml"),
                    "key_sha256" if c.key_sha256 else "key_env",
                    f"the same key as caller {found[digest].name!r}; give each caller its own key",
                )
            tenant = config.tenant_of_caller(name)
            reach: frozenset[str] | None = frozenset({tenant})
            if c.tenants is not None:
                reach = None if "*" in c.tenants else frozenset(c.tenants)
            found[digest] = Caller(
                name=name,
                scope=c.home,
                deployments=deployments,
                operator=c.operator,
                tenant=tenant,
                reach=reach,
                erase=c.erase,
            )
        if not found:
            log.warning("no callers configured in config/callers: the API accepts anyone as 'api'")
        return cls(found)

    @property
    def open(self) -> bool:
        return not self._by_hash

    @property
    def operators(self) -> bool:
        """Is some caller an operator (the UI is served)?"""
        return any(c.operator for c in self._by_hash.values())

    def lookup(self, key: str) -> tuple[Caller, str] | None:
        """The caller of a bare key and its key's hash, or None."""
        digest = hash_key(key.strip())
        caller = self._by_hash.get(digest)
        return None if caller is None else (caller, digest)

    def named(self, name: str) -> tuple[Caller, str] | None:
        """The caller with this name and its key's hash (a UI session names its caller)."""
        for digest, caller in self._by_hash.items():
            if caller.name == name:
                return caller, digest
        return None

    def authenticate(self, authorization: str | None) -> Caller:
        if self.open:
            return ANONYMOUS
        if not authorization:
            raise Unauthorized("send the API key as 'Authorization: Bearer <key>'")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("the Authorization header must be 'Bearer <key>'")
        caller = self._by_hash.get(hash_key(key.strip()))
        if caller is None:
            raise Unauthorized("unknown API key")
        return caller
