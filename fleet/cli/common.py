"""What every ``fleet`` command shares: its consoles, exit codes, one-line failures, JSON out."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: Exit codes: 0 ok, 1 failure (task failed, service down), 2 bad input.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"fleet: {message}", markup=False)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
