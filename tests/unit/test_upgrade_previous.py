"""The upgrade test's previous release, found in the history of pyproject.toml's version
(tests/support/upgrade.py): on a small repository of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.upgrade import Release, UpgradeSetupError, previous_release


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _commit(root: Path, version: str | None, note: str) -> str:
    """A commit that sets ``version`` (None: leaves it) and changes a note either way."""
    if version is not None:
        (root / "pyproject.toml").write_text(
            f'[project]\nname = "fleet"\nversion = "{version}"\n\n[tool.x]\nversion_file = "v"\n'
        )
    (root / "NOTES").write_text(note)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", note)
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    made = {
        "0.1.0": _commit(root, "0.1.0", "first"),
        "0.2.0": _commit(root, "0.2.0", "release 0.2.0"),
        "work": _commit(root, None, "work after 0.2.0"),
        "0.3.0": _commit(root, "0.3.0", "release 0.3.0"),
        "more": _commit(root, None, "work after 0.3.0"),
    }
    return root, made


def test_the_previous_release_is_the_commit_that_set_the_version_before_this_one(
    repo: tuple[Path, dict[str, str]],
) -> None:
    root, made = repo
    assert previous_release(root, env={}) == Release(made["0.2.0"], "0.2.0")
    # on the release commit itself too
    _git(root, "checkout", "-q", made["0.3.0"])
    assert previous_release(root, env={}) == Release(made["0.2.0"], "0.2.0")


def test_fleet_upgrade_from_names_another(repo: tuple[Path, dict[str, str]]) -> None:
    root, made = repo
    found = previous_release(root, env={"FLEET_UPGRADE_FROM": made["work"][:8]})
    assert found == Release(made["work"], "0.2.0")
    with pytest.raises(UpgradeSetupError, match="nosuch"):
        previous_release(root, env={"FLEET_UPGRADE_FROM": "nosuch"})


def test_no_release_that_runs_beside_a_newer_one_is_a_clear_failure(
    repo: tuple[Path, dict[str, str]],
) -> None:
    root, made = repo
    _git(root, "checkout", "-q", made["work"])  # 0.2.0: before it only 0.1.0
    with pytest.raises(UpgradeSetupError, match=r"no release before 0\.2\.0 to upgrade from"):
        previous_release(root, env={})


def test_a_shallow_clone_is_a_clear_failure(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, _ = repo
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{root}", str(shallow)], check=True
    )
    with pytest.raises(UpgradeSetupError, match=r"shallow.*FLEET_UPGRADE_FROM"):
        previous_release(shallow, env={})
