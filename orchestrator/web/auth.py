"""Who is asking: API tokens (stored hashed, ``orchestrator.tokens``), browser sessions, roles, CSRF.

- An API client sends ``Authorization: Bearer <token>``. The token is looked up by its sha256 in the store on
  every request, so a revoked or expired token stops working at once.
- A browser logs in once with a token (``POST /login``) and gets a session cookie: HMAC-signed with the
  service's secret, HttpOnly, SameSite=Strict, bound to the token's name and hash (revoking the token ends the
  session) and carrying a CSRF secret. A request that changes anything with a cookie must also send that secret,
  as the form field ``csrf`` or the header ``X-CSRF-Token``; a bearer request needs none (no ambient authority).
- Roles: viewer < engineer < admin. Every route names the least it needs; 401 without valid credentials,
  403 with too small a role.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from labcontract.errors import AccessError, ConfigError, Forbidden
from orchestrator.tokens import ROLES, lookup, role_at_least, token_hash

COOKIE = "slab_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_TOKEN_CHARS = 256            # longer is not one of ours: refused before it is hashed
MAX_COOKIE_CHARS = 1024


@dataclass(frozen=True)
class Principal:
    name: str                          # the token's name
    role: str                          # viewer | engineer | admin
    via: Literal["token", "session"]
    csrf: str | None = None            # the session's CSRF secret (None for a bearer token)
    key: str = ""                      # the first 16 hex digits of the token's sha256 (which token of that name)

    @property
    def actor(self) -> str:
        """How commands name who sent them (recorded by the controller as the run's submitter)."""
        return f"token:{self.name}"


def load_secret(path: Path) -> bytes:
    """The cookie-signing key: 32 random bytes made 0600 on first start; a key others can read is refused."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(str(path), "mode", f"{oct(mode & 0o777)}: the session secret must not be readable by "
                                             "group or others (chmod 600)")
    key = path.read_bytes()
    if len(key) < 16:
        raise ConfigError(str(path), "length", "the session secret is shorter than 16 bytes")
    return key


class Sessions:
    """Signed session cookies: a restart of the service keeps everyone logged in. The one state kept is the
    sessions ended by a logout (by their CSRF secret, unique per session, until they would expire anyway), so a
    copied cookie dies with the logout; a restart forgets them (revoke the token to end every session for sure)."""

    MAX_ENDED = 100_000

    def __init__(self, key: bytes, ttl_s: int) -> None:
        self.key, self.ttl_s = key, ttl_s
        self._ended: dict[str, float] = {}          # csrf secret -> when its cookie would have expired

    def end(self, csrf: str, now: float | None = None) -> None:
        """A logout: the session of this CSRF secret is refused from now on."""
        now = time.time() if now is None else now
        if len(self._ended) >= self.MAX_ENDED:
            self._ended = {k: t for k, t in self._ended.items() if t > now}
        if len(self._ended) < self.MAX_ENDED:
            self._ended[csrf] = now + self.ttl_s

    def _sign(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(hmac.new(self.key, payload, hashlib.sha256).digest()).decode().rstrip("=")

    def issue(self, name: str, sha256: str, now: float | None = None) -> tuple[str, str]:
        """A cookie value for the token ``name`` (of hash ``sha256``) and its CSRF secret."""
        csrf = secrets.token_urlsafe(24)
        body = json.dumps({"n": name, "h": sha256[:16], "x": int((now or time.time()) + self.ttl_s), "c": csrf},
                          separators=(",", ":")).encode()
        payload = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{payload}.{self._sign(payload.encode())}", csrf

    def read(self, value: str, now: float | None = None) -> tuple[str, str, str] | None:
        """(token name, hash prefix, csrf) of a valid, unexpired cookie; None for anything else."""
        if len(value) > MAX_COOKIE_CHARS or value.count(".") != 1:
            return None
        payload, sig = value.split(".")
        if not hmac.compare_digest(sig, self._sign(payload.encode())):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            name, prefix, expires, csrf = str(data["n"]), str(data["h"]), float(data["x"]), str(data["c"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires < (now or time.time()) or csrf in self._ended:
            return None
        return name, prefix, csrf


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise AccessError("the Authorization header must be 'Bearer <token>'")
    return value.strip()


def from_token(request: Request, token: str) -> Principal:
    if len(token) > MAX_TOKEN_CHARS:
        raise AccessError("unknown, revoked or expired token")
    web = request.app.state.web
    with web.sessions() as s:
        row = lookup(s, token)
        if row is None:
            raise AccessError("unknown, revoked or expired token")
        return Principal(row.name, row.role, "token", key=row.token_sha256[:16])


def from_session(request: Request) -> Principal | None:
    """The browser session's principal, or None (no cookie, a forged or expired one, a revoked token)."""
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    web = request.app.state.web
    got = web.cookies.read(value)
    if got is None:
        return None
    name, prefix, csrf = got
    from orchestrator.store.models import ApiToken

    now = time.time()
    with web.sessions() as s:
        row = s.get(ApiToken, name)
        if (row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now)
                or not row.token_sha256.startswith(prefix)):
            return None
        return Principal(row.name, row.role, "session", csrf, key=prefix)


