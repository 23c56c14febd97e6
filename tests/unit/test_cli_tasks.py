"""How ``fleet tasks`` prints (80 columns, user text taken literally) and resolves id prefixes."""

from __future__ import annotations

import io
import uuid

import pytest
from rich.console import Console

from fleet.cli.tasks import AMBIGUOUS_SHOWN, resolve_id, show_task, show_task_list
from fleet.domain import ids
from fleet.errors import InputError, NotFound

MARKUP = "[bold]x[/bold] :thumbs_up: [red]"


def view(n: int = 1, **kw: object) -> dict:
    base = {
        "id": str(uuid.UUID(int=n * 0x1111_0000_0000_0000_0000_0000_0000_0001)),
        "deployment": "support",
        "conversation": "api:ticket-4711",
        "seq": n,
        "status": "succeeded",
        "attempts": 1,
        "maxAttempts": 3,
        "createdAt": "2026-11-30T06:12:34.123456Z",
        "startedAt": "2026-11-30T06:12:34.223456Z",
        "finishedAt": "2026-11-30T06:12:35.123456Z",
        "labels": {"team": "[b]ops[/b]"},
        "input": [{"type": "text", "text": "It was order 1234"}],
        "reply": f"echo: It was order 1234 [history: {2 * (n - 1)}]",
        "error": None,
    }
    return base | kw


def printed(show, data, width: int) -> list[str]:
    buffer = io.StringIO()
    show(
        Console(
            file=buffer,
            width=width,
            highlight=False,
            soft_wrap=True,
            force_terminal=True,
            color_system=None,
        ),
        data,
    )
    return [line.rstrip() for line in buffer.getvalue().splitlines()]


def test_show_prints_user_text_literally():
    task = view(input=[{"type": "text", "text": MARKUP}], reply=f"echo: {MARKUP} [history: 0]")
    text = "\n".join(printed(show_task, task, 80))
    assert f"input         {MARKUP}" in text
    assert f"reply         echo: {MARKUP} [history: 0]" in text
    assert "team=[b]ops[/b]" in text


def test_show_folds_long_values_instead_of_cutting_them():
    url = "https://example.com/" + "a" * 120
    lines = printed(show_task, view(reply=url), 80)
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if line.startswith("reply "))
    value = lines[start].index("https")
    assert "".join(line[value:] for line in lines[start:]) == url


HEADERS = ["id", "deployment", "conversation", "seq", "status", "created", "reply/error"]


def cells(lines: list[str]) -> list[dict[str, str]]:
    """Each row's cells read back from the printed table, folded lines joined again (the
    headers are the columns shown, each a whole word)."""
    shown = lines[0].split()
    assert [h for h in HEADERS if h in shown] == shown, lines[0]  # whole, in order
    starts = [lines[0].index(h) if h != "seq" else lines[0].index(" seq") for h in shown]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    rows: list[dict[str, str]] = []
    for line in lines[1:]:
        parts = [line[a:b].strip() for a, b in bounds]
        if parts[0]:  # a new row; otherwise the folded rest of the previous one
            rows.append(dict(zip(shown, parts, strict=True)))
        else:
            for h, part in zip(shown, parts, strict=True):
                assert h in ("deployment", "conversation") or not part, (h, line)  # only keys fold
                rows[-1][h] += part
    return rows


#: The widest rows a list may hold: a 4-digit seq, `interrupted`, long keys.
WIDE = [
    view(1),
    view(2, status="interrupted", reply=None, error="lost its worker", seq=1234),
    view(3, conversation="webhook:github:acme/app#4711", deployment="deployment-long"),
]


