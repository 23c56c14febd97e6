"""What a run does at worker shutdown (pure decisions)."""

from __future__ import annotations

import pytest

from fleet.domain.shutdown import Action, Where, decide


@pytest.mark.parametrize(
    ("stopping", "where", "cancel", "grace_over", "expected"),
    [
        # not stopping: runs as always
        (False, "boundary", False, False, "go_on"),
        (False, "step", False, False, "go_on"),
        (False, "step", False, True, "go_on"),
        (False, "done", False, False, "settle"),
        # stopping: the step under way finishes within the grace period ...
        (True, "step", False, False, "go_on"),
        (True, "step", True, False, "go_on"),
        # ... then the task is handed back at the next boundary
        (True, "boundary", False, False, "hand_back"),
        (True, "boundary", False, True, "hand_back"),
        # a cancel requested meanwhile ends the run there (no further step): it settles
        (True, "boundary", True, False, "go_on"),
        # a run with its outcome settles: the task finishes once, here
        (True, "done", False, False, "settle"),
        (True, "done", False, True, "settle"),
        # a step still running when the grace period ends is abandoned
        (True, "step", False, True, "abandon"),
        (True, "step", True, True, "abandon"),
    ],
)
def test_decide(
    stopping: bool, where: Where, cancel: bool, grace_over: bool, expected: Action
) -> None:
    assert decide(stopping=stopping, where=where, cancel=cancel, grace_over=grace_over) == expected
