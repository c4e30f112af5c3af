"""The controller's liveness writes (orchestrator.controller.liveness) and the scheduler's kept hosts
(orchestrator.controller.hostcache) on a real PostgreSQL store."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from orchestrator.store.db import make_engine, migrate, sessions
from orchestrator.store.models import Host
from tests.pg import PgServer, pg_server, pg_url  # noqa: F401  (fixtures, used by name)


def test_heartbeats_and_the_kept_hosts_on_postgres(pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    """The liveness column is written for a transaction's heartbeats in one statement at commit
    (orchestrator.controller.liveness), on PostgreSQL too; the scheduler's kept hosts see it."""
    from labcontract.facts import DeclaredDut, HostFacts
    from labcontract.protocol import Heartbeat, Register
    from orchestrator.artifacts import ArtifactStore
    from orchestrator.config import ControllerTuning
    from orchestrator.controller import Controller
    from tests.unit.conftest import Clock, RecordingDispatcher

    engine = make_engine(pg_url)
    migrate(engine)
    db = sessions(engine)
    clock = Clock()
    ctl = Controller(db, None, RecordingDispatcher(), ArtifactStore(tmp_path / "art"),  # type: ignore[arg-type]
                     ControllerTuning(), clock=clock)
    names = [f"pgbeat{i}" for i in range(3)]
    for name in names:
        ctl.handle_event(Register(host=name, agent_version="0.1.0", facts=HostFacts(hostname=name),
                                  duts=(DeclaredDut(name="dut0", path="/dev/loop9", kind="block",
                                                    size_bytes=1 << 30),)))
    with db() as s:
        assert set(ctl.host_cache.hosts(s)) >= set(names)
    clock.t += 7
    with db.begin() as s:                       # one read's heartbeats, one transaction
        for name in names:
            ctl._apply_event(s, Heartbeat(host=name))
    with db() as s:
        seen = {h.name: h.last_seen for h in s.scalars(select(Host).where(Host.name.in_(names)))}
        kept = ctl.host_cache.hosts(s)
    assert seen == dict.fromkeys(names, clock.t)
    assert all(kept[name].last_seen == clock.t for name in names)
