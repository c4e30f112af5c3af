"""The hosts' liveness column, written for a transaction's every heartbeat in one statement.

A heartbeat without health checks (a lab's every heartbeat: 1,000 agents send 330 a second) changes only
``hosts.last_seen``. :class:`~orchestrator.controller.events.EventsMixin` notes it in the session (:data:`SEEN`) and
:func:`write_seen`, the ``before_commit`` hook of the controller's sessions (:func:`listen`), writes them all in
one UPDATE: no host row is loaded, nor its facts decoded, and no statement is built per heartbeat.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, event, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from orchestrator.store.models import Host

SEEN = "lab_seen"       # Session.info: host -> when a heartbeat of this transaction saw it
_hosts = cast(Table, Host.__table__)
_SEEN_UPDATE = update(_hosts).where(_hosts.c.name == bindparam("seen_host")).values(last_seen=bindparam("seen_at"))


def write_seen(s: Session) -> None:
    """The liveness column of the hosts the transaction's heartbeats saw (an unknown host: no row, nothing)."""
    seen = s.info.pop(SEEN, None)
    if not seen:
        return
    s.flush()               # a host registered in this transaction has its row before its heartbeat is written
    # through the session: a write the lease's fence sees (orchestrator.controller.lease), checked before commit
    s.execute(_SEEN_UPDATE, [{"seen_host": h, "seen_at": t} for h, t in seen.items()])
    for host, at in seen.items():     # and the rows this session holds say so
        loaded = s.identity_map.get(identity_key(Host, host))
        if isinstance(loaded, Host):
            set_committed_value(loaded, "last_seen", at)


def listen(sessions: sessionmaker[Session]) -> None:
    """Every transaction of ``sessions`` writes its heartbeats as it commits (once, however often called), first of
    the hooks: before the lease's fence checks the transaction's writes."""
    if not event.contains(sessions, "before_commit", write_seen):
        event.listen(sessions, "before_commit", write_seen, insert=True)
