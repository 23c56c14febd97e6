"""``fleet worker --concurrency N --runs M``: N worker processes of M runs each, run as one.

Celery runs one pool per worker process, threads or processes, never both; so N processes of
M threads each are N ``fleet worker -c 1 --runs M`` children of this process. They start and
stop together: SIGTERM or SIGINT here is a warm shutdown of each (forwarded as SIGTERM, which
Celery never escalates to a cold one, so a Ctrl-C that also reached them directly does not
count twice); and a child that ends while no stop was asked for (killed, out of memory) stops
the others and this process with status 1, so a process manager restarts the whole worker
rather than leaving it short of a process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from fleet.cli.common import err

#: How often this process looks whether a child ended.
POLL_S = 0.2
#: Variables the children must not inherit: the metrics port is this process's (it serves the
#: children's sum), and ``--runs`` is passed to each.
NOT_INHERITED = ("FLEET_METRICS_PORT", "FLEET_WORKER_RUNS")


def child_argv(
    index: int, runs: int, loglevel: str, name: str | None, python: str = sys.executable
) -> list[str]:
    """The command line of child ``index`` (from 1): ``fleet worker -c 1 --runs M``, named
    ``<node>-<index>@<host>`` after ``name`` (``fleet@%h`` when none is given)."""
    node, _, host = (name or "fleet@%h").partition("@")
    return [
        *(python, "-m", "fleet.cli", "worker", "-c", "1", "--runs", str(runs)),
        *("--loglevel", loglevel, "--name", f"{node}-{index}@{host or '%h'}"),
    ]


def run(commands: Sequence[list[str]]) -> int:
    """Start ``commands`` as children and wait for them all; 0 when they ended after a stop
    asked of this process and each ended well, else 1."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    children = [subprocess.Popen(argv, env=env) for argv in commands]
    asked: list[int] = []

    def stop(signum: int, _frame: object = None) -> None:
        asked.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    lost = False
    while any(child.poll() is None for child in children):
        ended = [c for c in children if c.returncode is not None]
        if ended and not asked:
            first = ended[0]
            err.print(
                f"fleet: worker process {first.pid} ended (status {first.returncode}) while no "
                "stop was asked: stopping the others",
                markup=False,
            )
            lost = True
            stop(signal.SIGTERM)
        time.sleep(POLL_S)
    return 1 if lost or any(child.returncode for child in children) else 0
