"""Keep the garbage collector's full passes short in long-running processes.

A worker or API process holds a few hundred thousand objects from its imports and start-up (the
models' tokenizers, the agents' config, the app's routes), none of which ever becomes garbage.
Python's oldest-generation pass walks all of them: about 50 ms on the development machine, now
and then in the middle of a drain or a request, which was most of the dispatch latency's p99.
Frozen once start-up is done, they are left out of every later pass. Reference counting still
frees any of them that is dropped; only a reference cycle among them would now stay until the
process ends.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """Exempt everything alive now from later passes (cheap: no pass runs here)."""
    gc.freeze()


#: The youngest generation's threshold in an API process (Python's default is 700).
API_YOUNG_THRESHOLD = 10_000


def fewer_promotions() -> None:
    """Collect the youngest generation every ``API_YOUNG_THRESHOLD`` allocations, not 700.

    Under load an API process has dozens of requests in flight, and each young pass finds their
    objects alive and moves them up a generation; they die a moment later, but what reached the
    oldest one counts towards its next full pass, which walks every object alive, the idle
    event streams' included (~175 each). With passes ~14 times rarer, far fewer in-flight
    objects are caught: full passes come about 10 times less often, young ones cost about what
    they did in all (each walks more objects, but there are fewer of them).
    """
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(API_YOUNG_THRESHOLD, middle, oldest)
