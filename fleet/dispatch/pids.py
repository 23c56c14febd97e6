"""Is a process on this host still running? (Used to tell dead holders and writers apart.)"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True unless the process is known to be gone (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
