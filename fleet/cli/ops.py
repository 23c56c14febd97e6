"""``fleet migrate``, ``check``, ``worker``, ``serve`` and ``beat``: operate the store and the
processes of a fleet (registered on the ``fleet`` command by ``fleet.cli``)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleet.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    AsJson,
    fail,
    out,
    print_json,
    refuse_server,
)
from fleet.constants import DEFAULT_EMBEDDED_RUNS, DEFAULT_RUNS, MAX_EMBEDDED_RUNS, MAX_RUNS

if TYPE_CHECKING:
    from fleet.runtime import Runtime


def migrate(
    ctx: typer.Context,
    tenants: Annotated[
        bool,
        typer.Option(
            "--tenants",
            help="Move stored conversations into their tenants by the config again (done on "
            "the upgrade that adds tenants; again after a caller, trigger or tenant changed).",
        ),
    ] = False,
    contract: Annotated[
        bool,
        typer.Option(
            "--contract",
            help="Also apply the steps that remove what an older release needs (refused while "
            "a process of such a release is registered).",
        ),
    ] = False,
) -> None:
    """Create or upgrade the database schema (on FLEET_MIGRATE_DATABASE_URL when set): the
    steps that only add, while older releases still run; ``--contract`` the ones that remove,
    once none does. The upgrade that adds tenants also moves each stored conversation into its
    tenant (``--tenants``: again)."""
    refuse_server(ctx, "works on the database itself")
    from fleet.config import FleetConfig, load_config, load_settings
    from fleet.errors import ConfigError
    from fleet.runtime import open_store
    from fleet.store import db
    from fleet.store import migrate as migrations

    settings = load_settings()
    if settings.migrate_database_url:  # a direct or session-mode URL for the migrations
        settings = settings.model_copy(update={"database_url": settings.migrate_database_url})
    store = open_store(settings)
    try:
        with db.unavailable_on_outage():
            before = migrations.current(store.engine)
            steps = migrations.plan(store.engine, contract=contract)
            if steps.contracts:
                _refuse_contract_while_older_live(settings, steps.contracts)
            if steps.target is not None:
                migrations.upgrade(store.engine, steps.target)
            after = migrations.current(store.engine)
            moved: dict[str, int] | None = None
            if tenants or migrations.crossed(before, TENANTS_REVISION):
                try:
                    config: FleetConfig | None = load_config(settings.config_dir)
                except ConfigError as exc:  # the schema needs no config; moving does
                    config = None
                    out.print(
                        f"tenants: config not loaded ({'; '.join(e.message for e in exc.every)}); "
                        "stored conversations stay "
                        "with tenant 'default': run `fleet migrate --tenants` with the config",
                        markup=False,
                    )
                if config is not None:
                    callers = config.callers
                    moved = store.assign_tenants(
                        lambda name: config.tenant_of_caller(name) if name in callers else None,
                        config.tenant_of_scope,
                    )
    finally:
        store.dispose()
    where = db.sqlite_path(settings.resolved_database_url) or "the database"
    if before == after:
        newest = " (newest)" if not steps.waiting else ""
        out.print(f"{where} is at {after}{newest}; nothing to do")
    else:
        out.print(f"{where} migrated from {before or 'empty'} to {after}")
    if steps.waiting:
        out.print(
            f"{len(steps.waiting)} contract step(s) wait ({', '.join(steps.waiting)}): run "
            "`fleet migrate --contract` once no process of an older release runs",
            markup=False,
        )
    if moved is not None:
        out.print(
            f"tenants: {moved['moved']} conversation(s) moved into their tenant, "
            f"{moved['shared']} left in the shared 'api' scope (mixed or unknown callers), "
            f"{moved['stayed']} other(s) left with tenant 'default'"
        )


def _refuse_contract_while_older_live(settings: Any, contracts: tuple[str, ...]) -> None:
    """``--contract`` while a registered process's release needs what ``contracts`` remove:
    exit 2 naming them (embedded there is no other process to ask)."""
    if settings.embedded:
        return
    from fleet.dispatch.registry import Registry
    from fleet.domain.schema import blockers
    from fleet.runtime import redis_client

    live = Registry(redis_client(settings)).read()
    older = blockers([(e.id, e.schema) for e in live], contracts)
    if older:
        named = {e.id: e.release for e in live}
        shown = ", ".join(f"{name} (release {named[name]}, schema {head})" for name, head in older)
        fail(
            f"--contract: {contracts[0]} removes what a running older release needs: {shown}; "
            "stop or upgrade them first (`fleet workers ls`)"
        )


#: Why the fleet's own processes refuse ``--server``: they are what a server is made of.
_RUNS_HERE = "runs a process of the fleet on this machine"


def _metrics_port(what: str) -> Any:
    """The ``--metrics-port`` option of a process that serves ``what``."""
    return typer.Option(
        "--metrics-port",
        min=1,
        max=65535,
        envvar="FLEET_METRICS_PORT",
        help=f"Serve {what} on :PORT/metrics.",
    )


def _serve_metrics(port: int | None) -> None:
    """Serve this process's metrics on ``port`` (``--metrics-port``), if one is given."""
    if port is not None:
        from fleet.dispatch import worker_metrics

        worker_metrics.serve(port)


