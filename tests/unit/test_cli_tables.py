"""Fitting a table to the width: shorter forms first, then columns go; headers never split."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fleet.cli.tables import GAP, Col, fit, print_table

COLS = (
    Col("id", "whole"),
    Col("key", shrink=1),
    Col("when", "whole", short=lambda s: s[5:], shorten=0, drop=2),
    Col("note", "cut", floor=6, drop=1),
)
ROWS = [("a1", "ticket-4711", "2026-11-30 06:12", "a note of some length")]


@pytest.mark.parametrize(
    ("room", "shown", "widths", "when"),
    [
        # everything at its natural width
        (60, ["id", "key", "when", "note"], [2, 11, 16, 21], "2026-11-30 06:12"),
        # the cut column narrows first (to its floor), then the folding key (to its header)
        (46, ["id", "key", "when", "note"], [2, 11, 16, 11], "2026-11-30 06:12"),
        (38, ["id", "key", "when", "note"], [2, 8, 16, 6], "2026-11-30 06:12"),
        (33, ["id", "key", "when", "note"], [2, 3, 16, 6], "2026-11-30 06:12"),  # the floors
        # below the floors: the shorter form first, then the lowest `drop` goes
        (32, ["id", "key", "when", "note"], [2, 7, 11, 6], "11-30 06:12"),
        (26, ["id", "key", "when"], [2, 9, 11], "11-30 06:12"),
        (16, ["id", "key"], [2, 11], None),
        # narrower than what may never go: Rich cuts what it must
        (5, ["id", "key"], [2, 3], None),
    ],
)
def test_fit(room, shown, widths, when):
    fitted = fit(COLS, ROWS, room)
    assert [c.name for c in fitted.cols] == shown
    assert list(fitted.widths) == widths
    if room >= 16:
        assert sum(fitted.widths) + GAP * (len(shown) - 1) <= room
    assert fitted.left_out == tuple(c.name for c in COLS if c.name not in shown)
    if when is not None:
        assert fitted.rows[0][shown.index("when")] == when
    assert all(
        w >= len(c.name) for c, w in zip(fitted.cols, fitted.widths, strict=True) if room >= 16
    )


def test_printed_headers_stay_whole_and_cells_literal():
    rows = [("[b]x[/b]", "a-rather-long-key-that-folds", "2026-11-30 06:12", "a note")]
    buffer = io.StringIO()
    Console(file=buffer, width=40, highlight=False).print(fit(COLS, rows, 40).table())
    lines = buffer.getvalue().splitlines()
    assert lines[0].split() == ["id", "key", "when", "note"]
    assert lines[1].startswith("[b]x[/b]")
    assert max(len(line) for line in lines) <= 40


def test_shorter_forms_and_drops_go_in_their_one_order():
    """A column that may go first goes before a date loses its year (and nothing more gives
    once the rest fits)."""
    cols = (
        Col("id", "whole"),
        Col("when", "whole", short=lambda s: s[5:], shorten=1),
        Col("error", "whole", drop=0),
    )
    rows = [("a1", "2026-11-30 06:12", "a long error that takes room")]
    fitted = fit(cols, rows, 24)
    assert [c.name for c in fitted.cols] == ["id", "when"]
    assert fitted.rows == (("a1", "2026-11-30 06:12"),)
    assert fitted.left_out == ("error",)
    tighter = fit(cols, rows, 15)
    assert tighter.rows == (("a1", "11-30 06:12"),)


def _console(buffer: io.StringIO, *, terminal: bool) -> Console:
    return Console(
        file=buffer,
        width=40,
        highlight=False,
        soft_wrap=True,
        force_terminal=terminal,
        color_system=None,
    )


def test_in_a_pipe_each_row_is_one_line_with_every_value_whole():
    """Issue 45: in a pipe a key wrapped mid-word (``api:acme:secr`` / ``et-a``), so ``grep``
    found nothing. However wide the rows, each is one line, each value whole."""
    key = "api:acme:a-rather-long-key-that-would-fold"
    rows = [("a1", key, "2026-11-30 06:12", "a note of some length " * 4), ("b2", "k", "-", "")]
    buffer = io.StringIO()
    print_table(_console(buffer, terminal=False), COLS, rows)
    lines = buffer.getvalue().splitlines()
    assert lines[0].split() == ["id", "key", "when", "note"]
    assert len(lines) == 3 and [line for line in lines if key in line] == [lines[1]]
    assert lines[1].endswith(rows[0][3].rstrip()) and "2026-11-30 06:12" in lines[1]
    assert lines[2].split() == ["b2", "k", "-"]


def test_on_a_terminal_a_value_is_cut_never_split():
    key = "api:acme:a-rather-long-key-that-would-fold"
    rows = [("a1", key, "2026-11-30 06:12", "a note")]
    buffer = io.StringIO()
    fitted = print_table(_console(buffer, terminal=True), COLS, rows)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and max(len(line) for line in lines) <= 40
    shown = fitted.rows[0][list(c.name for c in fitted.cols).index("key")]
    cell = lines[1].split()[1]
    assert cell.endswith("…") and key.startswith(cell[:-1]), lines
    assert shown == key  # (the data is whole; only its cell is cut)
