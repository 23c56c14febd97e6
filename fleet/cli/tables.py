"""Tables that fit the terminal without breaking what must stay whole, and whole rows in a pipe.

:func:`print_table` prints them. On a terminal, every cell is one line and no value is split: a
header never is, a ``whole`` column (ids, times, statuses) keeps each cell whole, and a ``cut`` or
``fold`` column (keys, previews) ends a value too long for it in "…" (a ``fold`` one is never
narrower than its header, a ``cut`` one than its ``floor``). When even the narrowest of them do not
fit, columns take their shorter form or are left out, in the order their ``shorten`` and ``drop``
say; the caller says where what went shows instead. Anywhere else (a pipe, a file) each row is one
line with every value whole, however wide, so ``fleet tasks ls | grep api:acme:secret-a`` finds what
``--json`` has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

Mode = Literal["whole", "fold", "cut"]

#: Between two columns: Rich's padding of one cell on each side (no box, no edge padding).
GAP = 2


@dataclass(frozen=True, slots=True)
class Col:
    """One column and what it may give up to fit."""

    name: str
    mode: Mode = "fold"
    #: The narrowest a fold or cut column gets (never narrower than its header).
    floor: int = 0
    #: Narrowed before columns of a higher ``shrink`` (within one, the widest first).
    shrink: int = 0
    #: May be left out when even the floors do not fit, lowest first; None: always shown.
    drop: int | None = None
    #: A shorter form of a cell (a date without its year), and when to take it: in one order
    #: with the ``drop`` of every column.
    short: Callable[[str], str] | None = None
    shorten: int = 0
    justify: Literal["left", "right"] = "left"


@dataclass(frozen=True, slots=True)
class Fitted:
    """The columns shown, each with its width, and the rows as shown (shorter forms taken)."""

    cols: tuple[Col, ...]
    widths: tuple[int, ...]
    rows: tuple[tuple[str, ...], ...]
    #: Names of the columns left out.
    left_out: tuple[str, ...]

    def table(self) -> Table:
        """The table to print on a terminal: each cell on one line, too long ones cut ("…")."""
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col, width in zip(self.cols, self.widths, strict=True):
            table.add_column(
                col.name, width=width, no_wrap=True, overflow="ellipsis", justify=col.justify
            )
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: never read as Rich markup
        return table

    def lines(self) -> list[str]:
        """The header and one line per row, each value whole (as in a pipe)."""
        out = []
        for row in ((c.name for c in self.cols), *self.rows):
            cells = [
                " ".join(cell.splitlines()).ljust(w)
                if c.justify == "left"
                else " ".join(cell.splitlines()).rjust(w)
                for c, w, cell in zip(self.cols, self.widths, row, strict=True)
            ]
            out.append((" " * GAP).join(cells).rstrip())
        return out


def print_table(out: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> Fitted:
    """Print ``rows``: fitted to a terminal (see the module's docstring), else whole, one row
    per line. Returns what was shown (the columns left out on a narrow terminal)."""
    if out.is_terminal:
        fitted = fit(cols, rows, out.width)
        out.print(fitted.table())
        return fitted
    whole = fit(cols, [[" ".join(c.splitlines()) for c in row] for row in rows], None)
    for line in whole.lines():
        out.print(Text(line), crop=False, soft_wrap=True)
    return whole


def _widest(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def fit(cols: Sequence[Col], rows: Sequence[Sequence[str]], room: int | None) -> Fitted:
    """The columns and widths that fit ``room`` cells (see the module's docstring); None:
    every column at its natural width, nothing shortened or left out."""
    cols = list(cols)
    data = [list(row) for row in rows]
    shown = list(range(len(cols)))

    def natural(i: int) -> int:
        return max([cell_len(cols[i].name), *(_widest(row[i]) for row in data)])

    def floor(i: int) -> int:
        col = cols[i]
        if col.mode == "whole":
            return natural(i)
        return min(natural(i), max(cell_len(col.name), col.floor))

    def need() -> int:
        return sum(floor(i) for i in shown) + GAP * (len(shown) - 1)

    # What may give, in order: (priority, shorten first at a tie, column).
    gives = sorted(
        [(c.shorten, 0, i) for i, c in enumerate(cols) if c.short is not None]
        + [(c.drop, 1, i) for i, c in enumerate(cols) if c.drop is not None]
    )
    for _, drop, i in gives:
        if room is None or need() <= room:
            break
        if drop:
            shown.remove(i)
            continue
        make_short = cols[i].short
        assert make_short is not None
        for row in data:
            row[i] = make_short(row[i])
        cols[i] = replace(cols[i], short=None)
    # (still too wide only when narrower than every floor: Rich cuts what it must)
    widths = {i: natural(i) for i in shown}
    for level in sorted({cols[i].shrink for i in shown}):
        group = [i for i in shown if cols[i].shrink == level]
        while room is not None and sum(widths.values()) + GAP * (len(shown) - 1) > room:
            slack = [(widths[i], i) for i in group if widths[i] > floor(i)]
            if not slack:
                break
            widths[max(slack)[1]] -= 1
    return Fitted(
        cols=tuple(cols[i] for i in shown),
        widths=tuple(widths[i] for i in shown),
        rows=tuple(tuple(row[i] for i in shown) for row in data),
        left_out=tuple(c.name for i, c in enumerate(cols) if i not in shown),
    )