#: The revision that adds tenants: stored conversations move into theirs once it is applied.
TENANTS_REVISION = "0015_tenants"


def check(
    ctx: typer.Context,
    as_json: AsJson = False,
    connect: Annotated[
        bool,
        typer.Option("--connect", help="Also start or reach each MCP server and list its tools."),
    ] = False,
) -> None:
    """Validate settings and config/, and connect read-only; creates nothing, migrates nothing."""
    refuse_server(ctx, "checks the settings, config and services of this machine")
    from fleet.checks import run_checks

    results = run_checks(connect=connect)
    if as_json:
        print_json([r._asdict() for r in results])
    else:
        for r in results:
            mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[r.state]
            out.print(f"{mark}  {r.name}: {r.detail}", markup=False)
    failed = [r for r in results if r.state == "fail"]
    if failed:
        bad_input = failed[0].name in ("settings", "config")
        raise typer.Exit(EXIT_BAD_INPUT if bad_input else EXIT_FAILED)


def _check_runs(runs: int) -> None:
    """``fleet worker --runs`` out of range: one line, exit 2."""
    if not 1 <= runs <= MAX_RUNS:
        fail(
            f"--runs {runs}: a worker process holds 1 to {MAX_RUNS:,} runs in flight; "
            f"e.g. {DEFAULT_RUNS}"
        )


def worker(
    ctx: typer.Context,
    *,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Worker processes.")
    ] = 2,
    runs: Annotated[
        int,
        typer.Option(
            "--runs",
            envvar="FLEET_WORKER_RUNS",
            help="Runs one worker process holds in flight at once, a thread each, sharing the "
            "process's FLEET_DATABASE_POOL_SIZE connections (a run waiting on its model or a "
            "tool holds none); 1: a process per run (Celery's prefork pool).",
        ),
    ] = DEFAULT_RUNS,
    beat: Annotated[
        bool,
        typer.Option("--beat", help="Also run the sweeper (`fleet beat`) as a child process."),
    ] = False,
    loglevel: Annotated[str, typer.Option("--loglevel")] = "INFO",
    metrics_port: Annotated[
        int | None, _metrics_port("the worker's run metrics (all its processes)")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            "-n",
            help="Celery node name (default celery@HOST; %h is the host name): give each "
            "worker on one host its own, as `celery inspect` and the logs tell them apart.",
        ),
    ] = None,
) -> None:
    """Run a Celery worker that drains conversations (needs FLEET_REDIS_URL): --concurrency
    processes, each holding --runs runs in flight (a thread a run; --runs 1: a process a run)."""
    refuse_server(ctx, _RUNS_HERE)
    if name is not None and (not name.strip() or any(c.isspace() for c in name)):
        fail(f"--name {name!r}: a node name is one word without spaces, e.g. fleet1@%h")
    _check_runs(runs)
    _serve_metrics(metrics_port)
    if runs > 1 and concurrency > 1:  # a process each, every one with its threads
        _processes(concurrency, runs, loglevel, name, sweeper=loglevel if beat else None)
        return
    pool = ["-P", "threads", "-c", str(runs)] if runs > 1 else ["-c", str(concurrency)]
    _celery_argv(
        [
            "worker",
            *pool,
            "-Q",
            "fleet",
            "--loglevel",
            loglevel,
            "--without-gossip",
            "--without-mingle",
            *(["--hostname", name] if name is not None else []),
        ],
        sweeper=loglevel if beat else None,
    )


