"""Who may use the operator UI, and how a browser proves it.

The UI is served when a caller has ``operator = true`` (sign in with that key) or when no
callers are configured at all (an open API: no sign-in). Otherwise ``/ui`` is off (404).

Signing in exchanges the key, posted once from the login form, for a session cookie
(``fleet_ui``: HttpOnly, SameSite=Strict, Path=/ui, Secure over https) holding the caller's
name, an expiry and a fingerprint of the key's hash, signed with HMAC-SHA256 under
``FLEET_UI_SECRET`` (a random secret per process when unset). Rotating the key or the secret
ends its sessions. The key is never in a URL, a page or a log. Every action (a POST) also
carries a CSRF token derived from the session, checked here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fleet.api.auth import Caller, KeyRing, Unauthorized
from fleet.errors import Forbidden

#: The session cookie's name.
COOKIE = "fleet_ui"
#: How long a session lasts (seconds); then the operator signs in again.
SESSION_S = 12 * 3600
#: Characters of a key's hash a session remembers (a rotated key ends the session).
FINGERPRINT = 16

Mode = Literal["open", "keys", "off"]


@dataclass(frozen=True, slots=True)
class Viewer:
    """Someone looking at the UI: the operator caller (None in an open API) and what it sees."""

    name: str | None
    #: Deployments it may see (every scope of them); None means all.
    deployments: frozenset[str] | None
    #: The token its actions must carry.
    csrf: str
    #: Tenants whose conversations it sees (its caller's reach); None means all.
    tenants: frozenset[str] | None = None

    def may_see(self, deployment: str, tenant: str | None = None) -> bool:
        """A deployment it may see, and (given) a tenant it reaches."""
        if tenant is not None and self.tenants is not None and tenant not in self.tenants:
            return False
        return self.deployments is None or deployment in self.deployments


class UiAuth:
    """Signs and checks UI sessions for one key ring."""

    def __init__(
        self, ring: KeyRing, secret: bytes | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.ring = ring
        self._secret = secret or os.urandom(32)
        self._clock = clock

    @property
    def mode(self) -> Mode:
        if self.ring.open:
            return "open"
        return "keys" if self.ring.operators else "off"

    def _sign(self, text: str) -> str:
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()

    def sign_in(self, key: str) -> tuple[str, Viewer]:
        """A session cookie's value for an operator key; 401 for an unknown key, 403 for a key
        that is not an operator's."""
        found = self.ring.lookup(key) if key.strip() else None
        if found is None:
            raise Unauthorized("unknown key")
        caller, digest = found
        if not caller.operator:
            raise Forbidden(f"caller {caller.name!r} is not an operator (operator = true)")
        expires = int(self._clock()) + SESSION_S
        body = f"{expires}.{digest[:FINGERPRINT]}.{caller.name}"
        cookie = f"{self._sign(body)}.{body}"
        return cookie, self._viewer(caller, cookie)

    def viewer(self, cookie: str | None) -> Viewer:
        """The viewer a request's cookie proves; Unauthorized when it proves nothing."""
        if self.mode == "open":
            return Viewer(None, None, self._sign("csrf:open")[:32])
        if not cookie:
            raise Unauthorized("sign in with an operator key")
        sig, _, body = cookie.partition(".")
        expires, _, rest = body.partition(".")
        fingerprint, _, name = rest.partition(".")
        if not hmac.compare_digest(sig, self._sign(body)) or not expires.isdigit():
            raise Unauthorized("the session is not valid; sign in again")
        if int(expires) < self._clock():
            raise Unauthorized("the session expired; sign in again")
        found = self.ring.named(name)
        if found is None or found[1][:FINGERPRINT] != fingerprint or not found[0].operator:
            raise Unauthorized("the key of this session changed; sign in again")
        return self._viewer(found[0], cookie)

    def _viewer(self, caller: Caller, cookie: str) -> Viewer:
        return Viewer(
            caller.name, caller.deployments, self._sign(f"csrf:{cookie}")[:32], caller.reach
        )

    @staticmethod
    def check_csrf(viewer: Viewer, token: str | None) -> None:
        if not token or not hmac.compare_digest(token, viewer.csrf):
            raise Forbidden("this action's form is stale or came from another site; reload")