@pytest.mark.parametrize(
    ("width", "views", "headers", "created"),
    [
        (120, WIDE, HEADERS, "2026-11-30 06:12:34"),
        (100, WIDE, HEADERS, "2026-11-30 06:12:34"),
        # narrow: the created time loses its year (on one line still), then a column goes
        (80, [view(1), view(2)], HEADERS, "11-30 06:12:34"),
        (80, WIDE, [h for h in HEADERS if h != "deployment"], "11-30 06:12:34"),
        (60, WIDE, ["id", "conversation", "seq", "status", "created"], "11-30 06:12:34"),
    ],
)
def test_list_fits_the_width_never_splitting_a_header_or_a_time(width, views, headers, created):
    """Issue 33: at 80 columns headers split mid-word and the created time took two lines.
    Issue 45: a key is never split either: on a terminal one too long ends in "…"."""
    lines = printed(show_task_list, views, width)
    assert max(len(line) for line in lines) <= width
    assert lines[0].split() == headers
    assert len(lines) == 1 + len(views)  # one line per task
    got = cells(lines)
    assert [(r["id"], r["seq"], r["status"], r["created"]) for r in got] == [
        (ids.short(v["id"]), str(v["seq"]), v["status"], created) for v in views
    ]
    for row, v in zip(got, views, strict=True):
        assert _whole_or_cut(row["conversation"], v["conversation"])
        if "deployment" in headers:
            assert _whole_or_cut(row["deployment"], v["deployment"])
        if "reply/error" in headers:
            assert _whole_or_cut(row["reply/error"], v["reply"] or v["error"])


def _whole_or_cut(cell: str, value: str) -> bool:
    return cell == value or (cell.endswith("…") and value.startswith(cell[:-1]))


def test_list_prints_user_text_literally():
    lines = printed(show_task_list, [view(reply="echo: [b]x[/b] [history: 0]")], 120)
    assert "echo: [b]x[/b] [history: 0]" in "\n".join(lines)
    narrow = printed(show_task_list, [view(reply="echo: [b]x[/b] [history: 0]")], 80)
    assert "echo: [b]x" in "\n".join(narrow)  # cut with an ellipsis, but literally


def test_list_summary_is_one_line():
    lines = printed(show_task_list, [view(reply="first line\nsecond line")], 120)
    assert len(lines) == 2 and "first line second line" in lines[1]


def test_list_of_nothing_prints_the_header():
    assert printed(show_task_list, [], 80)[0].startswith("id")


class FakeTasks:
    """Only ``find``: the ids it holds that start with a prefix."""

    def __init__(self, *task_ids: str) -> None:
        self.ids = list(task_ids)
        self.asked: list[tuple[str, int]] = []

    def find(self, prefix: ids.IdPrefix, limit: int) -> list[str]:
        self.asked.append((prefix.hex, limit))
        return [i for i in self.ids if i.replace("-", "").startswith(prefix.hex)][:limit]


A = "67bdb609-1111-4000-8000-0000000000a1"
B = "67bdb609-2222-4000-8000-0000000000b2"


def test_a_whole_id_is_not_looked_up():
    tasks = FakeTasks()
    assert resolve_id(tasks, uuid.UUID(A)) == uuid.UUID(A)  # type: ignore[arg-type]
    assert tasks.asked == []


def test_a_unique_prefix_resolves():
    tasks = FakeTasks(A, B)
    assert resolve_id(tasks, ids.hex_prefix("67bdb609-1")) == uuid.UUID(A)  # type: ignore[arg-type]
    assert tasks.asked == [("67bdb6091", AMBIGUOUS_SHOWN + 1)]


def test_no_match_is_not_found():
    with pytest.raises(NotFound, match="no task with an id starting '67bdb60a'"):
        resolve_id(FakeTasks(A, B), ids.hex_prefix("67bdb60a"))  # type: ignore[arg-type]


def test_an_ambiguous_prefix_lists_the_matches():
    with pytest.raises(InputError) as info:
        resolve_id(FakeTasks(A, B), ids.hex_prefix("67BDB6"))  # type: ignore[arg-type]
    assert info.value.message == (
        f"task id prefix '67BDB6' is ambiguous: it matches {A}, {B}; give more characters"
    )


def test_an_ambiguous_prefix_lists_at_most_ten():
    many = [f"67bdb609-0000-4000-8000-{n:012d}" for n in range(15)]
    with pytest.raises(InputError) as info:
        resolve_id(FakeTasks(*many), ids.hex_prefix("67bdb609"))  # type: ignore[arg-type]
    message = info.value.message
    assert message.count("67bdb609-") == AMBIGUOUS_SHOWN == 10
    assert message.endswith(" and more; give more characters")