async def csrf_ok(request: Request, principal: Principal) -> bool:
    """A cookie-authenticated change carries the session's CSRF secret (header or form field)."""
    if principal.via != "session" or request.method in SAFE_METHODS:
        return True
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await request.form()
        value = form.get(CSRF_FIELD)
        sent = value if isinstance(value, str) else None
    return sent is not None and principal.csrf is not None and hmac.compare_digest(sent, principal.csrf)


def same_site(request: Request) -> bool:
    """The request comes from this site's own pages (or a tool), not a form on another site: the browser's
    ``Sec-Fetch-Site`` and ``Origin`` say so. Used where no CSRF secret can exist yet (the login form)."""
    site = request.headers.get("sec-fetch-site")
    if site not in (None, "same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return origin != "null" and urlsplit(origin).netloc == request.headers.get("host", "")


def require(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the caller, with at least ``role``; AccessError (401) / Forbidden (403) otherwise."""
    assert role in ROLES, role

    async def dependency(request: Request) -> Principal:
        token = bearer(request)      # the store is read in the thread pool: a slow store never stalls the loop
        principal = (await run_in_threadpool(from_token, request, token) if token is not None
                     else await run_in_threadpool(from_session, request))
        if principal is None:
            raise AccessError("a token is required (Authorization: Bearer <token>, or log in)")
        if not await csrf_ok(request, principal):
            raise Forbidden(principal.name, principal.role, "the session's CSRF token with this form")
        if not role_at_least(principal.role, role):
            raise Forbidden(principal.name, principal.role, role)
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{role}"
    return dependency


def still_valid(request: Request, principal: Principal) -> bool:
    """Whether ``principal``'s token (and session) still stands: not revoked, not expired, not replaced under its
    name, not logged out. A long-lived request (a live stream) asks this again as it goes."""
    from orchestrator.store.models import ApiToken

    web = request.app.state.web
    if principal.csrf is not None and principal.csrf in web.cookies._ended:
        return False
    with web.sessions() as s:
        row = s.get(ApiToken, principal.name)
        return bool(row is not None and row.revoked_at is None and row.token_sha256.startswith(principal.key)
                    and (row.expires_at is None or row.expires_at > time.time()))


def page_principal(request: Request) -> Principal | None:
    """A page's viewer: the session's principal (a bearer token works too, for scripts), or None."""
    token = request.headers.get("authorization")
    if token:
        try:
            tok = bearer(request)
            return from_token(request, tok) if tok else None
        except AccessError:
            return None
    return from_session(request)


def login(request: Request, token: str) -> tuple[Principal, str]:
    """Check a token typed into the login form; the principal and the cookie value to set."""
    principal = from_token(request, token.strip())
    cookie, csrf = request.app.state.web.cookies.issue(principal.name, token_hash(token.strip()))
    return Principal(principal.name, principal.role, "session", csrf, key=principal.key), cookie
