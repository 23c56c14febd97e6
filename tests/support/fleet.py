"""Real fleet processes for integration tests: Celery workers and sweepers, started and killed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fleet.config import Settings
from fleet.runtime import Runtime, build

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float, *, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it is truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class Proc:
    """A child process in its own session, logging to a file the test can wait on."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
    ) -> None:
        self.name = name
        self._terminated = False
        self.log_path = log
        self._log = log.open("wb")
        self.popen = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        rx = re.compile(pattern)

        def seen() -> re.Match[str] | None:
            exited = self.popen.poll() is not None  # before the read: its last lines are in
            found = rx.search(self.log())
            if found is None and exited:
                raise AssertionError(
                    f"{self.name} exited ({self.popen.returncode}):\n{self.log()[-3000:]}"
                )
            return found

        return wait_for(seen, timeout, interval=0.05, what=f"{self.name} to log {pattern!r}")

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)

    def terminate(self) -> None:
        """Send SIGTERM once (``stop`` then waits for it without sending another)."""
        if not self._terminated:
            self._terminated = True
            self.signal(signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()


class Fleet:
    """Starts workers and beat against one database, one Redis and one config folder."""

    def __init__(
        self, tmp: Path, *, database_url: str, redis_url: str, config_dir: Path, **settings: Any
    ) -> None:
        self.tmp = tmp
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "FLEET_DATABASE_URL": database_url,
            "FLEET_REDIS_URL": redis_url,
            "FLEET_CONFIG_DIR": str(config_dir),
            "FLEET_HOME": str(tmp / "home"),
            "FLEET_LOG_LEVEL": "INFO",
            **{f"FLEET_{k.upper()}": str(v) for k, v in settings.items()},
        }
        self.procs: list[Proc] = []

    def worker(self, name: str, concurrency: int = 1, *, ready: bool = True) -> Proc:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "fleet.dispatch.celery_app",
            "worker",
            "-c",
            str(concurrency),
            "-Q",
            "fleet",
            "-n",
            f"{name}@%h",
            "-P",
            "prefork",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ]
        proc = Proc(name, argv, self.env, self.tmp / f"{name}.log")
        self.procs.append(proc)
        if ready:
            proc.wait_log(r"ready\.")
        return proc

    def beat(self, name: str = "beat", *args: str) -> Proc:
        """Start ``fleet beat`` (the sweeper) with ``args``; returns once its loop runs."""
        argv = [sys.executable, "-m", "fleet.cli", "beat", "--loglevel", "INFO", *args]
        proc = Proc(name, argv, self.env, self.tmp / f"{name}.log")
        self.procs.append(proc)
        proc.wait_log(r"fleet sweeper started")
        return proc

    def serve(self, port: int | None = None, *, workers: int = 1, **env: str) -> str:
        """Start ``fleet serve`` on 127.0.0.1 (``workers`` uvicorn processes); returns its base
        URL once it answers /healthz."""
        import socket

        import httpx

        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        argv = [
            sys.executable,
            "-m",
            "fleet.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loglevel",
            "warning",
            *(["--workers", str(workers)] if workers > 1 else []),
        ]
        proc = Proc("api", argv, {**self.env, **env}, self.tmp / "api.log")
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if proc.popen.poll() is not None:
                raise AssertionError(f"fleet serve exited:\n{proc.log()[-3000:]}")
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, interval=0.1, what="fleet serve to answer /healthz")
        return url

    def kill(self) -> None:
        """SIGKILL every process (and its pool), for a test that is over: nothing of theirs is
        looked at any more, and a graceful stop costs seconds a worker."""
        for proc in self.procs:
            proc.signal(signal.SIGKILL)
        for proc in self.procs:
            proc.popen.wait(10)

    def stop(self) -> None:
        """SIGTERM to every process at once, newest first, then wait for each: a prefork pool
        process lingers a second before it exits (billiard's), so one at a time adds up."""
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            proc.stop()


def fleet_settings(
    tmp: Path, database_url: str, redis_url: str, config_dir: Path, **overrides: Any
) -> dict[str, Any]:
    """The settings a test's own runtime (``runtime_for``) and its worker processes
    (``running_fleet``) share, as keyword arguments for both: home under ``tmp``, the
    database, Redis and config folder, and ``overrides`` (``lease_ttl=2.0``, ...; a name that is
    no ``Settings`` field, such as ``test_counter``, reaches the workers only, as ``FLEET_*``)."""
    return {
        "home": tmp / "home",
        "database_url": database_url,
        "redis_url": redis_url,
        "config_dir": config_dir,
        **overrides,
    }


@contextmanager
def runtime_for(settings: dict[str, Any]) -> Iterator[Runtime]:
    """An in-process runtime built on ``settings`` (from ``fleet_settings``), closed after."""
    runtime = build(Settings(**{k: v for k, v in settings.items() if k in Settings.model_fields}))
    try:
        yield runtime
    finally:
        runtime.close()


@contextmanager
def running_fleet(tmp: Path, **kwargs: Any) -> Iterator[Fleet]:
    """Workers and beats started under ``tmp`` with ``kwargs`` (``fleet_settings(...)``, plus
    any ``FLEET_*`` extras such as ``test_counter``), all stopped after."""
    fleet = Fleet(tmp, **kwargs)
    try:
        yield fleet
    finally:
        fleet.stop()
