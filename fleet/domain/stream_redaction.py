"""Redaction of text that arrives in pieces (a model reply streamed to watchers as token deltas).

Invariant: whatever the chunking, the pieces a :class:`StreamRedactor` emits (its final
:meth:`~StreamRedactor.flush` included) concatenate to exactly ``redactor.text(whole_text)``,
what the journal stores. So a watcher never sees a secret the journal hides, not even one split
across chunks, and never sees text the journal shows differently.

How: the text not yet emitted is held; after each chunk the held text is cut at the last *safe
cut* and the part before it is emitted as ``redactor.text(part)``. A cut at ``c`` is safe when
``text(s) == text(s[:c]) + text(s[c:])`` for every continuation, which these conditions give:

* it follows a space, tab or newline. Only PEM blocks, known secrets, ``Bearer`` and
  ``key: value`` span those (tokens, URL credentials and webhook paths contain none, and every
  pattern's lookbehind sees the same at the start of ``s[c:]`` as after whitespace);
* no known secret ends at ``c`` or starts before it and could run on
  (:meth:`Redactor.ends_in_secret`);
* no PEM block is open: everything from an unterminated ``-----BEGIN … PRIVATE KEY-----`` is
  held until its END line (or the flush, where it is redacted to the end as the journal does);
* after a space or tab, nothing at the end of the line is waiting for what comes next
  (``_OPEN``): a ``-----BEGIN`` line not yet whole, ``Bearer`` and its spaces, a key ending in a
  secret word with its quote, spaces, separator, or a value that is not over yet (a quoted one
  until its closing quote, a header one such as ``Authorization:`` until the end of the line);
* the same holds of ``text(s[:c])``, which ends with the same whitespace. This catches a
  redaction on the left that removes what closed a construct (a known secret or URL password
  holding a quote), since patterns run again on what earlier passes produced.

These are argued from the patterns (``_OPEN`` mirrors ``_ASSIGNMENT``, ``_BEARER`` and ``_PEM``
of the redaction module and must change with them) and checked by property tests over random
texts and chunkings. They also need ``Redactor.text`` to be local: its cheap pre-tests must never
skip a pass that could match, or one part's redaction would depend on a word in another.

Cost: cuts are tried from the last whitespace backwards, and a cut refused stays refused (its
left side does not change), so a chunk without whitespace costs only its append; each cut
redacts only the text since the previous one (each character reaches ``Redactor.text`` once,
unless a redacted left side is refused and an earlier cut tried). A
chunk with whitespace also rereads what is held since the last cut, except for a quoted or header
value or a PEM block found open: that is remembered, and only what the chunk adds is read (from
the start of its line for a PEM block) for what could close it.

No bound on the hold: a held stretch ends at whitespace, or at the end of a construct, and not at
a size. Bounding it cannot keep the invariant, whatever the stream emits past the bound: after
``http://user:`` and N non-space characters, the journal reads ``http://user:[REDACTED]@host``
if ``@host`` follows and shows the N characters if a space does, so the stream may emit nothing
past ``http://user:`` before the run ends (emitting the characters could leak a password,
emitting ``REDACTED`` would differ from the journal). Masking at a bound would not free a watcher
sooner either: what follows the masked stretch would still wait for the same safe cut. Exactness
wins, then; the hold is at most the reply, which the journal keeps whole anyway. A caller that
wants to show that something is pending can read :attr:`StreamRedactor.held`.
"""

from __future__ import annotations

import re

from fleet.domain.redaction import (
    _HEADER_ENDINGS,
    _KEY_ENDINGS,
    _PEM,
    Redactor,
    _ends_with,
    _has_key_hint,
)

__all__ = ["StreamRedactor"]

#: A key ending in a secret word, as ``_ASSIGNMENT`` in the redaction module reads it.
_KEY = (
    r"(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]++"
    rf"(?:(?P<hdr>{_ends_with(_HEADER_ENDINGS)})|{_ends_with(_KEY_ENDINGS)})"
)

#: What, at the end of a line cut after a space or tab, still waits for the next characters.
_OPEN = re.compile(
    rf"""(?:
        (?i:{_KEY}["']?[ \t]*
            (?:[:=](?![:=])[ \t]*
                (?: (?P<q>["'])(?:(?!(?P=q))[^\\\r\n]|\\.)*   # a quoted value, not closed yet
                  | (?:bearer|basic|digest|token)[ \t]+       # a scheme, its value to come
                  | (?(hdr)(?P<h>[^\s"'][^\r\n"']*))          # a header value: to the line's end
                )?
            )?
        )
      | (?<![A-Za-z0-9_-])Bearer[ \t]+                        # Bearer, its token to come
      | -----BEGIN[ ](?:[A-Z0-9]+[ ])*                        # PEM armour, not whole yet
    )\Z""",
    re.VERBOSE,
)


