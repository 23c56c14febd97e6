"""Callers with API keys: their files in a config folder (``callers/<name>.toml``, each with the
SHA-256 of its key), an embedded SQLite runtime built on such a config, and the header a key
authenticates with. ``callers`` maps a caller's name to the body of its file (without the
key), ``keys`` its name to its key."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleet.config import Settings
from fleet.runtime import Runtime, build
from tests.conftest import write_config


def write_callers(config: Path, callers: Mapping[str, str], keys: Mapping[str, str]) -> Path:
    """``config/callers/<name>.toml`` for each caller: its body and its key's digest."""
    folder = config / "callers"
    folder.mkdir()
    for name, body in callers.items():
        digest = hashlib.sha256(keys[name].encode()).hexdigest()
        (folder / f"{name}.toml").write_text(f'{body}key_sha256 = "{digest}"\n')
    return config


def keyed_runtime(
    tmp_path: Path,
    callers: Mapping[str, str] | None = None,
    keys: Mapping[str, str] | None = None,
    agents: dict[str, str] | None = None,
    deployments: dict[str, str] | None = None,
    folders: Mapping[str, Mapping[str, str]] | None = None,
    **settings: Any,
) -> Runtime:
    """An embedded runtime (home ``tmp_path/home``) on ``tmp_path/config``: ``write_config``'s
    agents and deployments, these callers (none, not even the folder, when ``None``), and any
    other ``folders`` (``{"tenants": {"acme": body}}``: ``tenants/acme.toml``); ``settings``
    on top of the home and config."""
    config = write_config(tmp_path / "config", agents, deployments)
    if callers is not None:
        assert keys is not None, "callers need their keys"
        write_callers(config, callers, keys)
    for folder, files in (folders or {}).items():
        (config / folder).mkdir()
        for name, body in files.items():
            (config / folder / f"{name}.toml").write_text(body)
    return build(Settings(home=tmp_path / "home", config_dir=config, **settings))


def auth(keys: Mapping[str, str], name: str) -> dict[str, str]:
    """The header that authenticates as caller ``name`` (with its key in ``keys``)."""
    return {"Authorization": f"Bearer {keys[name]}"}
