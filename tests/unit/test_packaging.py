"""Every package of fleet ships in the wheel (pyproject lists packages one by one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "fleet").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found <= listed, f"not shipped in the wheel: {sorted(found - listed)}"
