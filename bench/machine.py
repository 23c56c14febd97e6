"""What the benches measure a machine's processes with: CPU seconds and resident memory from
/proc, process trees, free ports, a redis-server of a bench's own."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections import Counter
from pathlib import Path

import redis

from tests.support.fleet import wait_for

TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": field 3 onwards
    return (int(fields[11]) + int(fields[12])) / TICK


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a Celery worker and its pool processes)."""
    found = [pid]
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for thread in threads:
        try:
            children = (thread / "children").read_text().split()
        except FileNotFoundError:
            continue
        for child in children:
            found += process_tree(int(child))
    return found


def sample(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two samples; a process that started in between counts from zero."""
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A redis-server of the bench's own: its command counts and CPU are the fleet's alone."""

    def __init__(self, tmp: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("the bench needs redis-server on PATH (apt-get install redis)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = (tmp / "redis.log").open("wb")
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(tmp)]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = redis.Redis.from_url(self.url)

        def up() -> bool:
            try:
                return bool(self.client.ping())
            except redis.ConnectionError:
                return False

        wait_for(up, 20, what="the bench's redis-server")
        self.version = str(self.client.info("server")["redis_version"])

    def commands(self) -> Counter[str]:
        stats = self.client.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def rss_mib(pid: int) -> float:
    """Resident memory (VmRSS) of one process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
