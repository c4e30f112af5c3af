"""The results store on a real PostgreSQL server (a private one, started by tests/pg.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, event, inspect, select, text
from sqlalchemy.types import JSON, BigInteger, Float

from orchestrator.store.db import alembic_config, make_engine, migrate, sessions
from orchestrator.store.models import Artifact, Attempt, Base, Device, Host, Result, Run, Step
from tests.conftest import QUICK_SUITE, start_lab
from tests.pg import PgServer, pg_server, pg_url  # noqa: F401  (fixtures, used by name)

pytestmark = pytest.mark.integration

TB4 = 4 * 10**12                 # a 4 TB device, far beyond a 32-bit integer
BIG = 2**40 + 12345              # and a few more sizes > 2**31, not round in any base


def head_revision(engine: Engine) -> str:
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    assert head is not None
    return head


def record_sql(engine: Engine) -> list[str]:
    """Every statement the engine sends from now on."""
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)
    return statements


def test_migrate_creates_the_schema_and_is_idempotent(pg_server: PgServer) -> None:  # noqa: F811
    engine = make_engine(pg_server.create_database("migrate"))
    try:
        assert engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        assert inspect(engine).get_table_names() == []
        migrate(engine)
        head = head_revision(engine)
        with engine.connect() as c:
            assert c.scalars(text("SELECT version_num FROM alembic_version")).all() == [head]
        insp = inspect(engine)
        assert set(insp.get_table_names()) == {*Base.metadata.tables, "alembic_version"}
        # every column of the models exists with the kind of type the models declare
        for name, table in Base.metadata.tables.items():
            cols = {c["name"]: c["type"] for c in insp.get_columns(name)}
            assert set(cols) == set(table.columns.keys()), name
            for col in table.columns:
                if isinstance(col.type, BigInteger):
                    assert isinstance(cols[col.name], BigInteger), (name, col.name, cols[col.name])
                if isinstance(col.type, JSON):
                    assert isinstance(cols[col.name], JSON), (name, col.name, cols[col.name])
                if isinstance(col.type, Float):   # double precision, not real
                    assert getattr(cols[col.name], "precision", None) in (None, 53), (name, col.name)
        # a row written before the second migrate survives it
        with sessions(engine).begin() as s:
            s.add(Host(name="h1", facts={"k": 1}))

        statements = record_sql(engine)
        migrate(engine)
        ddl = [st for st in statements if st.split(None, 1)[0].upper() in ("CREATE", "ALTER", "DROP")]
        assert ddl == [], ddl
        assert not any(st.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) for st in statements)
        with engine.connect() as c:
            assert c.scalars(text("SELECT version_num FROM alembic_version")).all() == [head]
            assert c.scalars(text("SELECT name FROM hosts")).all() == ["h1"]
    finally:
        engine.dispose()


def test_suite_runs_end_to_end_with_the_store_on_postgres(pg_url: str, tmp_path: Path) -> None:  # noqa: F811
    handle = start_lab(tmp_path / "lab", store_url=pg_url)
    try:
        assert handle.sessions.kw["bind"].dialect.name == "postgresql"
        run_id = handle.submit(QUICK_SUITE, runtime=1)
        d = handle.wait_run(run_id, timeout=60)
        assert d.run.state == "SUCCEEDED", d.run.reason
        assert [st.state for st in d.steps] == ["SUCCEEDED", "SUCCEEDED"]
        assert [st.name for st in d.steps] == ["4k-randread", "8k-randrw"]
        for step in d.steps:
            res = d.results[step.id]
            assert res.iops > 0 and res.bw_bytes > 0 and res.runtime_ms >= 900
            assert res.fio_version.startswith("fio-")
            assert "combined" in res.metrics
            prov = res.provenance
            assert prov["host"]["hostname"] == handle.host and prov["host"]["fio_version"] == res.fio_version
            assert prov["device"]["path"] == handle.duts["dut0"].path
            assert prov["device"]["size_bytes"] == 128 << 20
            assert {a.name for a in step.attempts[0].artifacts} >= {"fio.json", "job.fio"}
        mixed = d.results[d.steps[1].id]
        assert mixed.read_iops > 0 and mixed.write_iops > 0

        runs = handle.labctl("runs")
        assert runs.returncode == 0, runs.stderr
        assert run_id in runs.stdout and "SUCCEEDED" in runs.stdout
        show = handle.labctl("run", "show", run_id[:12])
        assert show.returncode == 0, show.stderr
        assert run_id in show.stdout and "4k-randread" in show.stdout and "8k-randrw" in show.stdout
        assert "avg lat us" in show.stdout and handle.duts["dut0"].path in show.stdout
    finally:
        handle.lab.stop()
        handle.sessions.kw["bind"].dispose()


def test_sizes_beyond_32_bits_round_trip(pg_server: PgServer) -> None:  # noqa: F811
    engine = make_engine(pg_server.create_database("bigints"))
    try:
        migrate(engine)
        make = sessions(engine)
        now = time.time()
        metrics = {"combined": {"io_bytes": BIG, "iops": 1.0}, "read": {"io_bytes": TB4}}
        provenance = {"host": {"memory_bytes": BIG}, "device": {"path": "/dev/nvme0n1", "size_bytes": TB4}}
        with make.begin() as s:
            host = Host(name="bighost", facts={"memory_bytes": BIG}, registered_at=now, last_seen=now)
            host.devices.append(Device(name="nvme0", path="/dev/nvme0n1", kind="block", size_bytes=TB4,
                                       model="Big SSD", serial="S1", firmware="F1"))
            run = Run(id="r-big", suite_name="big", suite_source="big.yaml", suite_text="x",
                      suite_sha256="0" * 64, host="bighost", device="/dev/nvme0n1", state="SUCCEEDED",
                      submitted_at=now)
            step = Step(id="r-big-0", seq=0, name="w", workload={"size": TB4}, job_text="[w]\n",
                        state="SUCCEEDED")
            att = Attempt(id="r-big-0-1", number=1, host="bighost", device="/dev/nvme0n1", state="SUCCEEDED",
                          timeout_s=60)
            att.artifacts.append(Artifact(name="fio.json", sha256="a" * 64, size=BIG, path="r-big/fio.json"))
            step.attempts.append(att)
            run.steps.append(step)
            s.add_all([host, run])
            s.flush()
            s.add(Result(attempt_id=att.id, step_id=step.id, run_id=run.id, read_iops=1.5e6, write_iops=0.0,
                         iops=1.5e6, read_bw_bytes=7.25e9, write_bw_bytes=0.0, bw_bytes=7.25e9,
                         lat_max_ns=float(BIG), runtime_ms=2_000_000_000, fio_version="fio-3.33",
                         metrics=metrics, provenance=provenance, created_at=now))

        with make() as s:
            dev = s.scalars(select(Device).where(Device.name == "nvme0")).one()
            assert dev.size_bytes == TB4 and type(dev.size_bytes) is int
            assert s.scalars(select(Device.id).where(Device.size_bytes > 2**31)).all() == [dev.id]
            art = s.scalars(select(Artifact)).one()
            assert art.size == BIG
            res = s.scalars(select(Result)).one()
            assert res.bw_bytes == 7.25e9 and res.lat_max_ns == float(BIG)
            assert res.metrics == metrics and res.provenance == provenance
            assert res.provenance["device"]["size_bytes"] == TB4
            got = s.get(Host, "bighost")
            assert got is not None and got.facts["memory_bytes"] == BIG
            assert s.get(Step, "r-big-0").workload["size"] == TB4  # type: ignore[union-attr]
        # and the database itself holds them as 64-bit integers (not floats or text)
        with engine.connect() as c:
            assert c.scalar(text("SELECT pg_typeof(size_bytes)::text FROM devices")) == "bigint"
            assert c.scalar(text("SELECT size_bytes FROM devices")) == TB4
    finally:
        engine.dispose()


def test_0014_fingerprints_steps_on_postgres_and_results_stored_before_keep_reading(
        pg_server: PgServer) -> None:  # noqa: F811
    """Schema 0014 on PostgreSQL: the steps stored at 0013 get the fingerprint of what they ran (the same workload on
    another device the same one, another engine another, no job text none), a result stored before the lab kept
    completion latency, fio's and the host's CPU reads in compare's figures and the export with those empty, and
    the downgrade removes the column."""
    import io
    import json

    from alembic import command

    from orchestrator.cellmetrics import storage_values
    from orchestrator.export import export
    from orchestrator.queries import run_detail
    from orchestrator.store.fingerprint import fingerprint

    engine = make_engine(pg_server.create_database("fp0014"))
    try:
        command.upgrade(alembic_config(engine), "0013")
        job = "[global]\nfilename={dev}\nioengine={engine}\ndirect=1\nruntime=60\n\n[w]\nrw=randread\nbs=4k\n"
        rows = {"r1-s000": job.format(dev="/dev/nvme0n1", engine="libaio"),
                "r1-s001": job.format(dev="/dev/nvme1n1", engine="libaio"),
                "r1-s002": job.format(dev="/dev/nvme0n1", engine="psync"), "r1-s003": ""}
        old_metrics = {"fio_version": "fio-3.33", "jobs": 1, "runtime_ms": 1000, "errors": 0,
                       "read": {"ios": 1000, "io_bytes": 4096000, "iops": 1000.0, "bw_bytes": 4096000.0,
                                "runtime_ms": 1000, "lat": None},
                       "write": {"ios": 0, "io_bytes": 0, "iops": 0.0, "bw_bytes": 0.0, "runtime_ms": 0, "lat": None},
                       "combined": {"iops": 1000.0, "bw_bytes": 4096000.0, "ios": 1000, "lat_mean_ns": 90000.0,
                                    "lat_max_ns": 900000.0, "lat_stddev_ns": 9000.0,
                                    "percentiles_ns": {"p99": 300000.0}}}
        with engine.begin() as c:
            c.execute(text(
                "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, state, reason,"
                " priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1', '/dev/nvme0n1',"
                " 'SUCCEEDED', '', 0, 1.0)"))
            for seq, (sid, job_text) in enumerate(rows.items()):
                c.execute(text(
                    "INSERT INTO steps (id, run_id, seq, name, job_text, state, reason, kind, cell, note, round, host)"
                    " VALUES (:id, 'r1', :seq, 'w', :t, 'SUCCEEDED', '', 'measure', :cell, '', 0, '')"),
                    {"id": sid, "seq": seq, "t": job_text, "cell": json.dumps({"profile": f"p{seq}"})})
            c.execute(text("INSERT INTO attempts (id, step_id, number, host, device, state, reason, timeout_s, "
                           "dispatch_count) VALUES ('r1-s000-a1', 'r1-s000', 1, 'h1', '/dev/nvme0n1', 'SUCCEEDED', "
                           "'', 60, 1)"))
            c.execute(text(
                "INSERT INTO results (attempt_id, step_id, run_id, kind, tool, tool_version, throughput, "
                "throughput_unit, iops, bw_bytes, lat_mean_ns, lat_max_ns, lat_stddev_ns, lat_p99_ns, runtime_ms, "
                "fio_version, metrics, provenance, created_at) VALUES ('r1-s000-a1', 'r1-s000', 'r1', 'fio', 'fio', "
                "'fio-3.33', 1000, 'IOPS', 1000, 4096000, 90000, 900000, 9000, 300000, 1000, 'fio-3.33', :m, '{}', "
                "2.0)"), {"m": json.dumps(old_metrics)})
        migrate(engine)
        with sessions(engine)() as s:
            got = {st.id: st.fingerprint for st in s.scalars(select(Step))}
            assert got["r1-s000"] == got["r1-s001"] == fingerprint("measure", rows["r1-s000"]) != ""
            assert got["r1-s002"] not in ("", got["r1-s000"]) and got["r1-s003"] == ""
            d = run_detail(s, "r1")
            values = storage_values(d.results["r1-s000"])
            assert values["iops"] == 1000.0 and values["lat_p99_us"] == 300.0
            assert [values[k] for k in ("clat_p99_us", "lat_p99_99_us", "cpu_us_per_io", "host_cpu_pct")] == \
                [None] * 4
            buf = io.StringIO()
            export([d], "json", "results", None, buf, "binary")
        (row,) = json.loads(buf.getvalue())["results"]
        assert row["mib_s"] == pytest.approx(4096000 / 2**20) and row["clat_p99_us"] is None
        assert row["host_cpu_pct"] is None and row["lat_p99_us"] == 300.0
        command.downgrade(alembic_config(engine), "0013")
        assert "fingerprint" not in {c["name"] for c in inspect(engine).get_columns("steps")}
        migrate(engine)
        with engine.connect() as c:
            assert c.scalars(text("SELECT fingerprint FROM steps WHERE id = 'r1-s001'")).one() == got["r1-s001"]
    finally:
        engine.dispose()


def test_0017_keeps_the_notification_sinks_state_on_postgres(pg_server: PgServer) -> None:  # noqa: F811
    """Schema 0017 on PostgreSQL: the controller's sinks recorded (a file sink's key of any length: the row id is
    its hash), a failure with its reason then a success, listed as the web service lists them; the downgrade drops
    the table and the upgrade makes it again."""
    from alembic import command

    from orchestrator.controller.notify import Delivered, FileSink, WebhookSink
    from orchestrator.controller.sinkstate import SinkStates
    from orchestrator.notifysinks import listing

    engine = make_engine(pg_server.create_database("sinks0017"))
    try:
        command.upgrade(alembic_config(engine), "0016")
        migrate(engine)
        db = sessions(engine)
        clock = iter(range(100, 200))
        hook = WebhookSink("https://ci.lab/hooks/T0/s3cret", 3.0)
        deep = FileSink(Path("/var/lib/storagelab/" + "d" * 3000 + "/runs.jsonl"))
        states = SinkStates(db, [deep, hook], {hook.key: "lab file"}, lambda: float(next(clock)))
        states.start()
        states.record([Delivered("r1", hook.key, "Service Unavailable\r\nX-Injected: 1", final=False),
                       Delivered("r1", deep.key)], {hook.key: 1, deep.key: 0})
        with db() as s:
            rows = {r["kind"]: r for r in listing(s)}
        assert rows["webhook"]["state"] == "failing" and rows["webhook"]["pending"] == 1
        assert rows["webhook"]["last_error"] == "Service Unavailable X-Injected: 1"     # one line, bounded
        assert rows["webhook"]["origin"] == "lab file" and "s3cret" not in repr(rows)
        assert rows["file"]["state"] == "ok" and rows["file"]["key"] == deep.key and rows["file"]["origin"] == "option"
        states.record([Delivered("r1", hook.key)], {hook.key: 0, deep.key: 0})
        with db() as s:
            hook_row = next(r for r in listing(s) if r["kind"] == "webhook")
        assert (hook_row["state"], hook_row["delivered"], hook_row["pending"]) == ("ok", 1, 0)
        command.downgrade(alembic_config(engine), "0016")
        assert "notify_sinks" not in inspect(engine).get_table_names()
        migrate(engine)
        assert "notify_sinks" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
