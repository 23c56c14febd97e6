"""The docs site against the code: its generated references and every TOML example it shows.

- The configuration reference lists exactly the keys ``fleet check`` accepts (the config models'
  fields, walked here on their own) and every ``FLEET_*`` variable, each with a description.
- The HTTP reference shows every operation of the OpenAPI document and its parameters.
- Every ```toml block of README.md and docs/ names its file on its first line
  (``# config/agents/support.toml``; ``(excerpt)`` after it for a part of a file) and loads with
  fleet's own config loader, an excerpt merged into the smallest file of its kind.
- Generated pages are not committed (they would go stale).

``make docs`` (part of ``make test``) runs ``mkdocs build --strict``, which fails on a broken
link or anchor; it is not run again here.
"""

from __future__ import annotations

import re
import tomllib
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from fleet.config import (
    AgentConfig,
    AppConfig,
    CallerConfig,
    DeploymentConfig,
    Settings,
    TriggerConfig,
    load_config,
)
from fleet.config.schedules import ScheduleConfig
from fleet.config.tenants import TenantConfig
from tests.support.docs import DOCS, ROOT, Example, page, plugin, toml_examples

#: What ``load_config`` (and so ``fleet check``) reads, by the heading of its reference section.
FILES: dict[str, type[BaseModel]] = {
    "config/agents/<name>.toml": AgentConfig,
    "config/deployments/<name>.toml": DeploymentConfig,
    "config/triggers/<name>.toml": TriggerConfig,
    "config/callers/<name>.toml": CallerConfig,
    "config/tenants/<name>.toml": TenantConfig,
    "config/schedules/<name>.toml": ScheduleConfig,
    "config/fleet.toml": AppConfig,
}


# -- the configuration reference ----------------------------------------------------------------


def _models_in(tp: Any, how: str) -> list[tuple[type[BaseModel], str]]:
    """The models a field's type holds, with how each nests: ``.`` (a table), ``[].`` (an
    array of tables) or ``.<name>.`` (a table of tables)."""
    if get_origin(tp) in (Union, types.UnionType):
        return [m for arg in get_args(tp) for m in _models_in(arg, how)]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(tp, how)]
    if get_origin(tp) in (tuple, list):
        return _models_in(get_args(tp)[0], "[].")
    if get_origin(tp) is dict:
        return _models_in(get_args(tp)[1], ".<name>.")
    return []


