"""``fleet check``: validate settings and config, connect read-only; create and migrate nothing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal, NamedTuple

from fleet.errors import ConfigError, FleetError

if TYPE_CHECKING:
    from fleet.agents.tools.mcp import McpToolServer
    from fleet.config import FleetConfig

State = Literal["ok", "warn", "fail"]


class CheckResult(NamedTuple):
    name: str
    state: State
    detail: str


def run_checks(*, connect: bool = False) -> list[CheckResult]:
    """Every check; ``connect`` also starts or reaches each MCP server and lists its tools."""
    from fleet.config import Settings, load_config, load_settings, secrets, short_ui_secret

    results: list[CheckResult] = []
    config: FleetConfig | None = None
    try:
        settings: Settings = load_settings()
    except FleetError as exc:
        return [CheckResult("settings", "fail", line) for line in _each(exc)]
    mode = "embedded (no FLEET_REDIS_URL)" if settings.embedded else "fleet (Celery on Redis)"
    results.append(CheckResult("settings", "ok", f"mode: {mode}"))
    if (short := short_ui_secret(settings)) is not None:
        results.append(CheckResult("settings", "fail", short.message))
    try:
        config = load_config(settings.config_dir)
        if config.callers:  # the keys as `fleet serve` will read them (set, and one per caller)
            from fleet.api.auth import KeyRing

            KeyRing.from_config(config)
        problems = _refusals(config)
        results.extend(CheckResult("config", "fail", p.message) for p in problems)
        if not problems:
            results.append(
                CheckResult(
                    "config",
                    "ok",
                    f"{settings.config_dir}: {len(config.agents)} agents, "
                    f"{len(config.deployments)} deployments "
                    f"({', '.join(sorted(config.deployments))})",
                )
            )
        results.extend(CheckResult("triggers", "warn", w.message) for w in secrets.awaited(config))
        if any(a.model.provider == "openai" for a in config.agents.values()) and not (
            settings.openai_api_key
        ):
            results.append(
                CheckResult(
                    "models",
                    "warn",
                    "an agent uses provider 'openai' but FLEET_OPENAI_API_KEY is unset",
                )
            )
        results.extend(_tenants(config))
        results.extend(_schedules(config))
        results.extend(_model_traffic(config))
        results.extend(_tools(config))
        results.extend(_mcp(config, connect=connect))
        results.extend(_recall(config, settings))
    except FleetError as exc:
        results.extend(CheckResult("config", "fail", line) for line in _each(exc))
    database = _database(settings)
    results.append(database)
    if database.state == "ok" and config is not None:
        from fleet.checks_runs import runs_against

        results.extend(CheckResult("runs", *line) for line in runs_against(config, settings))
    if not settings.embedded:
        results.append(_redis(settings))
    return results


def _each(exc: FleetError) -> list[str]:
    """Each error ``exc`` reports (every one a config load found), one line each."""
    if isinstance(exc, ConfigError):
        return [e.message for e in exc.every]
    return [exc.message]


def _refusals(config: FleetConfig) -> list[ConfigError]:
    """What a start refuses (an authorize policy that does not import, a secret too short to
    redact) and a secret variable that is unset, each naming the file and the key."""
    from fleet import policy
    from fleet.config import secrets

    found: list[ConfigError] = []
    try:
        policy.of(config)  # the very line `fleet run` and `fleet serve` refuse to start with
    except ConfigError as exc:
        found.append(exc)
    return found + secrets.unset(config) + secrets.too_short(config)


def _model_traffic(config: FleetConfig) -> list[CheckResult]:
    """Which models each model limit holds; a warning (file, key, reason) for a limit or a
    price that matches no agent's model or fallback."""
    from fleet.domain.model_limits import matches

    app = config.app
    if not app.model_limits and not app.prices:
        return []
    models = sorted(
        {c.label for a in config.agents.values() for c in a.model.choices}
        | {
            c.label
            for a in config.agents.values()
            if a.observations is not None and a.observations.model is not None
            for c in a.observations.model.choices
        }
    )
    where = config.root / "fleet.toml"
    out = []
    for i, entry in enumerate(app.model_limits):
        held = [m for m in models if matches(entry.limit(), m)]
        if held:
            out.append(CheckResult("model limits", "ok", f"{entry.match}: {', '.join(held)}"))
        else:
            out.append(
                CheckResult(
                    "model limits",
                    "warn",
                    f"{where}: model_limits.{i}.match: {entry.match!r} matches no agent's model "
                    f"(models: {', '.join(models) or 'none'})",
                )
            )
    for key in sorted(set(app.prices) - set(models)):
        out.append(
            CheckResult(
                "prices",
                "warn",
                f"{where}: prices.{key}: no agent's model is {key!r} "
                f"(models: {', '.join(models) or 'none'})",
            )
        )
    return out


