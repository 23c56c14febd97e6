"""Loading ``config/``: each file validated and cross-checked, app-wide limits from fleet.toml."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from fleet.config.agents import AgentConfig, LimitDefaults
from fleet.config.base import (
    _NAME,
    _TOOL_REF,
    _TYPE_TAG,
    _matching,
    _reason,
    _Strict,
)
from fleet.config.intake import CallerConfig, DeploymentConfig, TriggerConfig
from fleet.config.reply import ReplyConfig
from fleet.config.schedules import ScheduleConfig
from fleet.config.tenants import TenantConfig, check_tenants, default_tenant
from fleet.config.traffic import ModelLimitConfig, PriceConfig, check_prices
from fleet.constants import DEFAULT_TENANT
from fleet.errors import ConfigError, NotFound, raise_all


class EmbeddingsConfig(_Strict):
    """``[embeddings]``: what turns messages into vectors for recall."""

    #: ``local``: offline static word embeddings shipped in a package (wordllama);
    #: ``openai``: any OpenAI-compatible embeddings endpoint.
    provider: Literal["local", "openai"] = "local"
    #: openai only: the embedding model (``text-embedding-3-small``).
    model: str | None = None
    #: openai only: overrides FLEET_OPENAI_BASE_URL.
    base_url: str | None = None
    #: openai only: the vectors' length, for models that can shorten them.
    dimensions: StrictInt | None = Field(default=None, ge=1, le=8192)
    #: ``auto``: search in the database where it can (pgvector, sqlite-vec), else exactly in
    #: the worker; ``exact``: always in the worker (same results, probes nothing).
    search: Literal["auto", "exact"] = "auto"

    @model_validator(mode="after")
    def _named(self) -> EmbeddingsConfig:
        if self.provider == "openai" and not self.model:
            raise ValueError("provider 'openai' needs model = '...', e.g. 'text-embedding-3-small'")
        return self


class AppConfig(_Strict):
    """``config/fleet.toml``: what holds for every agent and deployment."""

    name: str = "fleet"
    #: ``[limits]``: what every agent gets unless its file sets its own.
    limits: LimitDefaults = LimitDefaults()
    #: ``[embeddings]``: how messages become vectors for recall.
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    #: ``[[model_limits]]``: fleet-wide rate limits on the calls to matching models, with a
    #: shared cooldown after a 429.
    model_limits: tuple[ModelLimitConfig, ...] = ()
    #: ``[prices."provider:model"]``: what a model's tokens cost, per million; runs, tenants'
    #: days and the CLI show the cost of the models priced here.
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    #: ``module:function`` deciding who may dispatch into, recall from, or write notes and
    #: memory in a conversation (see fleet.policy); unset: the scope rules alone.
    authorize: (
        Annotated[
            str, _matching(_TOOL_REF, "must name a Python function as 'package.module:function'")
        ]
        | None
    ) = None

    @field_validator("prices")
    @classmethod
    def _priced(cls, v: dict[str, PriceConfig]) -> dict[str, PriceConfig]:
        return check_prices(v)


class FleetConfig(BaseModel):
    """Everything in ``config/``, cross-checked."""

    model_config = ConfigDict(frozen=True)

    root: Path
    agents: dict[str, AgentConfig]
    deployments: dict[str, DeploymentConfig]
    triggers: dict[str, TriggerConfig] = Field(default_factory=dict)
    callers: dict[str, CallerConfig] = Field(default_factory=dict)
    #: ``config/tenants/<name>.toml``: weights, quotas, budgets (a tenant may have none).
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    #: ``config/schedules/<name>.toml``: crons and intervals that submit tasks.
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    app: AppConfig = AppConfig()

    # -- tenants (fleet.config.tenants) --------------------------------------------------------

    def tenant_of_caller(self, name: str) -> str:
        """The tenant of a configured caller (a webhook caller's is its trigger's)."""
        caller = self.callers[name]
        if caller.source.startswith("webhook:"):
            return self.tenant_of_trigger(caller.source.removeprefix("webhook:"))
        return caller.own_tenant

    def tenant_of_trigger(self, name: str) -> str:
        """A trigger's tenant: the one it names, else its own name (``default`` while no
        callers are configured: the open fleet has one tenant)."""
        trigger = self.triggers[name]
        if trigger.tenant is not None:
            return trigger.tenant
        return name if self.callers else DEFAULT_TENANT

    def tenant_of_scope(self, scope: str) -> str | None:
        """The tenant a scope belongs to when the scope alone tells (API, webhook and A2A
        scopes of configured triggers and callers); None for delegated and singleton scopes,
        which every tenant has."""
        head, _, name = scope.partition(":")
        if head == "api":
            return name or DEFAULT_TENANT
        if head == "webhook" and name in self.triggers:
            return self.tenant_of_trigger(name)
        if head == "a2a":
            if name in self.callers:
                return self.tenant_of_caller(name)
            return DEFAULT_TENANT if not self.callers else None
        return None

    def tenant(self, name: str) -> TenantConfig:
        """A tenant's settings: its file, or weight 1 and no quotas."""
        return default_tenant(self.tenants, name)

    @property
    def tenant_names(self) -> tuple[str, ...]:
        """Every configured tenant (its callers', triggers' and files' names, and
        ``default``), sorted: what metrics may label and ``fleet tenants`` lists."""
        names = {DEFAULT_TENANT, *self.tenants}
        names.update(self.tenant_of_caller(c) for c in self.callers)
        names.update(self.tenant_of_trigger(t) for t in self.triggers)
        return tuple(sorted(names))

    def deployment(self, name: str) -> DeploymentConfig:
        """The deployment called ``name``; NotFound lists the known ones."""
        try:
            return self.deployments[name]
        except KeyError:
            known = ", ".join(sorted(self.deployments)) or "none"
            raise NotFound(
                f"no deployment named {name!r} in {self.root}/deployments (known: {known})",
                field="deployment",
            ) from None

    def agent_for(self, deployment: str) -> AgentConfig:
        return self.agents[self.deployment(deployment).agent]


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "(syntax)", f"not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), "(file)", "is not UTF-8 text; save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(str(path), "(file)", f"cannot be read: {exc.strerror}") from None