def accepted_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key a file of ``model`` may hold, nested ones as ``a.b``, ``a[].b``, ``a.<name>.b``
    (``name`` is the file's name, never a key)."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if not prefix and name == "name":
            continue
        key = prefix + (info.alias or name)
        keys.add(key)
        for nested, how in _models_in(info.annotation, "."):
            keys |= accepted_keys(nested, key + how)
    return keys


def reference_tables() -> dict[str, list[list[str]]]:
    """The generated page's tables: section heading → rows of cells."""
    text = plugin("config_reference").render()
    tables: dict[str, list[list[str]]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = section.splitlines()[0].split(" {", 1)[0].strip("`")
        rows = [
            [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in section.splitlines()
            if line.startswith("| `")
        ]
        tables[heading] = rows
    return tables


@pytest.mark.parametrize("heading", sorted(FILES))
def test_the_reference_lists_every_key_fleet_check_accepts(heading: str) -> None:
    rows = reference_tables()[heading]
    listed = [r[0].strip("`") for r in rows]
    assert len(listed) == len(set(listed)), "a key is listed twice"
    assert set(listed) == accepted_keys(FILES[heading])


def test_the_reference_lists_every_setting() -> None:
    rows = reference_tables()["Environment variables"]
    assert {r[0].strip("`") for r in rows} == {f"FLEET_{f.upper()}" for f in Settings.model_fields}


def test_every_key_has_a_type_a_default_and_a_description() -> None:
    for heading, rows in reference_tables().items():
        for key, kind, default, description in rows:
            assert kind and default, f"{heading}: {key}"
            assert description, f"{heading}: {key} has no description (a #: comment above it)"


def test_a_key_shows_its_range_default_and_comment() -> None:
    rows = {r[0]: r for r in reference_tables()["config/agents/<name>.toml"]}
    assert rows["`history.max_items`"][1:3] == ["integer, 1 to 100", "`20`"]
    assert rows["`retention`"][1:3] == ["duration, 1h to 365d", '`"30d"`']
    assert rows["`tool_timeout`"][3].startswith("Seconds a tool call may take")
    env = {r[0]: r for r in reference_tables()["Environment variables"]}
    assert env["`FLEET_LEASE_TTL`"][1:3] == ["duration", "`10s`"]


# -- the HTTP reference -------------------------------------------------------------------------


def test_the_http_reference_shows_every_operation() -> None:
    http = plugin("http_reference")
    doc = http.openapi()
    text = http.render(doc)
    for method, path, op in http.operations(doc):
        head = f"### {op['operationId']} "
        assert head in text, op["operationId"]
        section = text.split(head, 1)[1].split("\n### ", 1)[0]
        assert f"`{method.upper()} {path}`" in section
        for param in op.get("parameters", []):
            assert f"| `{param['name']}` | {param['in']} |" in section
        for status in op["responses"]:
            assert f"\n| {status} |" in section
    for name in doc["components"]["schemas"]:
        assert f"### {name} " in text


def test_generated_pages_are_not_committed() -> None:
    for module in ("config_reference", "http_reference"):
        assert not (DOCS / plugin(module).PAGE).exists()


# -- TOML examples ------------------------------------------------------------------------------

#: The smallest file of each kind an excerpt is merged into (keys the excerpt lacks).
MINIMAL = {
    "agents": {},
    "deployments": {"agent": '"support"'},
    "triggers": {"deployment": '"support"'},
    "callers": {"source": '"api"', "key_env": '"FLEET_KEY_EXAMPLE"'},
    "tenants": {},
    "schedules": {"deployment": '"support"', "every": '"1h"', "input": '"x"'},
    "fleet.toml": {},
}
_HEADER = re.compile(
    r"^# config/(?:(?P<kind>agents|deployments|triggers|callers|tenants|schedules)/"
    r"(?P<name>[a-z0-9_-]+|<name>)\.toml|(?P<app>fleet\.toml))(?P<rest>.*)$"
)
_ENV = re.compile(r'"([A-Z][A-Z0-9_]{2,})"')


def _stub(root: Path, kind: str, name: str, body: str) -> None:
    path = root / kind / f"{name}.toml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


@pytest.mark.parametrize("example", toml_examples(), ids=lambda e: e.where)
def test_every_toml_example_loads(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = example.text.splitlines()[0]
    header = _HEADER.match(first)
    assert header, (
        f"{example.where}: a TOML example starts with the file it is, like "
        f"'# config/agents/support.toml' (or '… (excerpt)'), not {first!r}"
    )
    kind = header["kind"] or "fleet.toml"
    name = (header["name"] or "fleet").replace("<name>", "example")
    text = example.text
    data = tomllib.loads(text)
    if header["rest"].strip().startswith("(excerpt"):
        missing = [f"{k} = {v}\n" for k, v in MINIMAL[kind].items() if k not in data]
        text = "".join(missing) + text
        data = tomllib.loads(text)
    root = tmp_path / "config"
    _stub(root, "agents", "support", 'model = "echo"\n')
    _stub(root, "deployments", "support", 'agent = "support"\n')
    path = root / "fleet.toml" if kind == "fleet.toml" else root / kind / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    # what the example refers to exists (as the smallest files), and its variables are set
    if kind == "deployments":
        _stub(root, "agents", data["agent"], 'model = "echo"\n')
    for target in data.get("delegates", []) if kind == "agents" else []:
        _stub(root, "deployments", target, 'agent = "support"\n')
    if kind in ("triggers", "schedules") and "deployment" in data:  # ([event] triggers: none)
        _stub(root, "deployments", data["deployment"], 'agent = "support"\n')
    if kind == "callers":
        for target in set(data.get("deployments", [])) - {"*"}:
            _stub(root, "deployments", target, 'agent = "support"\n')
        if data["source"].startswith("webhook:"):
            _stub(root, "triggers", data["source"][8:], 'deployment = "support"\n')
    for variable in _ENV.findall(text):
        monkeypatch.setenv(variable, "an-example-value-0123456789")

    loaded = load_config(root)

    if kind != "fleet.toml":
        assert name in getattr(loaded, kind), example.where


def test_examples_are_found() -> None:
    where = {e.source.relative_to(ROOT).as_posix() for e in toml_examples()}
    assert {"README.md", "docs/configuration.md", "docs/triggers.md"} <= where


# -- the layout page ----------------------------------------------------------------------------


def _layout_entries() -> tuple[list[str], list[str]]:
    """The names the Layout page's tree gives: (inside fleet/, at the repository's root)."""
    block = re.search(r"```\n(fleet/.*?)```", page("reference/layout.md"), re.S)
    assert block, "docs/reference/layout.md lost its tree"
    inside, top = [], []
    for line in block.group(1).splitlines():
        if m := re.match(r"^  (\S+)\s", line):
            inside.append(m.group(1))
        elif m := re.match(r"^(\S+)\s", line):
            top.append(m.group(1))
    return inside, top


def test_the_layout_names_every_room_of_the_package() -> None:
    inside, _ = _layout_entries()
    rooms = {p.parent.name for p in (ROOT / "fleet").glob("*/__init__.py")}
    named = {e.rstrip("/…") for e in inside if e.endswith(("/", "…"))}
    assert rooms <= named, f"rooms missing from the layout: {sorted(rooms - named)}"


def test_everything_the_layout_names_exists() -> None:
    inside, top = _layout_entries()
    for entry in inside:
        if entry.endswith("…"):  # a room named by its stem (cli…: cli/ or cli_*.py)
            stem = entry.rstrip("…")
            assert list((ROOT / "fleet").glob(f"{stem}*")), entry
        else:
            assert (ROOT / "fleet" / entry).exists(), entry
    for entry in top:
        assert (ROOT / entry).exists(), entry


def test_make_test_builds_the_site_strictly() -> None:
    """``make test`` (what CI runs) builds the site with --strict, and lets its warnings show:
    ``--quiet`` would hide the warnings that --strict counts, and pass a broken link."""
    makefile = (ROOT / "Makefile").read_text()
    test = re.search(r"^test:(.*)$", makefile, re.M)
    assert test and "docs" in test.group(1).split()
    docs = re.search(r"^docs:\n((?:\t.*\n)+)", makefile, re.M)
    assert docs and "mkdocs build --strict" in docs.group(1)
    assert "--quiet" not in docs.group(1) and " -q" not in docs.group(1)
