"""Webhook deliveries (pure): signature checks, JSON pointers, and a delivery turned into a task.

Signatures are HMAC-SHA256 over the raw body, in three header styles:

* ``github``: ``X-Hub-Signature-256: sha256=<hex>``;
* ``stripe``: ``Stripe-Signature: t=<unix time>,v1=<hex>[,v1=<hex>…]`` over ``"<t>.<body>"``, and
  ``t`` must lie within the tolerance of now (``0`` turns the age check off);
* ``hmac``: the hex digest (optionally ``sha256=``-prefixed) in a configured header.

Digests are compared in constant time. Header names are looked up case-insensitively: callers
pass headers with lowercase names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.config import FieldRef, SignatureConfig, TriggerConfig
from fleet.domain import inputs
from fleet.domain.keys import blank
from fleet.domain.labels import validate_labels
from fleet.errors import FleetError, InputError

GITHUB_HEADER = "X-Hub-Signature-256"
STRIPE_HEADER = "Stripe-Signature"
#: Characters of a caller's value quoted in an error message.
_SHOW = 60
_MISSING = object()


class SignatureError(FleetError):
    """The delivery's signature is missing or does not match; nothing was stored."""

    status = 401
    title = "Unauthorized"


class PointerError(InputError):
    """A JSON pointer does not resolve in the delivered document."""


def _show(value: str) -> str:
    return repr(value if len(value) <= _SHOW else value[:_SHOW] + "…")


# -- JSON pointers (RFC 6901) -------------------------------------------------------------------


def pointer_tokens(pointer: str) -> list[str]:
    """Split ``/a/b~1c`` into ``["a", "b/c"]``; ``""`` is the whole document."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {_show(pointer)} must be '' or start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        rest = token.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise ValueError(
                f"JSON pointer {_show(pointer)} has a '~' not followed by 0 or 1 "
                "(write '~0' for '~' and '~1' for '/')"
            )
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def resolve_pointer(document: Any, pointer: str, *, default: Any = _MISSING) -> Any:
    """The value at ``pointer`` in ``document``; PointerError (or ``default``) if it is absent."""
    value = document
    where = ""
    for token in pointer_tokens(pointer):
        if isinstance(value, dict):
            if token not in value:
                if default is not _MISSING:
                    return default
                raise PointerError(
                    f"JSON pointer {pointer!r}: the object at {where or '(root)'!r} has no key "
                    f"{token!r}",
                    field=pointer,
                )
            value = value[token]
        elif isinstance(value, list):
            if not (token.isdigit() and (token == "0" or not token.startswith("0"))):
                raise PointerError(
                    f"JSON pointer {pointer!r}: {where or '(root)'!r} is an array, and "
                    f"{token!r} is not an array index",
                    field=pointer,
                )
            index = int(token)
            if index >= len(value):
                if default is not _MISSING:
                    return default
                raise PointerError(
                    f"JSON pointer {pointer!r}: the array at {where or '(root)'!r} has "
                    f"{len(value)} items, no index {index}",
                    field=pointer,
                )
            value = value[index]
        else:
            raise PointerError(
                f"JSON pointer {pointer!r}: {where or '(root)'!r} is {_json_type(value)}, "
                "not an object or array",
                field=pointer,
            )
        where += "/" + token.replace("~", "~0").replace("/", "~1")
    return value


def _json_type(value: Any) -> str:
    """``a string``, ``an object``… for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# -- signatures ---------------------------------------------------------------------------------


def _digest(secret: bytes, payload: bytes) -> str:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def _same(expected: str, given: str) -> bool:
    # Both sides as ASCII bytes: compare_digest refuses non-ASCII str, and a caller controls one.
    return hmac.compare_digest(expected.encode(), given.strip().lower().encode("utf-8", "replace"))


def verify_github(secret: bytes, body: bytes, header: str | None) -> None:
    """``X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(secret, body)>``."""
    if not header:
        raise SignatureError(f"missing {GITHUB_HEADER} header; the delivery must be signed")
    scheme, sep, given = header.strip().partition("=")
    if not sep or scheme.lower() != "sha256":
        raise SignatureError(f"{GITHUB_HEADER} must look like 'sha256=<hex digest>'")
    if not _same(_digest(secret, body), given):
        raise SignatureError(f"{GITHUB_HEADER} does not match the body and the trigger's secret")


def verify_stripe(
    secret: bytes, body: bytes, header: str | None, *, now: float, tolerance: float
) -> None:
    """``Stripe-Signature: t=<ts>,v1=<hex>…`` signs ``"<ts>.<body>"``; one v1 must match."""
    if not header:
        raise SignatureError(f"missing {STRIPE_HEADER} header; the delivery must be signed")
    timestamp: str | None = None
    candidates: list[str] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            timestamp = value.strip()
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not timestamp.isdigit() or not candidates:
        raise SignatureError(f"{STRIPE_HEADER} must look like 't=<unix time>,v1=<hex digest>'")
    expected = _digest(secret, timestamp.encode() + b"." + body)
    # Check every candidate (no early exit) so timing does not tell which one matched.
    matched = False
    for given in candidates:
        matched |= _same(expected, given)
    if not matched:
        raise SignatureError(f"{STRIPE_HEADER} does not match the body and the trigger's secret")
    if tolerance > 0 and abs(now - int(timestamp)) > tolerance:
        raise SignatureError(
            f"{STRIPE_HEADER} timestamp {timestamp} is more than {tolerance:g}s away from the "
            "server's clock; a replayed or delayed delivery is refused"
        )