def _schedules(config: FleetConfig) -> list[CheckResult]:
    """Each schedule of config/schedules with its next tick (its keys were checked as the
    config loaded: a bad cron, zone or interval fails there, naming file and key); a warning
    for one whose ``end_at`` has passed."""
    from datetime import UTC, datetime

    from fleet.domain.schedules import tick_text
    from fleet.views.schedules import when_text

    now = datetime.now(UTC)
    out = []
    for name, sched in sorted(config.schedules.items()):
        when = when_text({"cron": sched.cron, "every": sched.every, "timezone": sched.timezone})
        tick = sched.next_tick(now)
        if tick is None:
            where = config.root / "schedules" / f"{name}.toml"
            detail = f"{where}: end_at: {sched.end_at} has passed: it fires no more"
            out.append(CheckResult("schedules", "warn", detail))
            continue
        detail = f"{name} ({when}) on {sched.deployment}: next tick {tick_text(tick)}"
        out.append(CheckResult("schedules", "ok", detail))
    return out


def _tenants(config: FleetConfig) -> list[CheckResult]:
    """Who is which tenant, with its weight and quotas; a warning for each caller that shares
    the ``api`` scope (it reads every other such caller's conversations), for each caller or
    trigger naming a tenant without a file while others have one, and for each tenant file that
    no caller or trigger belongs to."""
    used = {config.tenant_of_caller(c) for c in config.callers}
    used |= {config.tenant_of_trigger(t) for t in config.triggers}
    shown = []
    for name in config.tenant_names:
        tenant = config.tenant(name)
        extras = [f"weight {tenant.weight}"] if tenant.weight != 1 else []
        extras += [f"{k} {v}" for k, v in tenant.quotas.items()]
        shown.append(f"{name} ({', '.join(extras)})" if extras else name)
    out = [CheckResult("tenants", "ok", ", ".join(shown))]
    for name, caller in sorted(config.callers.items()):
        if caller.shared:
            out.append(
                CheckResult(
                    "tenants",
                    "warn",
                    f"caller {name!r} uses the shared 'api' scope (scope = \"api\"): it reads "
                    "and continues every other shared caller's conversations",
                )
            )
    out += _tenants_without_files(config)
    for name in sorted(set(config.tenants) - used - {"default"}):
        out.append(
            CheckResult(
                "tenants",
                "warn",
                f"{config.root / 'tenants' / (name + '.toml')}: no caller or trigger belongs "
                f"to tenant {name!r}",
            )
        )
    return out


def _tenants_without_files(config: FleetConfig) -> list[CheckResult]:
    """A warning for each caller or trigger whose ``tenant =`` names a tenant without a file
    while other tenants have one: a typo (``acmee``) would make an unthrottled tenant."""
    if not config.tenants:
        return []
    named = [("callers", n, c.tenant) for n, c in sorted(config.callers.items())]
    named += [("triggers", n, t.tenant) for n, t in sorted(config.triggers.items())]
    have = ", ".join(sorted(config.tenants))
    return [
        CheckResult(
            "tenants",
            "warn",
            f"{config.root / section / (name + '.toml')}: tenant: tenant {tenant!r} has no file "
            f"in {config.root / 'tenants'} (tenants with files: {have}): it gets weight 1 and "
            f"no quotas or budget; fix the name, or add tenants/{tenant}.toml",
        )
        for section, name, tenant in named
        if tenant is not None and tenant not in config.tenants
    ]


def _recall(config: object, settings: object) -> list[CheckResult]:
    """How semantic recall searches, for agents that use it: in the database (pgvector,
    sqlite-vec) or exactly in the worker; the embedder and whether its package is here."""
    from fleet.config import FleetConfig

    assert isinstance(config, FleetConfig)
    users = sorted(n for n, a in config.agents.items() if a.recall is not None)
    if not users:
        return []
    cfg = config.app.embeddings
    if cfg.provider == "local":
        import importlib.util

        if importlib.util.find_spec("wordllama") is None:
            return [CheckResult("recall", "fail", "embeddings 'local' need the wordllama package")]
        embedder = "local wordllama (offline)"
    else:
        embedder = f"openai-compatible {cfg.model}"
    if cfg.search == "exact":
        how = 'exact search in the worker ([embeddings] search = "exact")'
    else:
        how = _vector_search(settings)
    return [CheckResult("recall", "ok", f"{', '.join(users)}: {how}, embeddings by {embedder}")]


def _vector_search(settings: object) -> str:
    """What the database offers recall's search (read-only: nothing is created)."""
    from fleet.config import Settings
    from fleet.store import db
    from fleet.store.vectors import probe

    assert isinstance(settings, Settings)
    url = settings.resolved_database_url
    path = db.sqlite_path(url)
    if path is not None and not path.exists():
        url = "sqlite://"  # not created yet: what this Python's SQLite can load is the same
    try:
        engine = db.create(url, readonly=True, pooler=settings.database_pooler)
    except FleetError:
        return "search not probed (see the database check)"
    try:
        return probe(engine, create=False).detail
    except Exception as exc:
        return f"search not probed: {db.describe(exc)}"
    finally:
        engine.dispose()


