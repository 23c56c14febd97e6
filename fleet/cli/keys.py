"""``fleet keys``: what a caller file needs of an API key (``key_sha256``), without the key
ever reaching the command line (shell history, ``ps``)."""

from __future__ import annotations

import getpass
import sys
from typing import TextIO

import typer

from fleet.errors import InputError

keys_app = typer.Typer(help="API keys of callers (config/callers).", no_args_is_help=True)


@keys_app.command(
    "hash", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def hash_cmd(ctx: typer.Context) -> None:
    """Print the SHA-256 of a key read from stdin (or typed at a hidden prompt), for
    ``key_sha256`` in config/callers; the key is never an argument."""
    from fleet.api.auth import hash_key

    if ctx.args:  # (not echoed: it may well be the key)
        raise InputError(
            "fleet keys hash takes no argument: pipe the key in (fleet keys hash < key.txt) or "
            "type it at the prompt, so that it stays out of shell history"
        )
    sys.stdout.write(hash_key(read_key(sys.stdin)) + "\n")


def read_key(stdin: TextIO) -> str:
    """The key: typed at a hidden prompt when stdin is a terminal, else stdin's one line.

    Surrounding whitespace (``echo``'s newline) is left out, as the API does with the key a
    request sends."""
    text = getpass.getpass("API key (not shown): ") if stdin.isatty() else stdin.read()
    key = text.strip()
    if not key:
        raise InputError("no key given: pipe it in (fleet keys hash < key.txt) or type it")
    if "\n" in key or "\r" in key:
        raise InputError("the key is more than one line; give one key, on one line")
    return key
