"""The docs site's pages and generators, for the tests that check them against the code."""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
PLUGINS = DOCS / "plugins"


def page(path: str) -> str:
    """A page's Markdown, by its path under docs/ (``agents/memory.md``)."""
    return (DOCS / path).read_text()


def pages() -> list[Path]:
    """Every Markdown page written by hand (the generated ones are not files)."""
    return sorted(p for p in DOCS.rglob("*.md") if PLUGINS not in p.parents)


def plugin(name: str) -> ModuleType:
    """A module of docs/plugins (``config_reference``), imported as the MkDocs hook does."""
    if str(PLUGINS) not in sys.path:
        sys.path.insert(0, str(PLUGINS))
    return importlib.import_module(name)


@dataclass(frozen=True)
class Example:
    """A fenced ```toml block of a page: where it stands and what it says."""

    source: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^```toml\n(.*?)^```", re.M | re.S)


def toml_examples() -> list[Example]:
    """Every ```toml block in README.md and the docs pages."""
    found = []
    for source in [ROOT / "README.md", *pages()]:
        text = source.read_text()
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 2
            found.append(Example(source, line, m.group(1)))
    return found
