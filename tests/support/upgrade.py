"""The release before this one, found in git and set up beside this tree for the upgrade tests.

A release is the commit on main that sets a new ``version`` in ``pyproject.toml`` (tags may be
absent: CI clones main). The previous release is the newest commit that set a version other
than this tree's, e.g. while this tree says 0.5.0, the commit that set 0.4.0.
``FLEET_UPGRADE_FROM=<commit>`` names another.

It is checked out in a detached git worktree with a venv of its own (``pip install -e .``: its
own runtime dependencies, as a deployment installs it), both cached under
``$FLEET_UPGRADE_CACHE`` (``~/.cache/fleet-upgrade``) by commit, so only the first run pays for
the install. Its processes run with that venv's python from that worktree, with no trace of this
tree in their environment (``Previous.env``).

    python -m tests.support.upgrade            # which release, and set it up (prints the time)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.fleet import Proc, wait_for

#: This tree (the repository the previous release is looked up in).
ROOT = Path(__file__).resolve().parents[2]
#: The first release that runs beside a newer one (the upgrade test needs at least this one).
FIRST_SIDE_BY_SIDE = (0, 2, 0)
#: What must not reach the previous release's processes from this one's environment.
_NOT_PASSED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")


class UpgradeSetupError(RuntimeError):
    """The previous release cannot be found or set up (a shallow clone, no release before)."""


@dataclass(frozen=True)
class Release:
    commit: str
    version: str

    @property
    def short(self) -> str:
        return self.commit[:12]


def _git(*args: str, root: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise UpgradeSetupError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def version_numbers(version: str) -> tuple[int, ...]:
    """``0.2.0`` → ``(0, 2, 0)`` (a part that is not a number counts as 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("+", 1)[0].split("."))


def _version_of(pyproject: str) -> str:
    return str(tomllib.loads(pyproject)["project"]["version"])


def version_at(commit: str, root: Path = ROOT) -> str:
    """The version ``pyproject.toml`` says at ``commit``."""
    return _version_of(_git("show", f"{commit}:pyproject.toml", root=root))


def previous_release(root: Path = ROOT, env: Mapping[str, str] = os.environ) -> Release:
    """The release before this tree's version (``FLEET_UPGRADE_FROM`` overrides): the newest
    commit that changed ``version = …`` in ``pyproject.toml`` to another version than this
    tree's. Fails, saying what to do, on a shallow clone or when there is no such release, or
    only one older than ``FIRST_SIDE_BY_SIDE``."""
    given = env.get("FLEET_UPGRADE_FROM", "").strip()
    if given:
        commit = _git("rev-parse", "--verify", f"{given}^{{commit}}", root=root).strip()
        return Release(commit, version_at(commit, root))
    if _git("rev-parse", "--is-shallow-repository", root=root).strip() == "true":
        raise UpgradeSetupError(
            "this clone's history is shallow: the previous release is found in the history of "
            "pyproject.toml's version; fetch it (`git fetch --unshallow`) or name the release's "
            "commit in FLEET_UPGRADE_FROM"
        )
    current = _version_of((root / "pyproject.toml").read_text())
    changes = _git(
        "log", "--format=%H", "-G", "^version = ", "--", "pyproject.toml", root=root
    ).split()
    for commit in changes:
        version = version_at(commit, root)
        if version == current:
            continue  # the commit that set this version (or one that touched the line again)
        if version_numbers(version) > version_numbers(current):
            raise UpgradeSetupError(
                f"{commit[:12]} set version {version}, after this tree's {current}: "
                "name the release to upgrade from in FLEET_UPGRADE_FROM"
            )
        if version_numbers(version) < FIRST_SIDE_BY_SIDE:
            break
        return Release(commit, version)
    first = ".".join(map(str, FIRST_SIDE_BY_SIDE))
    raise UpgradeSetupError(
        f"no release before {current} to upgrade from: the history of pyproject.toml's version "
        f"holds none from {first} on (the first that runs beside a newer one); a new release "
        "sets its version in pyproject.toml in a commit of its own"
    )


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    given = env.get("FLEET_UPGRADE_CACHE", "").strip()
    return Path(given) if given else Path.home() / ".cache" / "fleet-upgrade"


