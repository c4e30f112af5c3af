"""The controller lease on a real PostgreSQL server: one winner among contenders started at once, the
migration lock, and a stale holder whose commit raises and writes nothing (READ COMMITTED)."""

from __future__ import annotations

import threading
from uuid import uuid4

import pytest
from sqlalchemy import select

from orchestrator.controller.lease import Lease, LeaseLost, migration_lock
from orchestrator.controller.transient import transient_kind
from orchestrator.queries import heartbeat_timeout
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.lease import current
from orchestrator.store.models import Schedule
from tests.pg import PgServer, pg_server  # noqa: F401  (fixture, used by name)

pytestmark = pytest.mark.integration


class Mono:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lease_on_postgres(pg_server: PgServer) -> None:  # noqa: F811
    engine = make_engine(pg_server.create_database(f"lease_{uuid4().hex[:8]}"))
    try:
        done: list[bool] = []

        def migrate_locked() -> None:              # two controllers migrating a new store at once
            with migration_lock(engine):
                migrate(engine)
            done.append(True)

        threads = [threading.Thread(target=migrate_locked) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert done == [True, True]

        won: list[bool] = []
        barrier = threading.Barrier(6)

        def contend(i: int) -> None:
            lease = Lease(sessions(engine), holder=f"elsewhere:{i}:x")
            barrier.wait()
            for _ in range(20):
                try:
                    won.append(lease.try_acquire() is None)
                    return
                except Exception as e:
                    assert transient_kind(e) == "store", e
            won.append(False)

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert won.count(True) == 1, won

        mono = Mono()
        view = current(sessions(engine))
        assert view is not None and view.token == 1
        stale = Lease(sessions(engine), holder=view.holder, monotonic=mono)
        stale.token = 1
        fenced = sessions(engine)
        stale.fence(fenced)
        with fenced.begin() as s:
            s.add(Schedule(name="kept", cron="* * * * *", submit={}, next_fire_at=1.0, created_at=1.0))
        taker = Lease(sessions(engine), holder="elsewhere:99:y", monotonic=mono)
        assert taker.try_acquire() is not None
        mono.t += 11
        assert taker.try_acquire() is None and taker.token == 2
        taker.publish(heartbeat_timeout_s=30.0)       # what readers judge hosts by (queries.heartbeat_timeout)
        with sessions(engine)() as s:
            assert heartbeat_timeout(s) == 30.0
        with pytest.raises(LeaseLost), fenced.begin() as s:
            s.add(Schedule(name="stale", cron="* * * * *", submit={}, next_fire_at=1.0, created_at=1.0))
        with sessions(engine)() as s:
            assert s.scalars(select(Schedule.name)).all() == ["kept"]
    finally:
        engine.dispose()
