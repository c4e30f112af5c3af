"""IOPS per watt in the reports (orchestrator.power, compare) and the controller's reading of host-power.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.drivehealth import DriveHealth, HealthReading, HealthSnapshot
from labcontract.power import summarise
from orchestrator import power
from orchestrator.compare import as_json, compare_runs
from orchestrator.export.tables import result_rows
from orchestrator.kinds.fio import host_power
from orchestrator.queries import run_detail
from orchestrator.store.models import Attempt, Result
from tests.unit.test_compare import add_run, c4k, figures, make_store, printed


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    yield make_store(tmp_path / "store.sqlite")


def watts(avg: float) -> dict[str, Any]:
    return summarise("http://bmc", "Power.PowerControl", 1.0, 100.0, 110.0, [avg] * 10, 0, None).model_dump(
        mode="json", exclude={"series"})


def health(before_c: int, after_c: int, throttles: tuple[int, int]) -> dict[str, Any]:
    def reading(t: int, thr: int) -> HealthReading:
        return HealthReading(name="dut0", path="/dev/nvme0n1", at=100.0,
                             snapshot=HealthSnapshot(source="nvme smart-log", temperature_c=t,
                                                     throttle_transitions=thr))
    return DriveHealth(before=(reading(before_c, throttles[0]),),
                       after=(reading(after_c, throttles[1]),)).model_dump(mode="json")


def with_power(s: Session, rid: str, provenance: dict[str, Any]) -> None:
    for res in s.query(Result).filter(Result.run_id == rid):
        res.provenance = {**(res.provenance or {}), **provenance}
    s.commit()


def test_rows_say_watts_per_watt_figures_temperature_and_throttle(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "pw", [(c4k(100), figures(40_000.0))])
        add_run(s, "no", [(c4k(100), figures(30_000.0))])
        with_power(s, "pw", {"power": watts(400.0), "drive_health": health(41, 47, (2, 5))})
        measured, unmeasured = run_detail(s, "pw"), run_detail(s, "no")
        c = compare_runs(s, ["pw", "no"])
    (row,) = power.rows(measured)
    assert row[1:] == ["400 W avg, 400 W peak (10 of 10 s read)", "100.0", f"{40_000 * 4096 / 1e6 / 400:,.3f}",
                       "dut0 41 → 47", "+3", "-"]
    (row,) = power.rows(unmeasured)
    assert row[1:] == ["not measured", "not measured", "not measured", "-", "-", "-"]
    text = printed(c, width=400)
    assert "IOPS/W" in text and "100.0" in text and "not measured" in text
    cell = json.loads(as_json(c))["cells"][0]["runs"]
    assert cell[0]["iops_per_w"] == 100.0 and cell[0]["watts"] == 400.0 and cell[1]["iops_per_w"] is None
    (exported,), (bare,) = list(result_rows(measured)), list(result_rows(unmeasured))
    assert (exported["watts"], exported["peak_w"], exported["iops_per_w"]) == (400.0, 400.0, 100.0)
    assert bare["watts"] is None and bare["mb_s_per_w"] is None


def test_a_failed_bmc_reads_not_measured_with_its_reason(db: sessionmaker[Session]) -> None:
    failed = summarise("http://bmc", None, 1.0, 100.0, 110.0, [], 10, "GET /redfish/v1/Chassis: HTTP 401")
    with db() as s:
        add_run(s, "f", [(c4k(100), figures(1000.0))])
        with_power(s, "f", {"power": failed.model_dump(mode="json")})
        d = run_detail(s, "f")
    (row,) = power.rows(d)
    assert row[1] == "not measured (GET /redfish/v1/Chassis: HTTP 401)" and row[2] == "not measured"


@pytest.mark.parametrize("raw", [b'{"endpoint": "x", "avg_w": 1e300, "samples": 1}', b'{"endpoint": "x", '
                                 b'"avg_w": -1}', b"[]", b"not json", b'{"endpoint": "x", "password": "p"}'])
def test_the_controller_drops_a_host_power_that_does_not_fit(raw: bytes, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr("orchestrator.kinds.fio.ctx_of", lambda att: {})    # the log's context needs a stored step
    att = Attempt(id="a1", step_id="s1", number=1, host="h", device="/dev/x", state="SUCCEEDED", timeout_s=1)
    assert host_power(att, raw) is None
    assert "attempt a1 host-power.json" in caplog.text
    assert host_power(att, None) is None


def test_drive_temperature_per_second_is_kept_printed_and_drawn_beside_the_iops(db: sessionmaker[Session],
                                                                              tmp_path: Path, chromium: Any,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What the controller keeps of a drive-temp.json, the text reports' column and the HTML report's thermal chart
    (in Chromium: drawn, with data, no console error)."""
    from labcontract.drivetemp import DriveSeries, DriveTemps, Unmeasured
    from orchestrator.htmlreport import build_html
    from orchestrator.kinds.fio import drive_temps

    monkeypatch.setattr("orchestrator.kinds.fio.ctx_of", lambda att: {})
    att = Attempt(id="a1", step_id="s1", number=1, host="h", device="/dev/x", state="SUCCEEDED", timeout_s=1)
    raw = DriveTemps(duts=(DriveSeries(name="dut0", sensor="/sys/x/temp1_input", t=tuple(float(i) for i in range(10)),
                                       c=tuple(40.0 + i / 2 for i in range(10))),),
                     not_measured=(Unmeasured(name="dut1", reason="/dev/loop1: no hwmon temperature sensor"),))
    kept = drive_temps(att, raw.model_dump_json().encode())
    assert kept is not None and kept["dut0"]["min_c"] == 40.0 and kept["dut0"]["max_c"] == 44.5
    assert drive_temps(att, b'{"duts": [{"name": "d", "sensor": "s", "t": [0], "c": [900]}]}') is None
    with db() as s:
        add_run(s, "hot", [(c4k(100), figures(40_000.0))])
        for res in s.query(Result).filter(Result.run_id == "hot"):
            res.series = {"t": [float(i + 1) for i in range(10)], "iops": [40_000.0 - i * 100 for i in range(10)]}
        s.commit()
        with_power(s, "hot", {"drive_temp": kept})
        d = run_detail(s, "hot")
    (row,) = power.rows(d)
    assert row[-1] == "dut0 40-44.5 °C (avg 42.25, 10 readings), dut1 not read (/dev/loop1: no hwmon temperature " \
                      "sensor)"
    html = tmp_path / "hot.html"
    html.write_text(build_html([d], workers=1).html)
    page = chromium.open(html)
    assert page.problems() == [], page.problems()
    (fig,) = page.of("thermal")
    assert fig.svg and fig.marks >= 2 and fig.points == 20, fig
    assert [r[0] for r in fig.rows].count("dut0 °C") == 10 and fig.rows[0] == ["IOPS", "1.0", "40,000"]
