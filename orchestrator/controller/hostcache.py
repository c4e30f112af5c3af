"""The hosts as the scheduler reads them, kept between passes.

Each scheduling pass needs every host with its devices (liveness, quarantine, announced kinds, what the interlock
reads of each DUT): 1,000 hosts and their DUTs built anew every pass was a tenth of a 1,000-agent controller's time.
They change only when the controller writes them (it is the store's only writer): a registration, a health check,
a quarantine or a release. So the rows are kept (detached, as loaded, without facts or health) and loaded again once
a transaction of the controller's sessions has written a host or a device (``after_flush``: whatever wrote it), or
after :data:`REFRESH_S` at the latest. Only ``last_seen``, which every heartbeat moves, is read every pass (one
narrow query) and set on the kept rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import chain
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session, defer, selectinload, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value

from orchestrator.store.models import Device, Host

REFRESH_S = 30.0        # the kept rows are loaded again at least this often


class HostCache:
    def __init__(self, sessions: sessionmaker[Session], clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._rows: dict[str, Host] | None = None
        self._loaded_at = 0.0
        event.listen(sessions, "after_flush", self._after_flush)

    def _after_flush(self, session: Session, _ctx: Any) -> None:
        if self._rows is not None and any(isinstance(o, (Host, Device))
                                          for o in chain(session.new, session.dirty, session.deleted)):
            self._rows = None

    def invalidate(self) -> None:
        self._rows = None

    def hosts(self, s: Session) -> dict[str, Host]:
        """Every host with its devices (facts and health not loaded), ``last_seen`` as the store has it now."""
        if self._rows is None or self.clock() - self._loaded_at >= REFRESH_S:
            # facts and health are large JSON the scheduler never reads; the devices' observed state is (the
            # interlock reads it for every start)
            rows = {h.name: h for h in s.scalars(select(Host).options(
                defer(Host.facts), defer(Host.health), selectinload(Host.devices)))}
            for h in rows.values():
                s.expunge(h)            # (and its devices) kept between sessions, never written through
            self._rows, self._loaded_at = rows, self.clock()
            return dict(rows)
        rows = self._rows
        seen: dict[str, float | None] = {name: at for name, at in s.execute(select(Host.name, Host.last_seen))}
        if seen.keys() != rows.keys():     # a host added or removed by no flush of ours: load them all again
            self._rows = None
            return self.hosts(s)
        for name, at in seen.items():
            host = rows[name]
            if host.last_seen != at:
                set_committed_value(host, "last_seen", at)
        return dict(rows)
