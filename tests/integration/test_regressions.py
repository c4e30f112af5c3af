"""Regressions of the run history on a real lab (redis with its ACL users, controller, agent): ``labctl
regressions`` lists one found in stored runs, ``labctl regressions ack`` acknowledges it through the controller
and it is gone; a scheduled run that regressed is notified with its regressions and a ``run.regressed`` body
(a file sink)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.labs.lab import wait_for
from orchestrator.stats.history import find_regressions
from orchestrator.store.db import make_engine, migrate, schema_drift, sessions
from orchestrator.store.models import RegressionAck
from tests.conftest import LabHandle, start_lab
from tests.pg import PgServer, pg_server  # noqa: F401  (a fixture, used by name)
from tests.unit.test_history import DAY, T0, add_run, noisy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LabHandle, Path]]:
    root = tmp_path_factory.mktemp("reglab")
    sink = root / "notifications.jsonl"
    handle = start_lab(root / "lab", controller_extra=("--notify-file", str(sink)))
    yield handle, sink
    handle.lab.stop()


def test_labctl_lists_a_regression_and_acknowledging_it_through_the_controller_hides_it(
        nlab: tuple[LabHandle, Path]) -> None:
    lab, _sink = nlab
    values = noisy(12, 10_000) + noisy(12, 8_000, seed=21)
    with lab.sessions.begin() as s:
        for i, v in enumerate(values):
            add_run(s, f"h{i:03d}", T0 + i * DAY, {"4k-randread": [{"iops": v}]}, host="benchhost", suite="hist")
    got = lab.labctl("regressions", "--host", "benchhost", "--json")
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)
    (reg,) = listed["regressions"]
    assert (reg["run_id"], reg["metric"], reg["suite"]) == ("h012", "iops", "hist") and reg["change_pct"] < -15
    assert listed["too_short"] == 0
    table = lab.labctl("regressions", "--host", "benchhost")
    assert table.returncode == 0 and reg["id"] in table.stdout and "h012" in table.stdout, table.stdout
    bad = lab.labctl("regressions", "ack", "0123456789ab")
    assert bad.returncode == 1 and "no regression" in bad.stderr
    ack = lab.labctl("regressions", "ack", reg["id"], "--reason", "new firmware")
    assert ack.returncode == 0 and f"regression {reg['id']} acknowledged" in ack.stdout, ack.stderr
    with lab.sessions() as s:
        row = s.get(RegressionAck, reg["id"])
        assert row is not None and row.reason == "new firmware" and row.actor == "labctl"
    after = lab.labctl("regressions", "--host", "benchhost")
    assert after.returncode == 0 and after.stdout.startswith("no regressions"), after.stdout
    every = lab.labctl("regressions", "--host", "benchhost", "--all", "--json")
    (acked,) = json.loads(every.stdout)["regressions"]
    assert acked["acknowledged"] is True and acked["ack_reason"] == "new firmware"


def test_a_scheduled_run_that_regressed_is_notified_with_a_run_regressed_body(nlab: tuple[LabHandle, Path]) -> None:
    lab, sink = nlab
    with lab.sessions.begin() as s:
        for i, v in enumerate(noisy(15, 10_000, seed=5)):
            add_run(s, f"n{i:03d}", T0 + i * DAY, {"4k-randread": [{"iops": v}]}, host="nightlyhost",
                    suite="nightly", submitted_by="schedule:nightly")
        add_run(s, "n-last", T0 + 15 * DAY, {"4k-randread": [{"iops": 6_500.0}]}, host="nightlyhost",
                suite="nightly", submitted_by="schedule:nightly", notified=False)

    def bodies() -> list[dict[str, object]] | None:
        lines = sink.read_text().splitlines() if sink.exists() else []
        got = [json.loads(x) for x in lines if '"n-last"' in x]
        return got if len(got) >= 2 else None

    got = wait_for(bodies, 60, "the notifications of run n-last", interval=0.1)
    assert isinstance(got, list)
    ended, regressed = got
    assert ended["event"] == "run.ended" and regressed["event"] == "run.regressed"
    assert regressed["schedule"] == "nightly" and regressed["host"] == "nightlyhost"
    (reg,) = regressed["regressions"]
    assert reg["run_id"] == "n-last" and reg["metric"] == "iops" and reg["rule"] == "last"
    assert ended["regressions"] == regressed["regressions"]


def test_history_reads_the_same_on_postgresql(pg_server: PgServer) -> None:  # noqa: F811
    """Schema 0012 on PostgreSQL, and the history's queries there (the device read from the provenance's JSON)."""
    engine = make_engine(pg_server.create_database("history"))
    migrate(engine)
    with engine.connect() as c:
        assert schema_drift(c) == []
    db = sessions(engine)
    with db.begin() as s:
        for i, v in enumerate(noisy(12, 10_000) + noisy(12, 8_000, seed=21)):
            add_run(s, f"p{i:03d}", T0 + i * DAY, {"4k-randread": [{"iops": v}, {"iops": v}]}, firmware="2.1")
        for i in range(5):
            add_run(s, f"q{i:03d}", T0 + i * DAY, {"4k-randread": [{"iops": 1.0}]}, suite="short")
    with db() as s:
        regs, status = find_regressions(s)
    assert [(r.run_id, r.model, r.firmware) for r in regs] == [("p012", "FAST-SSD", "2.1")]
    assert (status.series, status.too_short) == (1, 1)
