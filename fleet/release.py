"""Which release of fleet this process is: its version plus its build.

Every run records the release that ran it, and every process registers with it (``fleet workers
ls``), so a rolling upgrade shows which release did what. The build is ``FLEET_BUILD`` when set
(an image tag, a CI build number), else the git commit of the source tree the package was
loaded from (an editable install or a checkout), else nothing: the release is then the version
alone. Read once per process, and only by the processes that need it (never the CLI's reads).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

from fleet.version import __version__

#: What a build may hold: a commit, a tag, a CI number (no spaces: it is shown in tables).
_BUILD = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _commit(source: Path) -> str:
    """The short commit of the checkout holding ``source``, or "" (not a checkout, no git)."""
    if not (source / ".git").exists():
        return ""
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and _BUILD.fullmatch(commit) else ""


@functools.cache
def build() -> str:
    """``FLEET_BUILD`` (cut to what a build may hold), else the source tree's git commit."""
    given = os.environ.get("FLEET_BUILD", "").strip()
    if given:
        return "".join(_BUILD.findall(given))[:64]
    return _commit(Path(__file__).resolve().parents[1])


def of(version: str, build: str) -> str:
    """A release's name: ``0.2.0+3f1c2a9b0d4e`` (PEP 440's local part), the version alone when
    there is no build."""
    return f"{version}+{build}" if build else version


def current() -> str:
    """This process's release."""
    return of(__version__, build())


def version_of(release: str) -> tuple[int, ...]:
    """The version part of a release as numbers (``0.2.0+abc`` → ``(0, 2, 0)``), to order them;
    a part that is not a number counts as 0."""
    parts = release.split("+", 1)[0].split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in parts)
