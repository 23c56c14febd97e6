"""The ``fleet`` command (Typer): a module per command group; :func:`main` is the entry point."""

from fleet.cli.app import app, main

__all__ = ["app", "main"]
