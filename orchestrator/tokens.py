"""API tokens of the web service: made where they are shown (``labctl token create``, the web service's admin
page), stored only as a SHA-256 (by the controller, from a TokenCreate on the web service's stream), looked up
by hash on every request.

A token is ``slab_`` + 256 random bits (URL-safe base64): guessing one is hopeless, so a fast hash suffices (a
slow password hash protects low-entropy secrets, which these are not) and a lookup is one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Literal, get_args

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.store.models import ApiToken

Role = Literal["viewer", "engineer", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)          # in increasing rights
PREFIX = "slab_"
MAX_TOKEN_CHARS = 128          # what a request may present (a real one is 48): longer is refused unread


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def role_at_least(role: str, needed: str) -> bool:
    """Whether ``role`` has the rights of ``needed`` (an unknown role has none)."""
    if role not in ROLES or needed not in ROLES:
        return False
    return ROLES.index(role) >= ROLES.index(needed)


def lookup(session: Session, token: str, now: float | None = None) -> ApiToken | None:
    """The token's row if it is one of ours, not revoked and not expired; else None. The hash is compared by the
    database (an index lookup of a hash of 256 random bits: its timing tells nothing of other tokens)."""
    if not isinstance(token, str) or not token.startswith(PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    row = session.scalar(select(ApiToken).where(ApiToken.token_sha256 == token_hash(token)))
    if row is None or row.revoked_at is not None or row.role not in ROLES:
        return None
    if row.expires_at is not None and (time.time() if now is None else now) >= row.expires_at:
        return None
    return row
