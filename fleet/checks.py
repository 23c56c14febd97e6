"""``fleet check``: validate settings and config, connect read-only; create and migrate nothing."""

from __future__ import annotations

from typing import Literal, NamedTuple

from fleet.errors import FleetError

State = Literal["ok", "warn", "fail"]


class CheckResult(NamedTuple):
    name: str
    state: State
    detail: str


def run_checks() -> list[CheckResult]:
    from fleet.config import Settings, load_config, load_settings

    results: list[CheckResult] = []
    try:
        settings: Settings = load_settings()
    except FleetError as exc:
        return [CheckResult("settings", "fail", exc.message)]
    mode = "embedded (no FLEET_REDIS_URL)" if settings.embedded else "fleet (Celery on Redis)"
    results.append(CheckResult("settings", "ok", f"mode: {mode}"))
    try:
        config = load_config(settings.config_dir)
        if config.callers:  # the keys as `fleet serve` will read them (set, and one per caller)
            from fleet.api.auth import KeyRing

            KeyRing.from_config(config)
        results.append(
            CheckResult(
                "config",
                "ok",
                f"{settings.config_dir}: {len(config.agents)} agents, "
                f"{len(config.deployments)} deployments ({', '.join(sorted(config.deployments))})",
            )
        )
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
        results.append(_tools(config))
    except FleetError as exc:
        results.append(CheckResult("config", "fail", exc.message))
    results.append(_database(settings))
    if not settings.embedded:
        results.append(_redis(settings))
    return results


def _tools(config: object) -> CheckResult:
    """Import every agent's Python tools and build their schemas, as a worker will."""
    from fleet.agents.tools import ToolLoadError, toolbox
    from fleet.config import FleetConfig

    assert isinstance(config, FleetConfig)
    count = 0
    for name, agent in sorted(config.agents.items()):
        try:
            count += len(toolbox.build(agent, config.root).static)
        except ToolLoadError as exc:
            where = config.root / "agents" / f"{name}.toml"
            # a config error: `fleet check` exits 2 naming the agent file and the tool
            return CheckResult("config", "fail", f"{where}: {exc}")
    return CheckResult("tools", "ok", f"{count} tools of {len(config.agents)} agents import")


def _database(settings: object) -> CheckResult:
    from fleet.config import Settings
    from fleet.store import db, migrate

    assert isinstance(settings, Settings)
    url = settings.resolved_database_url
    try:
        shown = db.normalize_url(url).render_as_string(hide_password=True)
        path = db.sqlite_path(url)
    except FleetError as exc:  # a malformed FLEET_DATABASE_URL: a settings error
        return CheckResult("settings", "fail", exc.message)
    if path is not None and not path.exists():
        return CheckResult(
            "database",
            "warn",
            f"{path} does not exist yet; `fleet run` (embedded) or `fleet migrate` creates it",
        )
    engine = db.create(url, readonly=True)
    try:
        with db.unavailable_on_outage():
            have = migrate.current(engine)
    except FleetError as exc:
        return CheckResult("database", "fail", f"{shown}: {exc.message}")
    except Exception as exc:
        return CheckResult("database", "fail", f"{shown}: {db.describe(exc)}")
    finally:
        engine.dispose()
    want = migrate.head()
    where = str(path) if path is not None else shown
    if have != want:
        if path is not None:
            return CheckResult(
                "database",
                "warn",
                f"{where}: at {have or 'empty'}; the next `fleet run` migrates it to {want}",
            )
        return CheckResult(
            "database",
            "fail",
            f"{where}: schema at {have or 'nothing (empty)'}, needs {want}: run `fleet migrate`",
        )
    return CheckResult("database", "ok", f"{where}: reachable, schema at {have} (newest)")


def _redis(settings: object) -> CheckResult:
    from fleet.config import Settings
    from fleet.domain.redaction import url_without_password
    from fleet.runtime import redis_client

    assert isinstance(settings, Settings)
    shown = url_without_password(settings.redis_url or "")
    try:
        client = redis_client(settings)
        client.ping()
        client.close()
    except Exception as exc:
        return CheckResult("redis", "fail", f"{shown}: unreachable: {exc}")
    return CheckResult("redis", "ok", f"{shown}: reachable")
