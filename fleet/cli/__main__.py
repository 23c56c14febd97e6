"""``python -m fleet.cli``: the ``fleet`` command."""

from fleet.cli.app import main

if __name__ == "__main__":
    raise SystemExit(main())
