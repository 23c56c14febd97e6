"""Task labels: small ``key → value`` string maps that callers filter and group by.

Every entry point (API body, CLI ``--label`` flags, merges of defaults) funnels through
:func:`validate_labels`, so the store only ever sees labels that obey one rule set:

* at most ``MAX_LABELS`` entries;
* keys are 1..``MAX_LABEL_KEY_CHARS`` ASCII letters, digits and ``._/-``;
* values are strings of at most ``MAX_LABEL_VALUE_BYTES`` UTF-8 bytes, no control characters.

Nothing is coerced: a non-string key or value is refused rather than ``str()``-ed, so what the
caller sent is exactly what is stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from fleet.constants import MAX_LABEL_KEY_CHARS, MAX_LABEL_VALUE_BYTES, MAX_LABELS
from fleet.errors import InputError

__all__ = ["merge_labels", "parse_label_args", "validate_labels"]

_KEY_RE = re.compile(r"[A-Za-z0-9._/-]+")
_KEY_BAD_CHAR_RE = re.compile(r"[^A-Za-z0-9._/-]")
#: Unicode category Cc: C0 controls, DEL and C1 controls (tab and newline included).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: How many characters of an offending key or value an error message quotes.
_SHOW_CHARS = 40
_ARG_FORM = "--label key=value"


def _show(text: str) -> str:
    """Quote a caller's string for a message, clipped so a huge value cannot flood the error."""
    if len(text) <= _SHOW_CHARS:
        return repr(text)
    return repr(text[:_SHOW_CHARS]) + f"… ({len(text)} characters)"


def _key_field(field: str, key: str) -> str:
    """Name the offending entry as ``<field>.<key>`` (key clipped) for the error's ``field``."""
    return f"{field}.{key[:MAX_LABEL_KEY_CHARS]}"


def _check_key(key: object, field: str) -> str:
    """Refuse a key that is not a short ASCII name, so keys stay safe in URLs, CLIs and SQL."""
    if not isinstance(key, str):
        raise InputError(
            f"label key {key!r} is a {type(key).__name__}; label keys must be strings; "
            "send the key as a quoted string",
            field=f"{field}.{key}",
        )
    if not key:
        raise InputError(
            f"label key '' is empty; keys must be 1 to {MAX_LABEL_KEY_CHARS} characters; "
            "give the label a name",
            field=f"{field}.",
        )
    if len(key) > MAX_LABEL_KEY_CHARS:
        raise InputError(
            f"label key {_show(key)} is {len(key)} characters, more than the "
            f"{MAX_LABEL_KEY_CHARS} allowed; use a shorter key",
            field=_key_field(field, key),
        )
    if not _KEY_RE.fullmatch(key):
        bad = _KEY_BAD_CHAR_RE.search(key)
        assert bad is not None  # fullmatch failed, so some character is outside the set
        suggestion = _KEY_BAD_CHAR_RE.sub("-", key)
        raise InputError(
            f"label key {_show(key)} contains {bad.group()!r}; keys may use only ASCII letters, "
            f"digits and '._/-'; rename it, e.g. {_show(suggestion)}",
            field=_key_field(field, key),
        )
    return key


def _check_value(key: str, value: object, field: str) -> str:
    """Refuse a value that is not a short single-line string, so it prints and indexes cleanly."""
    where = _key_field(field, key)
    if not isinstance(value, str):
        raise InputError(
            f"label {_show(key)} has a value of type {type(value).__name__} ({value!r}); "
            f"label values must be strings; quote it, e.g. {str(value)!r}",
            field=where,
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InputError(
            f"label {_show(key)} value {_show(value)} is not valid Unicode text "
            f"(lone surrogate at position {exc.start}); send UTF-8 text",
            field=where,
        ) from None
    if size > MAX_LABEL_VALUE_BYTES:
        raise InputError(
            f"label {_show(key)} value {_show(value)} is {size} UTF-8 bytes, more than the "
            f"{MAX_LABEL_VALUE_BYTES} allowed; shorten the value",
            field=where,
        )
    control = _CONTROL_RE.search(value)
    if control is not None:
        raise InputError(
            f"label {_show(key)} value {_show(value)} contains control character "
            f"U+{ord(control.group()):04X}; remove line breaks, tabs and other control characters",
            field=where,
        )
    return value


def validate_labels(labels: Mapping[str, str] | None, *, field: str = "labels") -> dict[str, str]:
    """Check labels against the rules above and return a new key-sorted dict, so order is stable."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InputError(
            f"{field} is a {type(labels).__name__}; labels must be an object of string keys to "
            'string values, e.g. {"team": "search"}',
            field=field,
        )
    if len(labels) > MAX_LABELS:
        raise InputError(
            f"{field} has {len(labels)} entries, more than the {MAX_LABELS} allowed; "
            f"remove {len(labels) - MAX_LABELS} of them",
            field=field,
        )
    checked: dict[str, str] = {}
    for key, value in labels.items():
        name = _check_key(key, field)
        checked[name] = _check_value(name, value, field)
    return dict(sorted(checked.items()))


def parse_label_args(args: Sequence[str]) -> dict[str, str]:
    """Turn CLI ``--label key=value`` strings into validated labels, refusing ambiguity."""
    if isinstance(args, str):
        # A bare string is a Sequence[str] to the type checker, but would parse per character.
        raise TypeError("parse_label_args takes a list of 'key=value' strings, not one string")
    parsed: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            problem = "has no '='" if not sep else "has an empty key"
            raise InputError(
                f"label argument {_show(arg)} {problem}; write it as {_ARG_FORM}, "
                "e.g. --label team=search",
                field="labels",
            )
        if key in parsed:
            raise InputError(
                f"label argument {_show(arg)} repeats key {_show(key)}; give each key once "
                f"({_ARG_FORM})",
                field=_key_field("labels", key),
            )
        parsed[key] = value
    return validate_labels(parsed)


def merge_labels(base: Mapping[str, str] | None, extra: Mapping[str, str] | None) -> dict[str, str]:
    """Overlay ``extra`` on ``base`` (extra wins), then validate: a merge can exceed the count."""
    merged: dict[str, str] = {}
    for part in (base, extra):
        if part is None:
            continue
        if not isinstance(part, Mapping):
            raise InputError(
                f"labels is a {type(part).__name__}; labels must be an object of string keys "
                'to string values, e.g. {"team": "search"}',
                field="labels",
            )
        merged.update(part)
    return validate_labels(merged)