@dataclass(frozen=True)
class Previous:
    """The previous release, checked out and installed: where, and how to run its processes."""

    release: Release
    src: Path
    venv: Path
    #: Seconds its setup took in this session (0 when it was cached).
    setup_s: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, base: Mapping[str, str] = os.environ) -> dict[str, str]:
        """``base`` for one of its processes: no ``FLEET_*`` setting, no PYTHONPATH (this tree
        must not shadow its code), its venv first on PATH."""
        env = {k: v for k, v in base.items() if k not in _NOT_PASSED and not k.startswith("FLEET_")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{base.get('PATH', os.defpath)}"
        env["VIRTUAL_ENV"] = str(self.venv)
        return env

    def probe(self) -> dict[str, str]:
        """Its python's view of fleet (file, version, release), run as its processes run."""
        code = (
            "import json, fleet, fleet.release as r, fleet.version as v; "
            "print(json.dumps({'file': fleet.__file__, 'version': v.__version__, "
            "'release': r.current()}))"
        )
        done = subprocess.run(
            [str(self.python), "-c", code],
            cwd=self.src,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise UpgradeSetupError(f"{self.python} cannot import fleet: {done.stderr.strip()}")
        seen: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
        return seen


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One setup of a commit at a time (two test sessions may want it at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(
    argv: list[str],
    what: str,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> None:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise UpgradeSetupError(f"{what} failed ({done.returncode}):\n{tail}")


def _forget(home: Path, root: Path) -> None:
    """Remove a cached setup that is incomplete or stale (its worktree unregistered too)."""
    src = home / "src"
    if src.exists():
        subprocess.run(
            ["git", "-C", str(root), "worktree", "remove", "--force", str(src)],
            capture_output=True,
            check=False,
        )
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True, check=False)


def set_up(release: Release, root: Path = ROOT, cache: Path | None = None) -> Previous:
    """Check ``release`` out in a worktree and install it in a venv of its own (both under
    the cache, by commit), unless a complete earlier setup is there; check that its python
    imports its own fleet."""
    home = (cache or cache_root()) / release.commit
    done_mark = home / "installed.json"
    previous = Previous(release, home / "src", home / "venv", 0.0)
    with _locked(home.parent / f"{release.commit}.lock"):
        if done_mark.exists():
            with contextlib.suppress(UpgradeSetupError):
                _check(previous)
                return previous
        _forget(home, root)
        home.mkdir(parents=True)
        began = time.monotonic()
        _run(
            [
                "git",
                "-C",
                str(root),
                "worktree",
                "add",
                "--detach",
                str(previous.src),
                release.commit,
            ],
            f"git worktree add {release.short}",
        )
        _run([sys.executable, "-m", "venv", str(previous.venv)], "python -m venv")
        _run(
            [str(previous.python), "-m", "pip", "install", "-q", "--no-compile", "-e", "."],
            f"pip install -e . of {release.version} ({release.short})",
            cwd=previous.src,
            env=previous.env(),
            timeout=1200,
        )
        previous = Previous(release, previous.src, previous.venv, time.monotonic() - began)
        _check(previous)
        done_mark.write_text(
            json.dumps(
                {"commit": release.commit, "version": release.version, "setup_s": previous.setup_s}
            )
        )
    return previous


def _check(previous: Previous) -> None:
    seen = previous.probe()
    if not Path(seen["file"]).resolve().is_relative_to(previous.src.resolve()):
        raise UpgradeSetupError(
            f"{previous.python} imports fleet from {seen['file']}, not {previous.src}"
        )
    if seen["version"] != previous.release.version:
        raise UpgradeSetupError(
            f"{previous.python} runs fleet {seen['version']}, not {previous.release.version}"
        )


WORKER_READY = r"ready\."
BEAT_READY = "fleet sweeper started"


class Side:
    """The processes of one release on one fleet: its python, run from its own tree, with the
    fleet's settings (``env``); each logs to ``<tmp>/<label>-<name>.log``."""

    def __init__(self, label: str, python: Path, cwd: Path, env: dict[str, str], tmp: Path) -> None:
        self.label = label
        self.python = python
        self.cwd = cwd
        self.env = env
        self.tmp = tmp
        self.procs: list[Proc] = []

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``fleet ARGS`` of this release, to the end."""
        return subprocess.run(
            [str(self.python), "-m", "fleet.cli", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, name: str, *args: str, ready: str | None = None) -> Proc:
        """Start ``fleet ARGS`` (in a session of its own); with ``ready``, wait for that line."""
        argv = [str(self.python), "-m", "fleet.cli", *args]
        log = self.tmp / f"{self.label}-{name}.log"
        proc = Proc(f"{self.label} {name}", argv, self.env, log, self.cwd)
        self.procs.append(proc)
        if ready is not None:
            proc.wait_log(ready, timeout=60)
        return proc

    def worker(self, name: str, concurrency: int = 2, *, wait: bool = True) -> Proc:
        """``fleet worker --concurrency N``, a process a run (``--runs 1`` where the release
        has it: 0.2.0's only pool; both then hand a run back from its pool process at SIGTERM
        alike); ``wait``: until it is ready (else ``ready(proc)``)."""
        runs = ("--runs", "1") if self.label != "old" else ()
        argv = (
            "worker",
            "--concurrency",
            str(concurrency),
            *runs,
            "--name",
            f"{self.label}-{name}@%h",
        )
        return self.start(name, *argv, ready=WORKER_READY if wait else None)

    def beat(self, *, wait: bool = True) -> Proc:
        return self.start("beat", "beat", "--loglevel", "INFO", ready=BEAT_READY if wait else None)

    @staticmethod
    def ready(proc: Proc) -> None:
        """Wait for a worker or beat started with ``wait=False``."""
        proc.wait_log(BEAT_READY if proc.name.endswith(" beat") else WORKER_READY, timeout=60)

    def api(self, *, wait: bool = True) -> str:
        """Start ``fleet serve`` on a free port (``self.api_proc``); its URL, once /healthz
        answers unless not ``wait`` (then ``serving(url)``)."""
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        argv = ("serve", "--host", "127.0.0.1", "--port", str(port), "--loglevel", "warning")
        self.api_proc = self.start("api", *argv)
        url = f"http://127.0.0.1:{port}"
        if wait:
            self.serving(url)
        return url

    def serving(self, url: str) -> None:
        import httpx

        proc = self.api_proc

        def up() -> bool:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.name} exited:\n{proc.log()[-3000:]}")
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 60, interval=0.1, what=f"{proc.name} to answer /healthz")

    @staticmethod
    def terminate(*procs: Proc, timeout: float = 60) -> dict[str, int]:
        """SIGTERM to each process itself at once (as Kubernetes stops a pod's main process),
        then each one's exit status once it has ended."""
        for proc in procs:
            proc.popen.send_signal(signal.SIGTERM)
        return {proc.name: proc.popen.wait(timeout) for proc in procs}

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def main() -> int:
    try:
        release = previous_release()
        print(f"previous release: {release.version} ({release.short})", flush=True)
        previous = set_up(release)
    except UpgradeSetupError as exc:
        print(f"upgrade test: {exc}", file=sys.stderr)
        return 1
    how = f"set up in {previous.setup_s:.0f} s" if previous.setup_s else "cached"
    print(f"{previous.release.version} in {previous.src} with {previous.python} ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
