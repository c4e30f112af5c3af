"""Exactly one controller: a lease in the store with a fencing token.

The ``controller_lease`` row names its holder (``hostname:pid:id``) and a ``token`` that grows by one at
every take-over. The holder renews it every loop pass; a controller that finds it held stands by and
takes it over when the holder is gone:

* the holder released it (a clean stop: ``expires_at`` = 0), or
* the holder ran on this host and its process no longer exists (a crash, SIGKILL), or
* the row has not changed for ``ttl_s`` on the stand-by's own monotonic clock (a holder paused,
  partitioned or on a dead machine). Observing the row instead of comparing ``expires_at`` with the
  local clock keeps take-over right when the machines' clocks disagree.

A take-over is a compare-and-set (``UPDATE … WHERE token = :seen AND renewed_at = :seen``; the first
insert is guarded by the primary key), so of two contenders exactly one wins.

Fencing: :meth:`Lease.fence` hooks the controller's sessionmaker; every transaction that writes
proves, inside itself and just before its commit, that the row still carries this controller's token
(``UPDATE … SET renewed_at … WHERE token = :mine``, rowcount 1). A stale holder (paused past the TTL,
resumed after another took over) gets :class:`LeaseLost` from that commit: its transaction is rolled
back, it writes nothing, acknowledges nothing and dispatches nothing (dispatch follows the commit),
and it stops. :class:`LeaseLost` is a BaseException, like SystemExit: per-entry ``except Exception``
isolation never swallows it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine, event, insert, inspect, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker

from labcontract.errors import LabError
from orchestrator.controller.transient import FaultLog, transient_kind
from orchestrator.store.lease import DEFAULT_TTL_S, LEASE_NAME, LeaseView, view_of
from orchestrator.store.models import ControllerLease

log = logging.getLogger(__name__)
_WROTE = "lease_wrote"
_PG_MIGRATION_LOCK = 0x1AB5_0001


class LeaseLost(BaseException):     # a stop order, not an error to handle (like SystemExit)
    """Another controller holds the lease now: this one must write nothing more and stop."""


class LeaseHeld(LabError):
    """Another controller holds the lease and this one was told not to stand by."""


def make_holder() -> str:
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _holder_dead_here(holder: str) -> bool:
    """The holder ran on this machine and its process is gone (pid reuse aside: then it waits the TTL)."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname()[:80] or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lease:
    def __init__(self, sessions: sessionmaker[Session], *, holder: str | None = None, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        """``sessions``: a sessionmaker of its own (not the fenced one)."""
        self.sessions = sessions
        self.holder = holder or make_holder()
        self.ttl_s = ttl_s
        self.clock, self.monotonic = clock, monotonic
        self.token: int | None = None
        self._seen: tuple[int, float] | None = None      # (token, renewed_at) last observed while standing by
        self._seen_since = 0.0                           # monotonic time it was first observed so
        self._renewed = -1e18                            # monotonic time of the last renewal we committed

    # --- reading and taking ------------------------------------------------------------------

    def read(self) -> LeaseView | None:
        with self.sessions() as s:
            row = s.get(ControllerLease, LEASE_NAME)
            return None if row is None else view_of(row)

    def try_acquire(self) -> LeaseView | None:
        """Take the lease if it is free; None when taken (``self.token`` is ours, once committed), else who
        holds it."""
        now = self.clock()
        self.token = None
        try:
            with self.sessions.begin() as s:
                row = s.get(ControllerLease, LEASE_NAME)
                if row is None:
                    # the columns named (a Core insert): the lease is taken before the store is migrated, so a
                    # column a newer schema adds (heartbeat_timeout_s, 0019) is never named here
                    s.execute(insert(ControllerLease).values(name=LEASE_NAME, holder=self.holder, token=1,
                                                             acquired_at=now, renewed_at=now,
                                                             expires_at=now + self.ttl_s))
                    won = 1
                else:
                    view = view_of(row)
                    if view.holder != self.holder and not self._free(view):
                        return view
                    res = s.execute(update(ControllerLease)
                                    .where(ControllerLease.name == LEASE_NAME, ControllerLease.token == view.token,
                                           ControllerLease.renewed_at == view.renewed_at)
                                    .values(holder=self.holder, token=view.token + 1, acquired_at=now,
                                            renewed_at=now, expires_at=now + self.ttl_s)
                                    .execution_options(synchronize_session=False))
                    if getattr(res, "rowcount", 0) != 1:
                        return view                     # another contender changed it first
                    won = view.token + 1
        except IntegrityError:                         # both inserted the first row: the other one won
            got = self.read()
            if got is None:
                raise
            return got
        self.token = won                               # committed: ours
        self._renewed = self.monotonic()
        return None

    def _free(self, view: LeaseView) -> bool:
        if view.expires_at <= 0:
            return True                             # released at a clean stop
        if _holder_dead_here(view.holder):
            return True
        mono = self.monotonic()
        key = (view.token, view.renewed_at)
        if self._seen != key:
            self._seen, self._seen_since = key, mono
            return False
        return mono - self._seen_since >= self.ttl_s

    # --- holding ---------------------------------------------------------------------------------

    def check(self, s: Session) -> None:
        """Inside a transaction: prove the lease is still ours and extend it; LeaseLost when it is not."""
        if self.token is None:
            raise LeaseLost("this controller does not hold the lease")
        now = self.clock()
        res = s.execute(update(ControllerLease)
                        .where(ControllerLease.name == LEASE_NAME, ControllerLease.token == self.token)
                        .values(renewed_at=now, expires_at=now + self.ttl_s)
                        .execution_options(synchronize_session=False))
        if getattr(res, "rowcount", 0) != 1:
            raise LeaseLost(f"the controller lease (token {self.token}) was taken over by another controller")

    def renew(self) -> None:
        """Extend the lease in a transaction of its own: LeaseLost when another controller took over."""
        with self.sessions.begin() as s:
            self.check(s)
        self._renewed = self.monotonic()

    def publish(self, heartbeat_timeout_s: float) -> None:
        """Say in the lease row what readers need to judge as this controller does (its heartbeat timeout):
        after the migration, which the lease is taken before."""
        with self.sessions.begin() as s:
            s.execute(update(ControllerLease)
                      .where(ControllerLease.name == LEASE_NAME, ControllerLease.token == self.token)
                      .values(heartbeat_timeout_s=heartbeat_timeout_s)
                      .execution_options(synchronize_session=False))

    def renew_if_due(self) -> None:
        """Each loop pass: renew when the last renewal is ttl_s / 5 old (2 s of a 10 s TTL)."""
        if self.monotonic() - self._renewed >= self.ttl_s / 5:
            self.renew()

    def release(self) -> None:
        """At a clean stop: a stand-by takes over at its next poll instead of after the TTL."""
        if self.token is None:
            return
        with self.sessions.begin() as s:
            s.execute(update(ControllerLease)
                      .where(ControllerLease.name == LEASE_NAME, ControllerLease.token == self.token)
                      .values(expires_at=0.0).execution_options(synchronize_session=False))
        self.token = None

    def fence(self, sessions: sessionmaker[Session]) -> None:
        """Every transaction of ``sessions`` that writes checks the lease just before it commits."""

        def on_execute(state: ORMExecuteState) -> None:
            if not state.is_select:
                state.session.info[_WROTE] = True

        def after_flush(session: Session, _ctx: Any) -> None:
            session.info[_WROTE] = True

        def before_commit(session: Session) -> None:
            if session.info.get(_WROTE) or session.new or session.dirty or session.deleted:
                self.check(session)
            session.info.pop(_WROTE, None)

        def after_rollback(session: Session) -> None:
            session.info.pop(_WROTE, None)

        event.listen(sessions, "do_orm_execute", on_execute)
        event.listen(sessions, "after_flush", after_flush)
        event.listen(sessions, "before_commit", before_commit)
        event.listen(sessions, "after_rollback", after_rollback)


@contextlib.contextmanager
def migration_lock(engine: Engine) -> Iterator[None]:
    """One controller at a time migrates the schema (two started at once on a new store would both create
    its tables): a file lock beside a SQLite store, an advisory lock on PostgreSQL."""
    if engine.dialect.name == "sqlite":
        db = engine.url.database
        if not db or db == ":memory:":
            yield
            return
        with open(f"{db}.migrate.lock", "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
            conn.commit()


def take_lease(engine: Engine, *, standby: bool, stopping: threading.Event, ttl_s: float = DEFAULT_TTL_S,
               poll_s: float = 1.0) -> Lease | None:
    """The lease for this process: at once when free; else, with ``standby``, wait for it (reading only
    the lease row: no stream, no other table), logging once per holder; without, LeaseHeld. None when
    ``stopping`` was set while standing by. The schema is migrated here only on a store that has no
    lease table yet (no lease-aware controller can run there); else the holder migrates, after this."""
    from orchestrator.store.db import migrate, sessions

    if "controller_lease" not in inspect(engine).get_table_names():
        with migration_lock(engine):
            migrate(engine)
    lease = Lease(sessions(engine), ttl_s=ttl_s)
    faults = FaultLog()
    announced: tuple[str, int] | None = None
    began = time.monotonic()
    while not stopping.is_set():
        try:
            held = lease.try_acquire()
        except Exception as e:
            kind = transient_kind(e)
            if kind is None:
                raise
            faults.fault(kind, e, poll_s)
            stopping.wait(poll_s)
            continue
        faults.recovered()
        if held is None:
            if announced is not None:
                log.warning("took over the controller lease (token %d) from %s after standing by %.1fs",
                            lease.token, announced[0], time.monotonic() - began)
            else:
                log.info("holding the controller lease (token %d) as %s", lease.token, lease.holder)
            return lease
        if not standby:
            raise LeaseHeld(f"refusing to start: {held.describe()}; stop it first, or start without "
                            "--no-standby to stand by and take over when it stops")
        if announced != (held.holder, held.token):
            log.warning("standing by: %s", held.describe())
            announced = (held.holder, held.token)
        stopping.wait(poll_s)
    return None


__all__ = ["Lease", "LeaseHeld", "LeaseLost", "make_holder", "migration_lock", "take_lease"]
