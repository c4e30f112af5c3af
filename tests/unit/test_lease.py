"""The controller lease on a real SQLite store: acquire, renew, take-over, and fencing of a stale
holder (its commit raises and writes nothing); and the controller's deadline on its own clock only."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, event, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from labcontract.protocol import Heartbeat, StepStarted, Submit
from orchestrator.controller import Controller
from orchestrator.controller.lease import Lease, LeaseLost
from orchestrator.controller.transient import FaultLog, transient_kind
from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.lease import current
from orchestrator.store.models import Attempt, Host, Schedule
from tests.unit.conftest import Clock, RecordingDispatcher
from tests.unit.test_controller import SUITE


class Mono:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    eng = make_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")
    migrate(eng)
    return eng


def pair(engine: Engine, mono: Mono) -> tuple[Lease, Lease]:
    """Two controllers on one store, each with its own sessionmakers (as two processes would have)."""
    return (Lease(sessions(engine), holder="other-host:1:a", ttl_s=10, monotonic=mono),
            Lease(sessions(engine), holder="other-host:2:b", ttl_s=10, monotonic=mono))


def test_first_acquires_second_stands_by_then_takes_over_after_ttl_unrenewed(engine: Engine) -> None:
    mono = Mono()
    a, b = pair(engine, mono)
    assert a.try_acquire() is None and a.token == 1
    seen = b.try_acquire()
    assert seen is not None and seen.holder == "other-host:1:a" and seen.token == 1 and b.token is None
    assert "holds the lease (token 1, renewed" in seen.describe()
    mono.t += 9
    a.renew()                                   # renewed: the stand-by's observation starts again
    assert b.try_acquire() is not None
    mono.t += 9.9
    assert b.try_acquire() is not None          # unchanged for 9.9 s < TTL
    mono.t += 0.2
    assert b.try_acquire() is None and b.token == 2
    view = current(sessions(engine))
    assert view is not None and (view.holder, view.token) == ("other-host:2:b", 2)
    with pytest.raises(LeaseLost, match="token 1"):
        a.renew()


def test_released_lease_is_taken_at_once(engine: Engine) -> None:
    a, b = pair(engine, Mono())
    assert a.try_acquire() is None
    a.release()
    assert b.try_acquire() is None and b.token == 2


def test_holder_dead_on_this_host_is_taken_at_once(engine: Engine) -> None:
    import socket
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    a = Lease(sessions(engine), holder=f"{socket.gethostname()}:{dead.pid}:x")
    assert a.try_acquire() is None
    b = Lease(sessions(engine))
    assert b.try_acquire() is None and b.token == 2


def test_holder_reacquires_its_own_lease(engine: Engine) -> None:
    a, _b = pair(engine, Mono())
    assert a.try_acquire() is None
    assert a.try_acquire() is None and a.token == 2


def test_two_contenders_at_once_exactly_one_wins(engine: Engine) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        lease = Lease(sessions(engine), holder=f"other-host:{i}:x")
        barrier.wait()
        for _ in range(50):
            try:
                results.append(lease.try_acquire() is None)
                return
            except Exception as e:     # database is locked: the loser of the write lock retries
                assert transient_kind(e) == "store", e
        results.append(False)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1, results


def fenced(engine: Engine, lease: Lease) -> sessionmaker[Session]:
    maker = sessions(engine)
    lease.fence(maker)
    return maker


def sched_row(name: str) -> Schedule:
    return Schedule(name=name, cron="* * * * *", submit={}, next_fire_at=1.0, created_at=1.0)


def test_stale_holder_commit_raises_and_writes_nothing(engine: Engine) -> None:
    mono = Mono()
    a, b = pair(engine, mono)
    assert a.try_acquire() is None
    a_db = fenced(engine, a)
    with a_db.begin() as s:                      # the holder writes
        s.add(sched_row("s1"))
    assert b.try_acquire() is not None
    mono.t += 11                                  # a paused past the TTL (SIGSTOP)
    assert b.try_acquire() is None and b.token == 2
    b_db = fenced(engine, b)
    with pytest.raises(LeaseLost), a_db.begin() as s:   # a resumes: its next write transaction fails whole
        s.add(sched_row("s2"))
        sched = s.get(Schedule, "s1")
        assert sched is not None
        sched.cron = "0 0 * * *"
    with pytest.raises(LeaseLost), a_db.begin() as s:   # also a bulk UPDATE (no ORM object)
        s.execute(update(Schedule).values(last_error="stale"))
    with a_db() as s:                            # reads still work (a stale holder only stops)
        assert s.scalars(select(Schedule.name)).all() == ["s1"]
    with sessions(engine)() as s:
        rows = {x.name: (x.cron, x.last_error) for x in s.scalars(select(Schedule))}
    assert rows == {"s1": ("* * * * *", "")}
    with b_db.begin() as s:                      # the new holder writes
        sched = s.get(Schedule, "s1")
        assert sched is not None
        sched.last_error = "fine"


def test_a_stale_controllers_heartbeats_are_fenced_too(engine: Engine, tmp_path: Path) -> None:
    """A heartbeat writes only the liveness column, at commit and without an ORM object
    (orchestrator.controller.liveness): a transaction of nothing but heartbeats still proves the lease first."""
    from labcontract.facts import DeclaredDut, HostFacts
    from labcontract.protocol import Register
    from orchestrator.artifacts import ArtifactStore

    mono = Mono()
    a, b = pair(engine, mono)
    assert a.try_acquire() is None
    clock = Clock()
    ctl = Controller(fenced(engine, a), None, RecordingDispatcher(), ArtifactStore(tmp_path / "art"),  # type: ignore[arg-type]
                     clock=clock)
    ctl.handle_event(Register(host="h1", agent_version="0.1.0", facts=HostFacts(hostname="h1"),
                              duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block", size_bytes=1 << 30),)))
    clock.t += 3
    ctl.handle_event(Heartbeat(host="h1"))         # the holder's heartbeat is written
    assert b.try_acquire() is not None
    mono.t += 11                                   # a paused past the TTL: b takes the lease
    assert b.try_acquire() is None
    clock.t += 3
    with pytest.raises(LeaseLost):
        ctl.handle_event(Heartbeat(host="h1"))
    with sessions(engine)() as s:
        host = s.get(Host, "h1")
        assert host is not None and host.last_seen == clock.t - 3


def test_read_only_transactions_do_not_touch_the_lease(engine: Engine) -> None:
    a, _b = pair(engine, Mono())
    assert a.try_acquire() is None
    before = current(sessions(engine))
    with fenced(engine, a).begin() as s:
        s.scalars(select(Host)).all()
    assert current(sessions(engine)) == before


def test_locked_store_is_transient(engine: Engine, tmp_path: Path) -> None:
    quick = make_engine(f"sqlite:///{tmp_path / 'store.sqlite'}")

    @event.listens_for(quick, "connect")
    def _short_wait(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.execute("PRAGMA busy_timeout=100")

    db = sqlite3.connect(tmp_path / "store.sqlite", timeout=0.1)
    db.execute("BEGIN EXCLUSIVE")                # another process holds the store
    try:
        with pytest.raises(OperationalError) as got:
            Lease(sessions(quick)).try_acquire()
        assert transient_kind(got.value) == "store", got.value
    finally:
        db.rollback()
        db.close()
        quick.dispose()


def test_fault_log_logs_once_per_interval_and_the_recovery(caplog: pytest.LogCaptureFixture) -> None:
    t = Mono()
    faults = FaultLog(every_s=30, clock=t)
    err = ConnectionError("x")
    for _ in range(70):                           # a 15 s outage, a pass every ~0.2 s
        faults.fault("redis", redis.ConnectionError("Connection refused"), 0.5)
        t.t += 0.2
    assert faults.degraded and faults.totals == {"redis": 70}
    t.t += 20
    faults.fault("redis", redis.ConnectionError("Connection refused"), 10)
    took = faults.recovered()
    assert took is not None and 33 < took < 35 and not faults.degraded
    lines = [r.getMessage() for r in caplog.records if r.name == "orchestrator.controller.transient"]
    assert len(lines) == 3, lines
    assert "redis (broker) unavailable (ConnectionError: Connection refused)" in lines[0]
    assert "still unavailable after 34s (71 failed attempts" in lines[1]
    assert "available again after 34.0s" in lines[2]
    assert faults.recovered() is None and transient_kind(err) is None


# --- the controller's deadline: its own clock only ------------------------------------------------------

@pytest.mark.parametrize("skew", [-300.0, 300.0])
def test_agent_clock_skew_never_makes_a_step_overdue(
        env: tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]], skew: float) -> None:
    ctl, disp, clock, db = env
    assert ctl.submit(Submit(run_id="r1", suite_source="two.yaml", suite_text=SUITE, host="h1", devices=("dut0",),
                             reply_to="lab:reply:x")).ok
    ctl.schedule()
    start = disp.starts()[0]
    ctl.handle_event(StepStarted(host="h1", attempt_id=start.attempt_id, pid=42, job_sha256="x",
                                 fio_started_at=clock.t + skew))    # the agent's clock, off by `skew`
    for dt in (1.0, 5.0, 20.0):
        clock.t += dt
        ctl.handle_event(Heartbeat(host="h1"))
        ctl.watch()
    assert not [m for kind, _h, m in disp.sent if kind == "cancel"], disp.sent
    with db() as s:
        att = s.get(Attempt, start.attempt_id)
        assert att is not None and att.state == "RUNNING" and not att.stop_cause
        assert not ctl._overdue(att, clock.t)
        assert ctl._overdue(att, (att.started_at or 0) + att.timeout_s + ctl.tuning.timeout_grace_s + 1)


def test_run_forever_waits_out_transient_faults_and_sets_up_again(
        env: tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import orchestrator.controller as controller_module

    ctl, *_ = env
    monkeypatch.setattr(controller_module, "BACKOFF_FIRST_S", 0.01)
    monkeypatch.setattr(controller_module, "BACKOFF_MAX_S", 0.02)
    setups, passes, renewals = [], [], []
    full = OperationalError("INSERT ...", {}, sqlite3.OperationalError("database or disk is full"))
    script: list[BaseException | None] = [full, full, full, redis.ConnectionError("refused"), None, None]

    def step() -> None:
        passes.append(1)
        outcome = script.pop(0)
        if not script:
            ctl.stop()
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(ctl, "setup", lambda: setups.append(1))
    monkeypatch.setattr(ctl, "step_once", step)
    monkeypatch.setattr(ctl, "redis", type("Pinged", (), {"ping": staticmethod(lambda: True)})())
    faults = FaultLog()
    ctl.run_forever(renew=lambda: renewals.append(1), faults=faults)
    assert faults.totals == {"store": 3, "redis": 1} and not faults.degraded
    assert len(setups) == 5 and len(renewals) == 6          # set up again after every failed pass
    lines = [r.getMessage() for r in caplog.records if r.name == "orchestrator.controller.transient"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("store unavailable (OperationalError: database or disk is full)")
    assert "available again after" in lines[1]


def test_run_forever_stops_on_other_errors_and_on_lease_lost(
        env: tuple[Controller, RecordingDispatcher, Clock, sessionmaker[Session]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctl, *_ = env
    monkeypatch.setattr(ctl, "setup", lambda: None)

    def lost() -> None:
        raise LeaseLost("taken over")

    with pytest.raises(LeaseLost):
        ctl.run_forever(renew=lost)

    def bug() -> None:
        raise KeyError("a bug is not waited out")

    monkeypatch.setattr(ctl, "step_once", bug)
    with pytest.raises(KeyError):
        ctl.run_forever()


def test_the_holder_says_its_heartbeat_timeout_and_readers_judge_hosts_by_it(tmp_path: Path) -> None:
    """The lease is taken before the holder migrates: on a store of the previous schema (0018) it is taken without
    the new column; once migrated the holder says its heartbeat timeout there, and a reader calls a host down after
    that many seconds, not the default's 10 (labctl hosts and queue, the web service)."""
    from alembic import command

    from orchestrator.queries import heartbeat_timeout, host_up
    from orchestrator.store.db import alembic_config

    eng = make_engine(f"sqlite:///{tmp_path / 'old.sqlite'}")
    command.upgrade(alembic_config(eng), "0018")
    lease = Lease(sessions(eng), holder="other-host:1:a", ttl_s=10)
    assert lease.try_acquire() is None and lease.token == 1
    migrate(eng)
    db = sessions(eng)
    with db() as s:
        assert heartbeat_timeout(s) == 10.0             # not said yet: the default's
    lease.publish(heartbeat_timeout_s=45.0)
    lease.renew()                                       # renewing keeps it
    with db() as s:
        limit = heartbeat_timeout(s)
        s.add(Host(name="h1", last_seen=1000.0))
        s.commit()
        h = s.get(Host, "h1")
    assert limit == 45.0
    assert host_up(h, 1030.0, limit) and not host_up(h, 1030.0) and not host_up(h, 1046.0, limit)
    stale = Lease(sessions(eng), holder="other-host:2:b", ttl_s=10)
    stale.token = 99
    stale.publish(heartbeat_timeout_s=5.0)              # not the holder: changes nothing
    with db() as s:
        assert heartbeat_timeout(s) == 45.0
