"""MkDocs hooks: the reference pages are generated from the code at every build.

``reference/configuration.md`` comes from fleet's pydantic config models and
``reference/http.md`` from the API's OpenAPI document; neither is committed, so neither can go
stale. (mkdocs.yml names this file under ``hooks:``.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).parent))

import config_reference
import http_reference


def generated() -> dict[str, str]:
    """page path → its Markdown, for every generated page."""
    return {
        config_reference.PAGE: config_reference.render(),
        http_reference.PAGE: http_reference.render(),
    }


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the generated pages to the site (before the navigation is built from the files)."""
    for path, text in generated().items():
        files.append(File.generated(config, path, content=text))
    return files
