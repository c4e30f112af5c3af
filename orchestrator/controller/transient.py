"""Transient faults of the controller's store and broker: recognised, waited out, logged once.

A full disk under a SQLite store, a store locked by another process, PostgreSQL restarting and Redis
down or loading are not bugs: the controller's loop waits with backoff (0.5 s doubling to 10 s) and
acknowledges nothing meanwhile, so nothing is lost. :class:`FaultLog` keeps the log to one line at
the start of an outage, at most one line per ``every_s`` while it lasts (with a count) and one line
at its end (with its duration); it also holds what the exporter shows (``lab_controller_degraded``,
``lab_controller_transient_faults_total{kind}``).

Code that isolates failures per entry (dead-lettering what fails) must let these through: use
:func:`transient_kind` (not None: re-raise) so an entry is retried, never dead-lettered, for a fault
that is not its own.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from sqlalchemy import exc as sa_exc

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
LOG_EVERY_S = 30.0
FAULT_KINDS = ("store", "redis")

_REDIS_TRANSIENT = ("NOGROUP", "LOADING", "BUSY ", "MASTERDOWN", "READONLY", "OOM", "NOPERM", "NOAUTH",
                    "CLUSTERDOWN", "TRYAGAIN")
_OS_TRANSIENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ENOMEM, errno.EAGAIN, errno.EMFILE,
                 errno.ENFILE}


def transient_kind(e: BaseException) -> str | None:
    """``"store"`` or ``"redis"`` when ``e`` is a fault that waiting cures; None otherwise. The same
    faults as orchestrator.controller.intake.transient (which decides that an entry is retried, not dead-lettered)."""
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)):
        return "redis"
    if isinstance(e, redis.ResponseError) and str(e).startswith(_REDIS_TRANSIENT):
        return "redis"      # restarted empty (groups are recreated), loading its data, out of memory...
    if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
        return "store"
    if isinstance(e, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError,
                      sa_exc.TimeoutError)):
        return "store"      # locked, full, connection refused or terminated, the pool exhausted
    if isinstance(e, OSError) and e.errno in _OS_TRANSIENT:
        return "store"      # the artifact store's disk
    return None


def reason_of(e: BaseException) -> str:
    """One line, without SQL or parameters (no data of the store in the log)."""
    orig = e.orig if isinstance(e, sa_exc.DBAPIError) else e
    text = " ".join(str(orig).split())
    return f"{type(orig).__name__}: {text[:200]}"


@dataclass
class FaultLog:
    """The state of the current outage (if any) and the totals the exporter shows. Thread-safe reads:
    the exporter's thread reads it while the loop writes it."""

    every_s: float = LOG_EVERY_S
    clock: Callable[[], float] = time.monotonic
    totals: dict[str, int] = field(default_factory=dict)       # kind -> faults seen (every failed pass)
    kind: str | None = None              # the current outage's kind; None when healthy
    reason: str = ""
    since: float = 0.0
    _count: int = 0
    _logged_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def degraded(self) -> bool:
        return self.kind is not None

    def fault(self, kind: str, e: BaseException, retry_in: float) -> None:
        now = self.clock()
        with self._lock:
            self.totals[kind] = self.totals.get(kind, 0) + 1
            first = self.kind is None
            if first:
                self.since, self._count, self._logged_at = now, 0, now
            self.kind, self.reason = kind, reason_of(e)
            self._count += 1
        if first:
            log.warning("%s unavailable (%s); waiting (retry with backoff up to %.0fs, nothing is acknowledged "
                        "meanwhile)", _name(kind), self.reason, BACKOFF_MAX_S)
        elif now - self._logged_at >= self.every_s:
            self._logged_at = now
            log.warning("%s still unavailable after %.0fs (%d failed attempts; last: %s)", _name(kind),
                        now - self.since, self._count, self.reason)

    def recovered(self) -> float | None:
        """Call after a successful pass: the outage's duration when one just ended (logged), else None."""
        if self.kind is None:
            return None
        now = self.clock()
        with self._lock:
            kind, took, count = self.kind, now - self.since, self._count
            self.kind, self.reason = None, ""
        log.warning("%s available again after %.1fs (%d failed attempts); resuming", _name(kind), took, count)
        return took


def _name(kind: str) -> str:
    return {"store": "store", "redis": "redis (broker)"}.get(kind, kind)


__all__ = ["BACKOFF_FIRST_S", "BACKOFF_MAX_S", "FAULT_KINDS", "FaultLog", "reason_of", "transient_kind"]
