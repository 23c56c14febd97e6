"""How fleet starts a stdio MCP server: under a guard that ends it with its process.

A stdio server is a child of the process that runs the agent (a worker's pool process, the
embedded server). Closing the connection ends it; but a process killed outright (SIGKILL, the
OOM killer, a pool process killed with its worker) closes nothing, and a server that does not
exit when its stdin closes would live on as an orphan. On Linux each server is therefore
started through a small launcher that asks the kernel to SIGKILL it when its parent goes
(``PR_SET_PDEATHSIG``, as Celery does for its own pool processes) and then becomes the server
(``exec``: same process id, same environment). The launcher costs about 15 ms per start.

Its stderr goes to a pipe of which fleet keeps the last few kilobytes, quoted when the server
fails to start: a server kept up for hours may log without end, and nothing piles up on disk.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from fleet.agents import aio

#: The launcher: set the parent-death signal, check the parent is still there (it may have gone
#: before the signal was set), then become the server. ``-I -S``: no site, no user variables.
LAUNCHER = (
    "import ctypes,os,sys\n"
    "ctypes.CDLL(None).prctl(1, 9)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "os.getppid() == int(sys.argv[1]) or os._exit(70)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)
#: How much of a server's stderr is kept (its end), for the message of a failed start.
STDERR_KEEP_BYTES = 4096


def guarded(program: str, args: Sequence[str], env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The command line that starts ``program`` so that it dies with this process.

    ``program`` is looked up on the server's PATH here (``env``: its variables over fleet's),
    so that one that does not exist fails as it would without the launcher: FileNotFoundError
    naming it. A path (``./bin/server``) is left to the launcher, which starts in the server's
    folder. Elsewhere than Linux the command line is unchanged.
    """
    if not sys.platform.startswith("linux"):
        return program, list(args)
    found = program
    if os.sep not in program:
        path = env.get("PATH", os.environ.get("PATH", os.defpath))
        found = shutil.which(program, path=path) or ""
        if not found:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return sys.executable, ["-I", "-S", "-c", LAUNCHER, str(os.getpid()), found, *args]


class StderrTail:
    """A stdio server's stderr: a pipe read on the background loop, its last bytes kept."""

    def __init__(self) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        self._read_fd = read
        self._kept = bytearray()
        self._closed = False
        #: What the server's stderr is connected to (the SDK's ``errlog``).
        self.sink: TextIO = os.fdopen(write, "w", encoding="utf-8", errors="replace")
        aio.loop().call_soon_threadsafe(self._watch)

    def _watch(self) -> None:
        if not self._closed:
            asyncio.get_running_loop().add_reader(self._read_fd, self._drain)

    def _drain(self) -> None:
        """Read what the pipe holds (on the loop); keep the end."""
        while True:
            try:
                data = os.read(self._read_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                asyncio.get_running_loop().remove_reader(self._read_fd)
                return
            self._kept += data
            del self._kept[:-STDERR_KEEP_BYTES]

    def text(self) -> str:
        """What the server wrote last (after reading whatever the pipe still holds)."""

        async def drained() -> str:
            if not self._closed:
                self._drain()
            return self._kept.decode("utf-8", errors="replace")

        try:
            return aio.run(drained(), timeout_s=5.0)
        except TimeoutError:
            return ""

    def close(self) -> None:
        """Stop reading; close both ends (the server is gone or going)."""
        self.sink.close()

        def stop() -> None:
            if self._closed:
                return
            self._closed = True
            asyncio.get_running_loop().remove_reader(self._read_fd)
            os.close(self._read_fd)

        aio.loop().call_soon_threadsafe(stop)
