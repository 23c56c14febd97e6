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
