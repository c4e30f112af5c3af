"""What the store's ``controller_lease`` row says, for its readers (labctl, the web service) and for the controller
that holds it (:mod:`orchestrator.controller.lease` takes, renews and fences it). Reading it needs nothing of the
controller: labctl and the web service never import the controller package."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.store.models import ControllerLease

LEASE_NAME = "controller"
DEFAULT_TTL_S = 10.0


@dataclass(frozen=True)
class LeaseView:
    holder: str
    token: int
    renewed_at: float
    expires_at: float

    def describe(self, now: float | None = None) -> str:
        ago = (time.time() if now is None else now) - self.renewed_at
        return f"controller {self.holder} holds the lease (token {self.token}, renewed {ago:.1f}s ago)"


def view_of(row: ControllerLease) -> LeaseView:
    return LeaseView(holder=row.holder, token=row.token, renewed_at=row.renewed_at, expires_at=row.expires_at)


def view_in(s: Session) -> LeaseView | None:
    """The lease as the store has it; None when no controller ever ran on this store."""
    row = s.scalar(select(ControllerLease).where(ControllerLease.name == LEASE_NAME))
    return None if row is None else view_of(row)


def current(sessions: sessionmaker[Session]) -> LeaseView | None:
    """The lease as the store has it (for labctl and the web service); None when no controller ever ran here."""
    with sessions() as s:
        return view_in(s)


def absence(lease: LeaseView | None, now: float) -> str | None:
    """Why no controller is working the queue, from its lease; None while one holds a live lease."""
    if lease is None:
        return "no controller ever ran on this store"
    if lease.expires_at <= 0:
        return f"controller {lease.holder} stopped {now - lease.renewed_at:.0f}s ago"
    if now - lease.renewed_at > DEFAULT_TTL_S:
        return (f"controller {lease.holder} last renewed its lease {now - lease.renewed_at:.0f}s ago (it renews "
                "it every few seconds: it is down, stuck, or cannot reach its store)")
    return None


__all__ = ["DEFAULT_TTL_S", "LEASE_NAME", "LeaseView", "absence", "current", "view_in", "view_of"]
