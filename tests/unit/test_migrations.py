"""Schema migrations keep existing data: a store created at 0001 with a run in it, upgraded to head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from orchestrator.store.db import alembic_config, make_engine, migrate, schema_drift
from orchestrator.store.models import Result, Run, Step

HEAD = "0019"

# the run list's OP-mode index (0011) is an expression, which autogenerate cannot reflect and says so
pytestmark = pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")


def test_upgrade_from_0001_keeps_runs_and_steps(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'old.sqlite'}")
    command.upgrade(alembic_config(engine), "0001")
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, state, reason,"
            " priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1', '/dev/loop3', 'SUCCEEDED',"
            " '', 0, 1.0)"))
        for seq in (0, 1):
            c.execute(sa.text(
                "INSERT INTO steps (id, run_id, seq, name, workload, job_text, state, reason) VALUES "
                f"('r1-s00{seq}', 'r1', {seq}, 'w{seq}', :w, '[global]', 'SUCCEEDED', '')"),
                {"w": json.dumps({"name": f"w{seq}", "rw": "read", "bs": 4096})})
    migrate(engine)
    with sa.orm.Session(engine) as s:
        run = s.get(Run, "r1")
        assert run is not None and run.devices == ["/dev/loop3"] and run.live is True
        steps = sorted(run.steps, key=lambda st: st.seq)
        assert [(st.id, st.kind, st.round, st.cell) for st in steps] == [
            ("r1-s000", "measure", 0, {}), ("r1-s001", "measure", 0, {})]
        s.add(Step(id="r1-s001-r002", run_id="r1", seq=1, round=2, kind="precondition", name="p", cell={},
                   note="", workload=None, job_text="", state="PENDING", reason=""))
        s.commit()          # (run_id, seq) is no longer unique: rounds share a seq
        s.add(Step(id="dup", run_id="r1", seq=1, round=2, kind="precondition", name="p", cell={}, note="",
                   workload=None, job_text="", state="PENDING", reason=""))
        with pytest.raises(sa.exc.IntegrityError):
            s.commit()
    with engine.connect() as c:
        assert schema_drift(c) == []


def test_0009_adds_lat_hist_and_keeps_older_results(tmp_path: Path) -> None:
    """A result stored at schema 0008 survives the upgrade with no histogram; a new one stores its bins."""
    engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    command.upgrade(alembic_config(engine), "0008")
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, devices, live,"
            " state, reason, priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1', '/dev/loop3',"
            " '[]', 1, 'SUCCEEDED', '', 0, 1.0)"))
        c.execute(sa.text(
            "INSERT INTO steps (id, run_id, seq, round, kind, name, cell, note, job_text, host, state, reason)"
            " VALUES ('r1-s000', 'r1', 0, 0, 'measure', 'w', '{}', '', '', '', 'SUCCEEDED', '')"))
        c.execute(sa.text(
            "INSERT INTO attempts (id, step_id, number, host, device, state, reason, timeout_s, dispatch_count)"
            " VALUES ('r1-s000-a1', 'r1-s000', 1, 'h1', '/dev/loop3', 'SUCCEEDED', '', 60, 1)"))
        c.execute(sa.text(
            "INSERT INTO results (attempt_id, step_id, run_id, read_iops, write_iops, iops, read_bw_bytes,"
            " write_bw_bytes, bw_bytes, runtime_ms, fio_version, metrics, provenance, created_at) VALUES"
            " ('r1-s000-a1', 'r1-s000', 'r1', 1, 0, 1, 4096, 0, 4096, 1000, 'fio-3.33', '{}', '{}', 2.0)"))
    migrate(engine)
    with engine.connect() as c:
        assert c.scalar(sa.text("SELECT version_num FROM alembic_version")) == HEAD
        assert schema_drift(c) == []
    with sa.orm.Session(engine) as s:
        (old,) = s.scalars(sa.select(Result)).all()
        assert old.lat_hist is None and old.iops == 1 and old.fio_version == "fio-3.33"
        old.lat_hist = {"read": [[1000, 3]], "write": []}
        s.commit()
    with sa.orm.Session(engine) as s:
        assert s.scalars(sa.select(Result)).one().lat_hist == {"read": [[1000, 3]], "write": []}
    command.downgrade(alembic_config(engine), "0008")
    with engine.connect() as c:
        assert "lat_hist" not in {col["name"] for col in sa.inspect(c).get_columns("results")}


def _store_at_0009_with_a_fio_and_a_net_result(path: Path) -> sa.Engine:
    engine = make_engine(f"sqlite:///{path}")
    command.upgrade(alembic_config(engine), "0009")
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, devices, live,"
            " state, reason, priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1', '/dev/loop3',"
            " '[]', 1, 'SUCCEEDED', '', 0, 1.0)"))
        for sid, kind in (("r1-s000", "measure"), ("r1-s001", "net")):
            c.execute(sa.text(
                "INSERT INTO steps (id, run_id, seq, round, kind, name, cell, note, job_text, host, state, reason)"
                f" VALUES ('{sid}', 'r1', {sid[-1]}, 0, '{kind}', 'w', '{{}}', '', '', '', 'SUCCEEDED', '')"))
            c.execute(sa.text(
                "INSERT INTO attempts (id, step_id, number, host, device, state, reason, timeout_s, dispatch_count)"
                f" VALUES ('{sid}-a1', '{sid}', 1, 'h1', '/dev/loop3', 'SUCCEEDED', '', 60, 1)"))
        c.execute(sa.text(
            "INSERT INTO results (attempt_id, step_id, run_id, read_iops, write_iops, iops, read_bw_bytes,"
            " write_bw_bytes, bw_bytes, runtime_ms, fio_version, metrics, provenance, created_at) VALUES"
            " ('r1-s000-a1', 'r1-s000', 'r1', 1500, 0, 1500, 4096, 0, 6144000, 1000, 'fio-3.33', '{}', '{}', 2.0)"))
        c.execute(sa.text(
            "INSERT INTO results (attempt_id, step_id, run_id, read_iops, write_iops, iops, read_bw_bytes,"
            " write_bw_bytes, bw_bytes, runtime_ms, fio_version, metrics, provenance, created_at) VALUES"
            " ('r1-s001-a1', 'r1-s001', 'r1', 0, 0, 800, 0, 0, 1250000000, 5000, 'iscsi', '{}', '{}', 3.0)"))
    return engine


def test_0010_backfills_kind_neutral_columns(tmp_path: Path) -> None:
    """A fio row becomes kind fio (tool fio, its version, IOPS); a network row kind net with its tool moved
    out of fio_version and its Gbps as throughput. fio's figures may then be NULL (an application result)."""
    engine = _store_at_0009_with_a_fio_and_a_net_result(tmp_path / "r.sqlite")
    migrate(engine)
    with engine.connect() as c:
        assert c.scalar(sa.text("SELECT version_num FROM alembic_version")) == HEAD
        assert schema_drift(c) == []
    with sa.orm.Session(engine) as s:
        fio, net = sorted(s.scalars(sa.select(Result)).all(), key=lambda r: r.step_id)
        assert (fio.kind, fio.tool, fio.tool_version, fio.throughput, fio.throughput_unit, fio.fio_version) == (
            "fio", "fio", "fio-3.33", 1500, "IOPS", "fio-3.33")
        assert (net.kind, net.tool, net.tool_version, net.throughput_unit, net.fio_version) == (
            "net", "iscsi", "", "Gbps", None)
        assert net.throughput == pytest.approx(10.0) and net.iops == 800
        s.execute(sa.text(
            "INSERT INTO attempts (id, step_id, number, host, device, state, reason, timeout_s, dispatch_count)"
            " VALUES ('r1-s001-a2', 'r1-s001', 2, 'h1', '/dev/loop3', 'SUCCEEDED', '', 60, 1)"))
        s.execute(sa.text(
            "INSERT INTO attempts (id, step_id, number, host, device, state, reason, timeout_s, dispatch_count)"
            " VALUES ('r1-s000-a2', 'r1-s000', 2, 'h1', '/dev/loop3', 'SUCCEEDED', '', 60, 1)"))
        legacy = Result(attempt_id="r1-s000-a2", step_id="r1-s000", run_id="r1", read_iops=7.0, write_iops=0.0,
                        iops=7.0, read_bw_bytes=1.0, write_bw_bytes=0.0, bw_bytes=1.0, runtime_ms=1,
                        fio_version="fio-3.36", metrics={}, provenance={}, created_at=3.5)
        s.add(legacy)            # a writer of 0009's shape: a fio row
        s.flush()
        assert (legacy.kind, legacy.tool, legacy.tool_version, legacy.throughput, legacy.throughput_unit) == (
            "fio", "fio", "fio-3.36", 7.0, "IOPS")
        s.delete(legacy)
        s.add(Result(attempt_id="r1-s001-a2", step_id="r1-s001", run_id="r1", kind="pgbench", tool="pgbench",
                     tool_version="15.8", throughput=812.5, throughput_unit="TPS", runtime_ms=3000, metrics={},
                     provenance={}, created_at=4.0))
        s.commit()
    command.downgrade(alembic_config(engine), "0009")
    with engine.connect() as c:
        rows = c.execute(sa.text("SELECT step_id, fio_version, iops FROM results ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [("r1-s000", "fio-3.33", 1500), ("r1-s001", "iscsi", 800),
                                            ("r1-s001", "pgbench", 0)]
        assert "kind" not in {col["name"] for col in sa.inspect(c).get_columns("results")}


def test_0011_adds_tokens_and_run_columns_and_keeps_runs(tmp_path: Path) -> None:
    """A run stored at 0010 reads back as submitted by nobody known (""), never rerun, uncapped; the token table
    holds a hash once (unique); the downgrade drops both."""
    from orchestrator.store.models import ApiToken

    engine = _store_at_0009_with_a_fio_and_a_net_result(tmp_path / "r.sqlite")
    command.upgrade(alembic_config(engine), "0010")
    migrate(engine)
    with engine.connect() as c:
        assert c.scalar(sa.text("SELECT version_num FROM alembic_version")) == HEAD
        assert schema_drift(c) == []
    with sa.orm.Session(engine) as s:
        run = s.get(Run, "r1")
        assert run is not None and (run.submitted_by, run.max_rounds, run.rerun_count) == ("", None, 0)
        s.add(ApiToken(name="ci", role="engineer", token_sha256="a" * 64, created_at=1.0, created_by="labctl"))
        s.commit()
        s.add(ApiToken(name="ci2", role="viewer", token_sha256="a" * 64, created_at=2.0))
        with pytest.raises(sa.exc.IntegrityError):
            s.commit()
    command.downgrade(alembic_config(engine), "0010")
    with engine.connect() as c:
        assert "submitted_by" not in {col["name"] for col in sa.inspect(c).get_columns("runs")}
        assert "api_tokens" not in sa.inspect(c).get_table_names()


def test_0014_fingerprints_the_steps_stored_before_it(tmp_path: Path) -> None:
    """Every step stored at 0013 gets the fingerprint of what it ran: the same workload on another device path
    the same one, another engine another, a step without a job text none; a step added after gets it too."""
    from orchestrator.store.fingerprint import fingerprint

    engine = make_engine(f"sqlite:///{tmp_path / 'f.sqlite'}")
    command.upgrade(alembic_config(engine), "0013")
    job = "[global]\nfilename={dev}\nioengine={engine}\ndirect=1\nruntime=60\n\n[w]\nrw=randread\nbs=4k\n"
    rows = {"r1-s000": job.format(dev="/dev/nvme0n1", engine="libaio"),
            "r1-s001": job.format(dev="/dev/nvme1n1", engine="libaio"),
            "r1-s002": job.format(dev="/dev/nvme0n1", engine="psync"), "r1-s003": ""}
    with engine.begin() as c:
        c.execute(sa.text(
            "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, state, reason,"
            " priority, submitted_at) VALUES ('r1', 's', 's.yaml', 'suite: s', 'x', 'h1', '/dev/nvme0n1',"
            " 'SUCCEEDED', '', 0, 1.0)"))
        for seq, (sid, text) in enumerate(rows.items()):
            c.execute(sa.text(
                "INSERT INTO steps (id, run_id, seq, name, job_text, state, reason, kind, cell, note, round, host)"
                " VALUES (:id, 'r1', :seq, 'w', :t, 'SUCCEEDED', '', 'measure', '{}', '', 0, '')"),
                {"id": sid, "seq": seq, "t": text})
    migrate(engine)
    with sa.orm.Session(engine) as s:
        got = {st.id: st.fingerprint for st in s.scalars(sa.select(Step))}
        assert got["r1-s000"] == got["r1-s001"] == fingerprint("measure", rows["r1-s000"]) != ""
        assert got["r1-s002"] not in ("", got["r1-s000"]) and got["r1-s003"] == ""
        s.add(Step(id="r1-s004", run_id="r1", seq=4, kind="measure", name="w", cell={}, note="", workload=None,
                   job_text=rows["r1-s002"], state="PENDING", reason=""))
        s.commit()
        assert s.get(Step, "r1-s004").fingerprint == got["r1-s002"]  # type: ignore[union-attr]
    with engine.connect() as c:
        assert schema_drift(c) == []
    command.downgrade(alembic_config(engine), "0013")
    with engine.connect() as c:
        assert "fingerprint" not in {col["name"] for col in sa.inspect(c).get_columns("steps")}


def test_a_fingerprint_is_the_workload_not_where_it_went_or_how_it_was_reported() -> None:
    from labcontract.fiojob import render_job
    from labcontract.suite import load_suite
    from orchestrator.runs.planner import plan
    from orchestrator.store.fingerprint import fingerprint

    w = next(st.workload for st in plan(load_suite("demo"), ["/dev/nvme0n1"]) if st.workload is not None)
    one = render_job(w, "/dev/nvme0n1")
    assert fingerprint("measure", one) == fingerprint("measure", render_job(w, "/dev/sdb"))
    assert fingerprint("measure", one) == fingerprint(
        "measure", one.replace("percentile_list=", "percentile_list=99.999:").replace("group_reporting=1\n", ""))
    assert fingerprint("measure", one) != fingerprint("measure", one.replace("direct=1", "direct=0"))
    assert fingerprint("measure", one) != fingerprint("precondition", one)
    assert fingerprint("measure", "") == ""


def test_0015_adds_the_sinks_a_run_was_notified_to_and_keeps_runs(tmp_path: Path) -> None:
    """A run stored at 0014 (notified or not) survives with no sinks recorded; the downgrade removes the column."""
    engine = make_engine(f"sqlite:///{tmp_path / 'n.sqlite'}")
    command.upgrade(alembic_config(engine), "0014")
    with engine.begin() as c:
        for rid, notified in (("r1", "5.0"), ("r2", "NULL")):
            c.execute(sa.text(
                "INSERT INTO runs (id, suite_name, suite_source, suite_text, suite_sha256, host, device, state, reason,"
                f" priority, submitted_at, notified_at) VALUES ('{rid}', 's', 's.yaml', 'suite: s', 'x', 'h1', "
                f"'/dev/loop3', 'SUCCEEDED', '', 0, 1.0, {notified})"))
    migrate(engine)
    with sa.orm.Session(engine) as s:
        r1, r2 = s.get(Run, "r1"), s.get(Run, "r2")
        assert r1 is not None and r2 is not None
        assert (r1.notified_at, r1.notified_sinks, r2.notified_at, r2.notified_sinks) == (5.0, None, None, None)
        r2.notified_sinks = ["file:/x"]
        s.commit()
    with engine.connect() as c:
        assert schema_drift(c) == []
    command.downgrade(alembic_config(engine), "0014")
    with engine.connect() as c:
        assert "notified_sinks" not in {col["name"] for col in sa.inspect(c).get_columns("runs")}
