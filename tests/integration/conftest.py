"""``rt`` and ``fleet`` for a fleet test file that defines ``shared_settings`` (from
``tests.support.fleet.fleet_settings``): the test's runtime and its workers run with the same
settings. A file with an ``rt`` or ``fleet`` of its own uses that instead. ``receiver`` serves
the delivery tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.runtime import Runtime
from tests.support.fleet import Fleet, running_fleet, runtime_for
from tests.support.receiver import Receiver


@pytest.fixture
def rt(shared_settings: dict[str, Any]) -> Iterator[Runtime]:
    """The test's own runtime, closed after."""
    with runtime_for(shared_settings) as runtime:
        yield runtime


@pytest.fixture
def fleet(tmp_path: Path, shared_settings: dict[str, Any]) -> Iterator[Fleet]:
    """No process yet: each test starts the workers and sweepers it needs (killed after it: a
    test that looks at a graceful stop stops them itself)."""
    with running_fleet(tmp_path, **shared_settings) as f:
        yield f
        f.kill()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver for deliveries (``tests.support.receiver``), stopped after."""
    recv = Receiver().start()
    yield recv
    recv.stop()
