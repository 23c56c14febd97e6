"""``python -m fleet.cli``: the ``fleet`` command."""

from fleet.cli.app import main

raise SystemExit(main())
