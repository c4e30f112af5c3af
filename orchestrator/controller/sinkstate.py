"""The notification sinks' delivery state in the store (``notify_sinks``, schema 0017): which sinks the controller
delivers to (redacted: a file's path, a webhook's scheme and host, keys with a hash of the URL), where each was
configured, and how delivery goes: runs taken, last success, last failure and its reason, runs pending.

Written by the loop only (the controller is the store's only writer), from what the sinks' threads report
(orchestrator.controller.notify.Delivered), and only when something changed: an idle lab writes nothing. Read by
the web service (``GET /api/notifications``, the hosts page) and ``labctl notifications`` through
:func:`orchestrator.notifysinks.listing`, so the three show the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.controller.notify import Delivered, Sink
from orchestrator.notifysinks import sink_id
from orchestrator.store.models import NotifySink

REASON_MAX = 300
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def clean_reason(reason: str) -> str:
    """A failure's reason as stored: one line, bounded (it may come from a webhook's answer)."""
    return _CONTROL.sub(" ", reason).strip()[:REASON_MAX] or "failed"


class SinkStates:
    """The store's rows of the sinks a controller delivers to; :meth:`start` once, :meth:`record` each pass."""

    def __init__(self, sessions: sessionmaker[Session], sinks: Sequence[Sink], origins: dict[str, str],
                 clock: Callable[[], float]) -> None:
        self.sessions, self.sinks, self.origins, self.clock = sessions, list(sinks), origins, clock
        self._pending: dict[str, int] = {}

    def start(self) -> None:
        """This controller's sinks active (new ones added), every other one inactive (its history kept)."""
        now = self.clock()
        mine = {sink_id(s.key): s for s in self.sinks}
        with self.sessions.begin() as s:
            for row in s.scalars(select(NotifySink)):
                if row.id not in mine and row.active:
                    row.active, row.pending, row.updated_at = False, 0, now
            for sid, sink in mine.items():
                row = s.get(NotifySink, sid) or NotifySink(id=sid, key=sink.key, delivered=0, last_error="",
                                                                failing=False)
                s.add(row)
                row.kind, row.target, row.active, row.pending = sink.kind, sink.target, True, 0
                row.origin, row.updated_at = self.origins.get(sink.key, "option"), now
        self._pending = dict.fromkeys(mine, 0)

    def record(self, reports: Sequence[Delivered], pending: dict[str, int]) -> None:
        """Write down the attempts ``reports`` and each sink's pending runs, if anything changed."""
        counts = {sink_id(k): n for k, n in pending.items()}
        changed = {sid for sid, n in counts.items() if self._pending.get(sid) != n}
        changed |= {sink_id(d.sink) for d in reports}
        if not changed:
            return
        now = self.clock()
        with self.sessions.begin() as s:
            for sid in changed:
                row = s.get(NotifySink, sid)
                if row is None:
                    continue
                for d in reports:
                    if sink_id(d.sink) != sid:
                        continue
                    if d.error:
                        row.last_failure_at, row.last_error, row.failing = now, clean_reason(d.error), True
                    else:
                        row.last_success_at, row.delivered, row.failing = now, row.delivered + 1, False
                row.pending, row.updated_at = counts.get(sid, 0), now
        self._pending.update(counts)