def verify_hmac(secret: bytes, body: bytes, header_name: str, header: str | None) -> None:
    """``<header>: <hex of HMAC-SHA256(secret, body)>`` (a ``sha256=`` prefix is accepted)."""
    if not header:
        raise SignatureError(f"missing {header_name} header; the delivery must be signed")
    given = header.strip()
    if given.lower().startswith("sha256="):
        given = given[len("sha256=") :]
    if not _same(_digest(secret, body), given):
        raise SignatureError(f"{header_name} does not match the body and the trigger's secret")


def verify(
    sig: SignatureConfig,
    secret: bytes,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
) -> None:
    """Check a delivery's signature in the trigger's style; SignatureError when it fails."""
    if sig.style == "github":
        verify_github(secret, body, headers.get(GITHUB_HEADER.lower()))
    elif sig.style == "stripe":
        verify_stripe(
            secret, body, headers.get(STRIPE_HEADER.lower()), now=now, tolerance=sig.tolerance
        )
    else:
        verify_hmac(secret, body, sig.header, headers.get(sig.header.lower()))


def sign_github(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value a sender would send (tests and examples)."""
    return "sha256=" + _digest(secret, body)


def sign_stripe(secret: bytes, body: bytes, timestamp: int) -> str:
    """The ``Stripe-Signature`` value a sender would send (tests and examples)."""
    return f"t={timestamp},v1={_digest(secret, str(timestamp).encode() + b'.' + body)}"


# -- a delivery turned into a submission --------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """What a webhook delivery submits: input, conversation key, labels, idempotency key."""

    input: str | list[dict[str, Any]]
    key: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    resource_id: str | None = None


def parse_body(body: bytes) -> Any:
    """The delivery's JSON document; InputError names the position of a syntax error."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError("the body is not UTF-8 text; send a JSON document", field="body") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"the body is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "this trigger reads its fields from a JSON body",
            field="body",
        ) from None
    except (ValueError, RecursionError):  # e.g. nesting too deep, an integer too long to read
        raise InputError(
            "the body is JSON this trigger cannot read (too deeply nested or a number too long)",
            field="body",
        ) from None


def _input(document: Any, pointer: str) -> str | list[dict[str, Any]]:
    """A string is the text; an object is one data part; anything else is ``{"value": it}``.

    Data parts are objects, so a number, boolean, null or array is wrapped rather than refused.
    """
    value = resolve_pointer(document, pointer)
    if isinstance(value, str):
        if not value.strip():
            where = f"the input at {pointer!r}" if pointer else "the body"
            raise InputError(
                f"{where} is an empty string; the agent needs text (or JSON data) to work on",
                field=pointer or "body",
            )
        return value
    data = value if isinstance(value, dict) else {"value": value}
    return [{"type": "data", "data": data}]


def _scalar(value: Any, what: str, pointer: str) -> str | None:
    """A header-like string from a JSON value; None when absent (null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise InputError(
        f"{what} at {pointer!r} is {_json_type(value)}; it must be a string or an integer",
        field=pointer,
    )


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value, stripped; None when it is absent, empty or only whitespace."""
    value = headers.get(name.lower())
    return (value.strip() or None) if value is not None else None


def _key(
    ref: FieldRef, document: Any, headers: Mapping[str, str], what: str = "the conversation key"
) -> str | None:
    if ref.header is not None:
        return _header(headers, ref.header)
    assert ref.pointer is not None
    found = resolve_pointer(document, ref.pointer, default=None)
    key = _scalar(found, what, ref.pointer)
    return None if key is None or blank(key) else key  # (white space alone is no key either)


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """What a delivery to an ``[event]`` trigger sends: an event's name, key, data and id."""

    name: str | None
    key: str | None
    data: Any
    event_id: str | None


def extract_event(
    trigger: TriggerConfig, document: Any, headers: Mapping[str, str]
) -> EventDelivery:
    """Map a delivery to an event by the trigger's ``[event]`` table (pure): the name (given,
    or from a header or pointer), the key, the data at ``data`` (the whole body by default),
    the id from ``idempotency_header``. A name or key that is absent is None (the event's
    own checks then refuse it, naming the field)."""
    spec = trigger.event
    assert spec is not None
    name = (
        spec.name
        if isinstance(spec.name, str)
        else _key(spec.name, document, headers, "the event name")
    )
    delivery_id = None
    if trigger.idempotency_header is not None:
        delivery_id = _header(headers, trigger.idempotency_header)
    return EventDelivery(
        name=name,
        key=_key(spec.key, document, headers, "the event key"),
        data=resolve_pointer(document, spec.data),
        event_id=delivery_id,
    )


def extract(trigger: TriggerConfig, document: Any, headers: Mapping[str, str]) -> Delivery:
    """Map a delivery to a submission by the trigger's field mapping (pure).

    - input: the value at ``trigger.input`` (the whole document when ``input = ""``): a string is
      text (an empty one a 422), an object a data part, anything else ``{"value": …}``; a
      missing field is a 422;
    - conversation key: from the header or pointer; absent → None (a new conversation);
    - labels: each pointer's value (strings, integers, booleans); absent ones are left out;
    - idempotency key: the ``idempotency_header`` value; absent or empty → None (no idempotency),
      as an empty conversation-key header means no key.
    """
    key = _key(trigger.conversation_key, document, headers) if trigger.conversation_key else None
    resource = _key(trigger.resource, document, headers) if trigger.resource else None
    labels: dict[str, str] = {}
    for name, pointer in trigger.labels.items():
        value = _scalar(
            resolve_pointer(document, pointer, default=None), f"label {name!r}", pointer
        )
        if value is not None:
            labels[name] = value
    delivery_id = None
    if trigger.idempotency_header is not None:
        delivery_id = _header(headers, trigger.idempotency_header)
    return Delivery(
        input=_input(document, trigger.input),
        key=key,
        labels=validate_labels(labels),
        idempotency_key=inputs.idempotency_key(delivery_id),
        resource_id=resource,
    )
