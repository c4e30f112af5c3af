"""Schema migrations keep existing data: a store created at 0001 with a run in it, upgraded to head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from orchestrator.store.db import alembic_config, make_engine, migrate
from orchestrator.store.models import Base, Result, Run, Step


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
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []


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
        assert c.scalar(sa.text("SELECT version_num FROM alembic_version")) == "0009"
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
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