def _tools(config: object) -> list[CheckResult]:
    """Import every agent's Python tools and build their schemas, as a worker will; a failure
    for each agent whose tools do not."""
    from fleet.agents.tools import ToolLoadError, toolbox
    from fleet.config import FleetConfig

    assert isinstance(config, FleetConfig)
    count = 0
    failed = []
    for name, agent in sorted(config.agents.items()):
        try:
            count += len(toolbox.build(agent, config.root).static)
        except ToolLoadError as exc:
            where = config.root / "agents" / f"{name}.toml"
            # a config error: `fleet check` exits 2 naming the agent file and the tool
            failed.append(CheckResult("config", "fail", f"{where}: {exc}"))
    if failed:
        return failed
    return [CheckResult("tools", "ok", f"{count} tools of {len(config.agents)} agents import")]


def _database(settings: object) -> CheckResult:
    from fleet.config import Settings
    from fleet.store import db, migrate, revision

    assert isinstance(settings, Settings)
    url = settings.resolved_database_url
    try:
        shown = db.shown(db.normalize_url(url))
        path = db.sqlite_path(url)
    except FleetError as exc:  # a malformed FLEET_DATABASE_URL: a settings error
        return CheckResult("settings", "fail", exc.message)
    if path is not None and not path.exists():
        return CheckResult(
            "database",
            "warn",
            f"{path} does not exist yet; `fleet run` (embedded) or `fleet migrate` creates it",
        )
    engine = db.create(url, readonly=True, pooler=settings.database_pooler)
    try:
        with db.unavailable_on_outage():
            have = migrate.current(engine)
            found = revision.check(engine)
            tls = db.encrypted(engine)
    except FleetError as exc:
        return CheckResult("database", "fail", f"{shown}: {exc.message}")
    except Exception as exc:
        problem = db.describe(exc)
        return CheckResult("database", "fail", f"{shown}: {problem}{db.tls_hint(problem)}")
    finally:
        engine.dispose()
    want = revision.HEAD
    where = str(path) if path is not None else shown
    if found.action == "migrate" and path is not None:
        return CheckResult(
            "database",
            "warn",
            f"{where}: at {have or 'empty'}; the next `fleet run` migrates it to {want}",
        )
    if not found.ok:
        return CheckResult("database", "fail", f"{where}: {found.message}")
    over = " over TLS" if tls else ""
    newer = "" if have == want else f", newer than this release's {want} (it only adds)"
    return CheckResult(
        "database", "ok", f"{where}: reachable{over}, schema at {have}{newer or ' (newest)'}"
    )


def _redis(settings: object) -> CheckResult:
    from fleet.config import Settings
    from fleet.dispatch.redis_target import RedisTarget, describe
    from fleet.runtime import redis_client

    assert isinstance(settings, Settings)
    target = RedisTarget.of(settings)
    assert target is not None
    shown = target.shown
    try:
        client = redis_client(settings)
        client.ping()
        client.close()
    except Exception as exc:
        return CheckResult("redis", "fail", f"{shown}: unreachable: {describe(exc)}")
    return CheckResult("redis", "ok", f"{shown}: reachable")


def _mcp(config: FleetConfig, *, connect: bool) -> list[CheckResult]:
    """MCP servers: the variables their secrets come from are set (and, asked to, they answer)."""
    servers = [
        (name, server)
        for name, agent in sorted(config.agents.items())
        for server in agent.mcp_servers
    ]
    if not servers:
        return []
    missing = [
        CheckResult("config", "fail", f"{config.root / 'agents' / f'{name}.toml'}: {problem}")
        for name, server in servers
        for problem in server.missing_secrets(os.environ)
    ]
    if missing:
        return missing
    if not connect:
        listed = ", ".join(
            f"{name}: {server.name} ({server.transport})" for name, server in servers
        )
        return [
            CheckResult(
                "mcp",
                "ok",
                f"{len(servers)} server{'s' if len(servers) != 1 else ''} ({listed}); not "
                "contacted (`fleet check --connect` "
                "starts or reaches each and lists its tools)",
            )
        ]
    from fleet.agents.tools.toolbox import tool_servers

    return [
        _connect(name, server)
        for name, agent in sorted(config.agents.items())
        for server in tool_servers(agent, config.root)  # started exactly as a run starts them
    ]


def _connect(agent: str, server: McpToolServer) -> CheckResult:
    from fleet.agents.tools import ToolContext
    from fleet.agents.tools.base import ToolServerError

    try:
        with server.connect(ToolContext(task_id="check", run_id="check")) as tools:
            names = [t.name for t in tools]
    except ToolServerError as exc:
        return CheckResult("mcp", "fail", f"agent {agent!r}: {exc}")
    shown = ", ".join(names[:_SHOWN_TOOLS]) + (", …" if len(names) > _SHOWN_TOOLS else "")
    return CheckResult(
        "mcp",
        "ok",
        f"agent {agent!r}: {server.label}: {len(names)} tool{'s' if len(names) != 1 else ''} "
        f"({shown or 'none'})",
    )


#: How many tool names a ``--connect`` line lists.
_SHOWN_TOOLS = 8
