"""A PostgreSQL primary and a streaming standby for the store failover test: the primary started as
:func:`tests.pg.start_postgres` does, with WAL for replication and **synchronous** commit to the standby (a commit
returns once the standby has flushed it: promoting it loses no committed transaction, which is what a lab store
needs from its replication; Patroni's ``synchronous_mode``), the standby made by ``pg_basebackup -R`` from it.

The store URL names both servers (libpq's multi-host form, as SQLAlchemy writes it) with
``target_session_attrs=read-write``: a connection goes to whichever of them is the primary now.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

from orchestrator.labs.lab import wait_for
from tests.pg import PG_DB_USER, TEST_DATABASE, PgServer, _chown_to_pg_user, find_pg_bindir

REPLICATION = ["wal_level=replica", "max_wal_senders=4", "synchronous_commit=on", "wal_sender_timeout=5s"]


@dataclass
class ReplicatedPg:
    primary: PgServer
    standby: PgServer

    def store_url(self, database: str = TEST_DATABASE) -> str:
        hosts = "&".join(f"host={s.host}:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql+psycopg://{PG_DB_USER}@/{database}?{hosts}&target_session_attrs=read-write"

    def streaming(self, how: tuple[str, str] = ("streaming", "sync")) -> bool:
        """The standby streams from the primary (``how``: pg_stat_replication's state and sync_state)."""
        try:
            with psycopg.connect(host=self.primary.host, port=self.primary.port, user=PG_DB_USER,
                                 dbname="postgres", connect_timeout=2) as conn:
                rows = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
        except psycopg.OperationalError:
            return False
        return how in [tuple(r) for r in rows]

    def promote(self) -> None:
        res = self.standby._run([str(self.standby.bindir / "pg_ctl"), "promote", "-D", str(self.standby.datadir),
                                 "-w", "-t", "30"], timeout=40)
        if res.returncode != 0:
            raise RuntimeError(f"pg_ctl promote failed:\n{res.stdout}\n{res.stderr}\n{self.standby.log_tail()}")

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            server.stop()


def _server(bindir: Path, settings: list[str]) -> PgServer:
    root = Path(tempfile.mkdtemp(prefix="labtest-pg-"))
    server = PgServer(bindir=bindir, root=root, settings=settings)
    _chown_to_pg_user(root)
    server.sockdir.mkdir()
    _chown_to_pg_user(server.sockdir)
    return server


def start_replicated_postgres() -> ReplicatedPg:
    bindir = find_pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (make test installs them)")
    primary = _server(bindir, REPLICATION)
    standby = _server(bindir, ["hot_standby=on"])
    pair = ReplicatedPg(primary, standby)
    try:
        primary.initdb()
        primary.start()
        primary.create_database(TEST_DATABASE)
        res = standby._run([str(bindir / "pg_basebackup"), "-h", primary.host, "-p", str(primary.port), "-U",
                            PG_DB_USER, "-D", str(standby.datadir), "-R", "-X", "stream", "-c", "fast",
                            "--no-sync"], timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed:\n{res.stdout}\n{res.stderr}")
        standby.start()
        wait_for(lambda: pair.streaming(("streaming", "async")), 60, "the standby to stream from the primary",
                 interval=0.1)
        # synchronous from now on (not before: with no standby yet, every commit would wait for ever)
        with psycopg.connect(host=primary.host, port=primary.port, user=PG_DB_USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        wait_for(lambda: pair.streaming(("streaming", "sync")), 60, "the standby to be synchronous", interval=0.1)
    except BaseException:
        pair.stop()
        raise
    return pair