def _validate(model: type[_Strict], path: Path, data: dict[str, Any]) -> Any:
    """The file's model; ``ConfigErrors`` names every bad key of it (each key once)."""
    found: list[ConfigError] = []
    if "name" in data:
        found.append(ConfigError(str(path), "name", "the name is the file name; remove this key"))
    try:
        valid = model.model_validate({**data, "name": path.stem})
    except ValidationError as exc:
        keys: set[str] = set()
        for err in exc.errors():
            # (a union's member, such as ``int``, is not a key: leave it out of the path)
            key = ".".join(str(p) for p in err["loc"] if not _TYPE_TAG.fullmatch(str(p)))
            key = key or "(top level)"
            if key not in keys:  # (a union's members each report the same key)
                keys.add(key)
                found.append(ConfigError(str(path), key, _reason(err)))
    raise_all(found)
    return valid


def _with_defaults(defaults: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """An agent file's values over the app-wide ones (tables merged key by key)."""
    merged = dict(defaults)
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _reply_env(path: Path, reply: ReplyConfig | None) -> list[ConfigError]:
    """Each header a ``[reply]`` sends that reads an environment variable that is not set."""
    if reply is None:
        return []
    return [
        ConfigError(
            str(path),
            f"reply.headers.{header}",
            f"environment variable {env} is not set (it holds the header's value)",
        )
        for header, env in reply.env_names().items()
        if not os.environ.get(env)
    ]


def _unknown(path: Path, key: str, missing: str, known: Iterable[str]) -> ConfigError:
    """``key`` of ``path`` names what is not configured: ``missing`` says so, then lists what is."""
    return ConfigError(str(path), key, f"{missing} (known: {', '.join(sorted(known)) or 'none'})")


def load_config(root: Path) -> FleetConfig:
    """Load and cross-check every file of ``root``; ``ConfigErrors`` names every error of every
    file (a cross-check that names a file which failed itself is left out: that file's own
    errors say what to fix)."""
    if not root.is_dir():
        raise ConfigError(str(root), "(folder)", "config folder not found; set FLEET_CONFIG_DIR")
    errors: list[ConfigError] = []
    sections: dict[str, dict[str, Any]] = {}
    #: Per section, the names of files that did not load (cross-checks take them as existing).
    broken: dict[str, set[str]] = {}
    kinds: tuple[tuple[str, type[_Strict]], ...] = (
        ("agents", AgentConfig),
        ("deployments", DeploymentConfig),
        ("triggers", TriggerConfig),
        ("callers", CallerConfig),
        ("tenants", TenantConfig),
        ("schedules", ScheduleConfig),
    )
    app_file = root / "fleet.toml"
    app_data: dict[str, Any] = {}
    app = AppConfig()
    try:
        app_data = _load_toml(app_file) if app_file.is_file() else {}
        app = _validate(AppConfig, app_file, app_data)
    except ConfigError as exc:
        errors += exc.every
    # limits set app-wide are what an agent file that names none gets
    raw_defaults = app_data.get("limits", {}) if isinstance(app_data.get("limits"), dict) else {}
    for section, model in kinds:
        found: dict[str, Any] = {}
        broken[section] = set()
        for path in sorted((root / section).glob("*.toml")):
            if not _NAME.match(path.stem):
                errors.append(
                    ConfigError(
                        str(path), "(file name)", "names are lowercase letters, digits, '-' and '_'"
                    )
                )
                continue
            try:
                data = _load_toml(path)
                if section == "agents" and raw_defaults:
                    data = _with_defaults(raw_defaults, data)
                found[path.stem] = _validate(model, path, data)
            except ConfigError as exc:
                errors += exc.every
                broken[section].add(path.stem)
        sections[section] = found
    errors += _cross_check(root, sections, broken)
    raise_all(errors)
    return FleetConfig(
        app=app,
        root=root,
        agents=sections["agents"],
        deployments=sections["deployments"],
        triggers=sections["triggers"],
        callers=sections["callers"],
        tenants=sections["tenants"],
        schedules=sections["schedules"],
    )


def _cross_check(
    root: Path, sections: dict[str, dict[str, Any]], broken: dict[str, set[str]]
) -> list[ConfigError]:
    """What the files say about each other: every name they use is configured (or failed to
    load, and is reported as such), reply headers' variables are set, tenants and schedules
    fit."""
    from fleet.domain.labels import validate_labels

    errors: list[ConfigError] = []
    agents, deployments = sections["agents"], sections["deployments"]

    def missing(section: str, name: str) -> bool:
        return name not in sections[section] and name not in broken[section]

    for name, dep in deployments.items():
        path = root / "deployments" / f"{name}.toml"
        if missing("agents", dep.agent):
            errors.append(
                _unknown(path, "agent", f"no agent named {dep.agent!r} in {root}/agents", agents)
            )
        try:
            validate_labels(dep.labels)
        except Exception as exc:
            errors.append(ConfigError(str(path), "labels", str(exc)))
    for name, agent in agents.items():
        for i, target in enumerate(agent.delegates):
            if missing("deployments", target):
                path = root / "agents" / f"{name}.toml"
                found = f"no deployment named {target!r}"
                errors.append(_unknown(path, f"delegates[{i}]", found, deployments))
    for name, trig in sections["triggers"].items():
        if trig.deployment is not None and missing("deployments", trig.deployment):
            path = root / "triggers" / f"{name}.toml"
            found = f"no deployment named {trig.deployment!r}"
            errors.append(_unknown(path, "deployment", found, deployments))
    for section in ("deployments", "triggers"):
        for name, holder in sections[section].items():
            errors += _reply_env(root / section / f"{name}.toml", getattr(holder, "reply", None))
    for name, caller in sections["callers"].items():
        where = str(root / "callers" / f"{name}.toml")
        for dep_name in caller.deployments:
            if dep_name != "*" and missing("deployments", dep_name):
                errors.append(
                    ConfigError(where, "deployments", f"no deployment named {dep_name!r}")
                )
        if caller.source.startswith("webhook:") and missing("triggers", caller.source[8:]):
            errors.append(ConfigError(where, "source", f"no trigger named {caller.source[8:]!r}"))
    errors += check_tenants(root, sections["callers"], sections["triggers"])
    for name, sched in sections["schedules"].items():
        path = root / "schedules" / f"{name}.toml"
        if sched.deployment in broken["deployments"] or (sched.caller in broken["callers"]):
            continue  # (what it names did not load: that file's errors say so)
        try:
            _check_schedule(path, sched, agents, deployments, sections)
        except ConfigError as exc:
            errors.append(exc)
    return errors


def _check_schedule(
    path: Path,
    sched: ScheduleConfig,
    agents: dict[str, AgentConfig],
    deployments: dict[str, DeploymentConfig],
    sections: dict[str, dict[str, Any]],
) -> None:
    """A schedule's deployment and caller exist, the caller may use the deployment, and its
    input fits the agent's limit."""
    callers: dict[str, CallerConfig] = sections["callers"]
    if sched.deployment not in deployments:
        missing = f"no deployment named {sched.deployment!r}"
        raise _unknown(path, "deployment", missing, deployments)
    if sched.caller is None and callers:
        raise _unknown(
            path, "caller", "required once callers are configured: whose tenant and scope", callers
        )
    if sched.caller is not None:
        if not callers:
            raise ConfigError(
                str(path), "caller", "no callers are configured; remove it (the open API's)"
            )
        if sched.caller not in callers:
            raise _unknown(path, "caller", f"no caller named {sched.caller!r}", callers)
        allowed = callers[sched.caller].deployments
        if "*" not in allowed and sched.deployment not in allowed:
            raise ConfigError(
                str(path),
                "caller",
                f"caller {sched.caller!r} may not use deployment {sched.deployment!r}",
            )
    agent = agents.get(deployments[sched.deployment].agent)
    if agent is None:  # (the deployment's own error names it)
        return
    limit = agent.max_input_bytes
    if len(sched.input.encode()) > limit:
        raise ConfigError(
            str(path), "input", f"is longer than its agent's max_input_bytes ({limit})"
        )
