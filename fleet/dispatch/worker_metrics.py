"""A Celery worker's metrics: its prefork children write them, the parent serves their sum.

Runs start, finish, retry and are recovered in Celery's child processes, which cannot each be
scraped. Prometheus multiprocess mode has every process write its values to files in one folder;
the worker's main process serves the sum on ``:<port>/metrics``. The folder must be chosen
before ``prometheus_client`` creates its first metric, so :func:`serve` runs before fleet's
modules are imported.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.dispatch.pids import pid_alive

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

#: The environment variable prometheus_client reads to switch to multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess() -> Path:
    """Use ``$PROMETHEUS_MULTIPROC_DIR`` (emptied of old values) or a fresh folder; return it."""
    if "prometheus_client.values" in sys.modules and not os.environ.get(MULTIPROC_ENV):
        raise RuntimeError(
            "prometheus_client was imported before multiprocess mode was set up; "
            f"set {MULTIPROC_ENV} in the environment instead"
        )
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.db"):  # a dead process's values would be summed in
            if not _alive(old):
                old.unlink(missing_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="fleet-metrics-"))
        os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def _alive(values: Path) -> bool:
    """Is the process that wrote ``<kind>_<pid>.db`` still running? (A folder may be shared.)"""
    pid = values.stem.rpartition("_")[2]
    return not pid.isdigit() or pid_alive(int(pid))


def serve(port: int, host: str = "0.0.0.0") -> Path:
    """Switch to multiprocess mode and serve the sum of this process tree's metrics."""
    folder = prepare_multiprocess()
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(_LiveSum(folder))
    start_http_server(port, addr=host, registry=registry)
    return folder


class _LiveSum:
    """The folder's sum, without the gauges of processes that are gone (a pool process killed
    or replaced): a ``livesum`` gauge such as ``fleet_worker_runs_in_flight`` counts live
    processes only, as counters count every process that ever ran."""

    def __init__(self, folder: Path) -> None:
        from prometheus_client import multiprocess

        self.folder = folder
        self.inner: Any = multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]
            None, path=str(folder)
        )

    def collect(self) -> Iterator[Metric]:
        for values in self.folder.glob("gauge_live*_*.db"):
            if not _alive(values):
                values.unlink(missing_ok=True)
        yield from self.inner.collect()
