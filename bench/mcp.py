"""What an MCP server costs a run: stdio and streamable HTTP, ``lifetime = "run"`` and ``"worker"``.

Five agents on the echo model, embedded (SQLite, the SDK's ``conv.run("hello")``, no tool
called): one without MCP servers (the baseline) and one for each transport and lifetime, each
with the shipped ``parcels`` server (config/shop/parcels.py; over HTTP a process of this
script serves it). The agents take turns run by run, so a noisy moment hits all of them; after
``--warmup`` runs each (a worker-lifetime server started), ``--runs`` runs each are timed.

  ms/run      wall time of ``conv.run`` (median)
  CPU ms/run  user+system time of this process and of its MCP server processes (live ones
              from /proc, ended ones as reaped children), per run (mean)
  overhead    ms/run minus the baseline's, in the same run of the script

Run: ``python -m bench.mcp [--runs 20] [--warmup 3]``. Needs no services.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fleet.sdk import Fleet

SHIPPED = Path(__file__).resolve().parents[1] / "config"
#: Goal of issue 32: a worker-lifetime server adds at most this much to a run (ms).
GOAL_MS = 60.0
AGENTS = {
    "none": ("no MCP server (baseline)", ""),
    "stdio-run": ("stdio, lifetime = run", 'command = "{python}"\nargs = ["-m", "shop.parcels"]\n'),
    "stdio-worker": (
        "stdio, lifetime = worker",
        'command = "{python}"\nargs = ["-m", "shop.parcels"]\nlifetime = "worker"\n',
    ),
    "http-run": ("HTTP, lifetime = run", 'url = "{url}"\n'),
    "http-worker": ("HTTP, lifetime = worker", 'url = "{url}"\nlifetime = "worker"\n'),
}


def write_config(root: Path, url: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "deployments").mkdir()
    shutil.copytree(SHIPPED / "shop", root / "shop")
    for name, (_, server) in AGENTS.items():
        text = 'model = "echo"\n'
        if server:
            text += '[[mcp_servers]]\nname = "parcels"\n' + server.replace("{url}", url)
        (root / "agents" / f"{name}.toml").write_text(text)
        (root / "deployments" / f"{name}.toml").write_text(f'agent = "{name}"\n')
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_http(port: int) -> None:
    """The shipped parcels server over streamable HTTP (``--serve-http PORT``)."""
    import uvicorn

    sys.path.insert(0, str(SHIPPED))
    from shop.parcels import server

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextmanager
def http_server() -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "bench.mcp", "--serve-http", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the HTTP MCP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_s() -> float:
    """CPU seconds of this process, its reaped children and its live child processes."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def measure(runs: int, warmup: int) -> dict[str, tuple[list[float], float]]:
    walls: dict[str, list[float]] = {name: [] for name in AGENTS}
    cpus: dict[str, float] = dict.fromkeys(AGENTS, 0.0)
    with tempfile.TemporaryDirectory() as tmp, http_server() as url:
        root = Path(tmp)
        config = write_config(root / "config", url)
        with Fleet(config_dir=config, home=root / "home", concurrency=1) as fleet:
            convs = {name: fleet.conversation(name) for name in AGENTS}
            for n in range(warmup + runs):
                for name, conv in convs.items():
                    c0, t0 = cpu_s(), time.perf_counter()
                    reply = conv.run("hello", timeout=60)
                    took, cpu = time.perf_counter() - t0, cpu_s() - c0
                    assert "hello" in reply, reply
                    if n >= warmup:
                        walls[name].append(took * 1000)
                        cpus[name] += cpu * 1000 / runs
    return {name: (walls[name], cpus[name]) for name in AGENTS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20, help="timed runs per agent")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs per agent first")
    ap.add_argument("--serve-http", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_http:
        serve_http(args.serve_http)
        return
    print(
        f"MCP per-run cost: embedded, echo model, conv.run('hello'), no tool called; "
        f"{args.runs} runs per agent after {args.warmup} warm-up, agents taking turns"
    )
    results = measure(args.runs, args.warmup)
    base = statistics.median(results["none"][0])
    print(f"{'agent':<26} {'ms/run':>8} {'p90 ms':>8} {'CPU ms/run':>11} {'overhead ms':>12}")
    for name, (label, _) in AGENTS.items():
        walls, cpu = results[name]
        median = statistics.median(walls)
        p90 = statistics.quantiles(walls, n=10)[-1] if len(walls) > 1 else median
        over = "-" if name == "none" else f"{median - base:.1f}"
        print(f"{label:<26} {median:>8.1f} {p90:>8.1f} {cpu:>11.1f} {over:>12}")
    for transport in ("stdio", "http"):
        over = statistics.median(results[f"{transport}-worker"][0]) - base
        verdict = "meets" if over <= GOAL_MS else "misses"
        print(
            f"{transport} lifetime = worker: {over:.1f} ms over the baseline ({verdict} the "
            f"goal of {GOAL_MS:g} ms)"
        )


if __name__ == "__main__":
    main()
