"""What a run does when its worker is asked to stop (SIGTERM, Ctrl-C): pure decisions.

A worker that is stopping takes no new task. A run it holds goes on until its current step (a
model call or a tool call) has finished and been journaled, then hands its task back at that step
boundary: the task waits as ``interrupted`` (claimable at once, its frozen context and journal
kept) and another worker resumes it by replaying the journal. A step still running when the grace
period ends is abandoned: the task is handed back from outside the run, and the journal decides
what the next worker runs again (a model call, or a tool call that was in flight: re-run if its
tool is safe to retry, else reported as unknown).
"""

from __future__ import annotations

from typing import Literal

#: ``boundary``: between two steps (what finished is stored); ``step``: a model or tool call is
#: under way; ``done``: the run has its outcome (a final reply, a failure) and is settling.
Where = Literal["boundary", "step", "done"]

#: ``go_on``: keep running; ``settle``: store the outcome as usual; ``hand_back``: stop here and
#: give the task back to the queue; ``abandon``: give it back without waiting for the step.
Action = Literal["go_on", "settle", "hand_back", "abandon"]

#: The run's error when its task was handed back at a step boundary.
HANDED_BACK = (
    "handed back at worker shutdown after its last finished step; resumes from its journal"
)
#: The run's error when its step was still running when the grace period ended.
ABANDONED = (
    "abandoned at worker shutdown (grace period over mid-step); the journal decides what re-runs"
)


def decide(
    *, stopping: bool, where: Where, cancel: bool = False, grace_over: bool = False
) -> Action:
    """What a run does now: ``cancel`` is a cancel requested for its task, ``grace_over`` whether
    the shutdown's grace period has run out."""
    if where == "done":
        return "settle"  # the outcome exists: storing it is what finishes the task once
    if not stopping:
        return "go_on"
    if where == "boundary":
        # A cancel ends the run right here without another step: let it settle as cancelled.
        return "go_on" if cancel else "hand_back"
    return "abandon" if grace_over else "go_on"