def _last_cut(s: str, lo: int, hi: int) -> int:
    """The position just after the last space, tab or newline in ``s[lo:hi]``; 0 if none."""
    return max(s.rfind(" ", lo, hi), s.rfind("\t", lo, hi), s.rfind("\n", lo, hi)) + 1


class StreamRedactor:
    """Redacts a text fed in chunks so that the pieces emitted join to ``redactor.text(text)``.

    One per stream (a model call); not thread-safe. ``feed`` each chunk and send what it returns,
    then send ``flush()`` when the text is complete; ``reset()`` when the call starts over.
    """

    __slots__ = ("_held", "_parts", "_redactor", "_stuck")

    def __init__(self, redactor: Redactor) -> None:
        """Redact with ``redactor``, which the journal must use too for the pieces to match."""
        self._redactor = redactor
        self._parts: list[str] = []
        self._held = 0
        #: ``(start, seen, closers)``: what starts at ``start`` in the held text was open at
        #: ``seen`` and stays open while none of ``closers`` follows.
        self._stuck: tuple[int, int, tuple[str, ...]] | None = None

    @property
    def held(self) -> int:
        """How many characters are fed but not emitted yet."""
        return self._held

    def feed(self, chunk: str) -> str:
        """Take the next chunk; return the text now safe to send (often ``""``), redacted."""
        if not chunk:
            return ""
        self._parts.append(chunk)
        self._held += len(chunk)
        if " " not in chunk and "\n" not in chunk and "\t" not in chunk:
            return ""  # no new place to cut: the earlier ones were refused already
        s = "".join(self._parts)
        old = len(s) - len(chunk)  # cuts at or before here were refused by earlier chunks
        cut = _last_cut(s, old, len(s))
        while cut > old:
            start = self._open(s, cut, held=True)
            if start is None:
                left = s[:cut]
                out = self._redactor.text(left)
                if out == left or (out.endswith(left[-1]) and self._open(out, len(out)) is None):
                    self._parts = [s[cut:]] if cut < len(s) else []
                    self._held = len(s) - cut
                    self._stuck = None
                    return out
                start = cut - 1
            cut = _last_cut(s, old, min(start, cut - 1))  # strictly earlier: the loop ends
        self._parts = [s]
        return ""

    def flush(self) -> str:
        """Return everything still held, redacted: the end of the text. The stream is then empty."""
        s = "".join(self._parts)
        self.reset()
        return self._redactor.text(s) if s else ""

    def reset(self) -> None:
        """Drop everything held, unsent: the text starts over (the model call is retried)."""
        self._parts = []
        self._held = 0
        self._stuck = None

    def _open(self, s: str, cut: int, *, held: bool = False) -> int | None:
        """Where something that a cut at ``cut`` (just after whitespace) would split starts.

        ``None`` when the cut is safe; otherwise no cut after the returned position is. With
        ``held`` (``s`` is the held text), a value or PEM block found open is remembered, so
        while it stays open the next chunks are checked by what they add, not all over again.
        """
        if held and self._stuck is not None:
            start, seen, closers = self._stuck
            if cut > start and cut >= seen and not any(c in s[seen:cut] for c in closers):
                return start
        if self._redactor.ends_in_secret(s, cut):
            return cut - 1
        line = s.rfind("\n", 0, cut) + 1
        if s.find("PRIVATE KEY", 0, cut) >= 0:
            last = None
            for last in _PEM.finditer(s, 0, cut):  # noqa: B007 (the last match is the one)
                pass
            if last is not None and not last["end"]:
                if held:  # open until an END line: look again from the line now written
                    self._stuck = (last.start(), line, ("-----END ",))
                return last.start()
        if s[cut - 1] == "\n":
            return None
        tail = s[line:cut]
        if "Bearer" not in tail and "-----BEGIN" not in tail and not _has_key_hint(tail):
            return None  # nothing _OPEN matches is here: spare the search
        match = _OPEN.search(s, line, cut)
        if match is None:
            return None
        if held and match["q"]:  # a quoted value runs on until its quote or the line's end
            self._stuck = (match.start(), cut, (match["q"], "\\", "\r", "\n"))
        elif held and match["h"]:  # a header value runs on to the line's end (or a quote)
            self._stuck = (match.start(), cut, ('"', "'", "\r", "\n"))
        return match.start()