def _processes(count: int, runs: int, loglevel: str, name: str | None, sweeper: str | None) -> None:
    """``--concurrency N --runs M``: N worker processes of M runs each, started and stopped
    together (``fleet.cli.group``); this process serves their metrics (``--metrics-port``)."""
    from fleet.cli import group

    _need_fleet_mode()
    commands = [group.child_argv(i, runs, loglevel, name) for i in range(1, count + 1)]
    if sweeper is not None:
        beat = [sys.executable, "-m", "fleet.cli", "beat", "--loglevel", sweeper]
        commands.append([*beat, "--parent-pid", str(os.getpid())])
    if group.run(commands):
        raise typer.Exit(EXIT_FAILED)


def serve(
    ctx: typer.Context,
    *,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8080,
    workers: Annotated[int, typer.Option("--workers", min=1, help="uvicorn processes.")] = 1,
    loglevel: Annotated[str, typer.Option("--loglevel")] = "info",
    runs: Annotated[
        int | None,
        typer.Option(
            "--runs",
            help="Embedded mode: runs this process holds in flight, a thread each "
            f"(FLEET_EMBEDDED_CONCURRENCY, {DEFAULT_EMBEDDED_RUNS}; at most "
            f"{MAX_EMBEDDED_RUNS:,}).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", hidden=True, help="The older spelling of --runs."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            envvar="FLEET_API_METRICS_PORT",
            help="Serve /metrics without a key on this port of --host (the API port's /metrics "
            "then needs FLEET_METRICS_TOKEN or an operator key).",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (SubmitTask, triggers, A2A, /healthz, /readyz, /metrics)."""
    refuse_server(ctx, _RUNS_HERE)
    import uvicorn

    runs = _embedded_runs(runs, concurrency)
    if runs is not None:
        os.environ["FLEET_EMBEDDED_CONCURRENCY"] = str(runs)  # read by the app's runtime

    if metrics_port is not None:
        if metrics_port == port:
            fail(f"--metrics-port {metrics_port} is the API's --port: give it a port of its own")
        os.environ["FLEET_API_METRICS_PORT"] = str(metrics_port)  # the app's /metrics asks then
    if workers > 1:  # /metrics then sums every uvicorn process (Prometheus multiprocess mode)
        from fleet.dispatch import worker_metrics

        worker_metrics.prepare_multiprocess()
    rt = _build_checked()
    metrics_server = None
    if metrics_port is None:
        rt.close()
    else:  # this runtime stays open for the metrics port's store reads
        from fleet.api import metrics_port as metrics_http

        try:
            metrics_server = metrics_http.serve(rt, host, metrics_port)
        except OSError as exc:
            rt.close()
            fail(f"--metrics-port {metrics_port}: cannot listen on {host}: {exc.strerror or exc}")
    from fleet import logs

    # SIGTERM / Ctrl-C: uvicorn stops accepting, lets in-flight requests finish (for at most
    # the grace period), then the app's shutdown sends queued wake-ups and, embedded, hands
    # running tasks back after their current step.
    drain_s = max(1, math.ceil(rt.settings.shutdown_grace))
    json_logs: dict[str, Any] = {}
    if logs.log_format() == "json":  # uvicorn's records too, in each process it starts
        level = os.environ.get("FLEET_LOG_LEVEL", "WARNING").upper()
        json_logs["log_config"] = logs.dict_config(level, "json")
    try:
        uvicorn.run(
            "fleet.api.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=loglevel.lower(),
            access_log=False,
            timeout_graceful_shutdown=drain_s,
            **json_logs,
        )
    finally:
        if metrics_server is not None:
            metrics_server.close()
            rt.close()


def _embedded_runs(runs: int | None, concurrency: int | None) -> int | None:
    """``fleet serve --runs`` (or its older spelling ``--concurrency``), checked: embedded mode
    only, 1 to ``MAX_EMBEDDED_RUNS``."""
    if concurrency is not None:
        if runs is not None:
            fail("--concurrency is the older spelling of --runs: give one of them")
        runs = concurrency
    if runs is None:
        return None
    flag = "--runs" if concurrency is None else "--concurrency"
    from fleet.config import load_settings

    if not load_settings().embedded:
        fail(
            f"{flag} is for embedded mode; in a fleet, `fleet worker --runs` sets a worker "
            "process's runs in flight"
        )
    if not 1 <= runs <= MAX_EMBEDDED_RUNS:
        fail(
            f"{flag} {runs}: an embedded fleet serve holds 1 to {MAX_EMBEDDED_RUNS:,} runs in "
            f"flight; e.g. {DEFAULT_EMBEDDED_RUNS}"
        )
    return runs


def beat_cmd(
    ctx: typer.Context,
    loglevel: Annotated[str, typer.Option("--loglevel", help="The sweeper's log level.")] = "INFO",
    metrics_port: Annotated[
        int | None, _metrics_port("the sweeper's metrics (tasks recovered)")
    ] = None,
    parent_pid: Annotated[int | None, typer.Option("--parent-pid", hidden=True)] = None,
) -> None:
    """Run the sweeper: every FLEET_SWEEP_INTERVAL, recover lost workers' tasks and wake-ups.

    Run one or more per fleet: of several, one sweeps per interval (a Redis key decides).
    """
    refuse_server(ctx, _RUNS_HERE)
    import logging

    level = logging.getLevelName(loglevel.upper())
    if not isinstance(level, int):
        fail(f"--loglevel {loglevel!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    _need_fleet_mode()
    _serve_metrics(metrics_port)
    from fleet.dispatch import sweeper

    sweeper.main(level, parent_pid=parent_pid)


def _build_checked() -> Runtime:
    """The runtime, after the caller keys (as the API reads them): fail fast on bad config,
    caller keys or an unmigrated database, and create nothing when refusing."""
    from fleet.api.auth import KeyRing
    from fleet.config import load_config, load_settings
    from fleet.runtime import build, preflight

    settings = load_settings()
    config = load_config(settings.config_dir)
    preflight(config)
    KeyRing.from_config(config)
    return build(settings, config)


def _need_fleet_mode() -> None:
    from fleet.config import load_settings

    if load_settings().embedded:
        fail("this command needs FLEET_REDIS_URL (embedded mode runs tasks inside `fleet run`)")


def _celery_argv(argv: list[str], *, sweeper: str | None = None) -> None:
    """Start Celery with ``argv``; with ``sweeper`` (its log level) also a `fleet beat` child.

    The sweeper is a process of its own, not a thread here: prefork children would inherit
    its connections.
    """
    _need_fleet_mode()
    rt = _build_checked()
    rt.close()
    from fleet.dispatch.celery_app import app as celery_app

    child = None
    if sweeper is not None:  # it stops by itself if this process dies without stopping it
        beat = [sys.executable, "-m", "fleet.cli", "beat", "--loglevel", sweeper]
        # No port of its own: its metrics land in this worker's multiprocess folder, if any.
        env = {k: v for k, v in os.environ.items() if k != "FLEET_METRICS_PORT"}
        child = subprocess.Popen([*beat, "--parent-pid", str(os.getpid())], env=env)
    try:
        celery_app.start(argv)
    finally:
        if child is not None:
            _stop_child(child)


def _stop_child(child: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
