"""``with`` for the SDK's objects that hold threads or connections: leaving the block closes."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """``with x:`` closes ``x`` at the end of the block."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
