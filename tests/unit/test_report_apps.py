"""Application results in run show, the Markdown report, compare and export, on in-memory runs shaped as the
controller stores them (Result.kind sysbench, metrics = the AppResult dump, series = its per-second series)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from labcontract.errors import CompareError
from orchestrator import compare
from orchestrator.comparetable import print_table
from orchestrator.export import export
from orchestrator.queries import RunDetail
from orchestrator.report import app_rows, print_run, write_markdown
from orchestrator.store.models import Result, Run, Step

POINTS = (2, 4, 8, 16, 32)


def app_run(rid: str, op_mode: str = "hp:20", speed: float = 1.0, *, missing: int | None = None) -> RunDetail:
    """A sysbench-oltp-like run: purge, prepare, one step per thread count (``missing``: that point failed)."""
    run = Run(id=rid, suite_name="sysbench-oltp", suite_source="sysbench-oltp", suite_text="", suite_sha256="a" * 64,
              host="h1", device="/dev/nvme0n1", devices=["/dev/nvme0n1"], state="SUCCEEDED",
              submitted_at=1.7e9, reason="")
    mode = op_mode.replace(":", "")
    steps = [Step(id=f"{rid}-s000", run_id=rid, seq=0, round=0, kind="purge", name=f"purge.{mode}",
                  cell={"op_mode": op_mode, "purge": True}, workload=None, job_text="", state="SUCCEEDED", note="",
                  host="", reason=""),
             Step(id=f"{rid}-s001", run_id=rid, seq=1, round=0, kind="app", name=f"sysbench-prepare.{mode}",
                  cell={"op_mode": op_mode, "app": "sysbench", "phase": "prepare"}, workload=None, job_text="",
                  state="SUCCEEDED", note="", host="", reason="")]
    results: dict[str, Result] = {}
    for i, t in enumerate(POINTS):
        st = Step(id=f"{rid}-s{i + 2:03d}", run_id=rid, seq=i + 2, round=0, kind="app",
                  name=f"oltp_read_write.t{t}",
                  cell={"op_mode": op_mode, "profile": "oltp_read_write", "app": "sysbench", "threads": t},
                  workload=None, job_text="", state="FAILED" if t == missing else "SUCCEEDED", note="", host="",
                  reason="")
        steps.append(st)
        if t == missing:
            continue
        tps = 100.0 * speed * min(t, 12)
        metrics: dict[str, Any] = {"tps": tps, "qps": tps * 20, "lat_avg_ms": t / tps * 1000,
                                   "lat_p95_ms": t / tps * 1500, "lat_p99_ms": t / tps * 2000,
                                   "lat_max_ms": t / tps * 5000, "errors": 0.0, "reconnects": float(t == 32)}
        series = {"tps": [tps * (0.9 + 0.02 * k) for k in range(10)]}
        results[st.id] = Result(
            attempt_id=f"{st.id}-a1", step_id=st.id, run_id=rid, kind="sysbench", tool="sysbench",
            tool_version="1.0.20", throughput=tps, throughput_unit="TPS", read_iops=None, write_iops=None,
            iops=None, read_bw_bytes=None, write_bw_bytes=None, bw_bytes=None,
            lat_mean_ns=metrics["lat_avg_ms"] * 1e6, lat_max_ns=metrics["lat_max_ms"] * 1e6, lat_stddev_ns=None,
            lat_p99_ns=metrics["lat_p99_ms"] * 1e6, runtime_ms=10_000, fio_version=None,
            metrics={"tool": "sysbench", "tool_version": "1.0.20", "server_version": "10.11.6-MariaDB",
                     "metrics": metrics, "seconds": 10.0, "notes": {}},
            per_device=None, series=series, per_path=None, lat_hist=None,
            provenance={"host": {"os": "Debian GNU/Linux 12 (bookworm)"}, "app": {"fs_size_bytes": 320 << 30},
                        "devices": [{"path": "/dev/nvme0n1", "model": "Acme P3700", "size_bytes": 400_000_000_000}]},
            created_at=0.0)
    return RunDetail(run, steps, results, [])


def test_run_show_rows_per_point() -> None:
    rows = app_rows(app_run("r1", missing=16))
    assert [r[0] for r in rows] == ["purge.hp20", "sysbench-prepare.hp20", *(f"oltp_read_write.t{t}" for t in POINTS)]
    assert rows[1][1] == "prepare SUCCEEDED" and rows[1][4] == "-"
    t8 = rows[4]
    assert t8[2:] == ["hp:20", "8 threads", "800.0", "16,000.0", "10.00", "15.00", "20.00", "0", "0"]
    assert rows[5][1] == "FAILED" and rows[5][4] == "-"
    assert rows[6][-1] == "1"
    console = Console(record=True, width=200)
    print_run(console, app_run("r1"))
    text = console.export_text()
    assert "sysbench 1.0.20 / 10.11.6-MariaDB" in text and "oltp_read_write.t32" in text and "TPS" in text


def test_markdown_has_an_application_section(tmp_path: Path) -> None:
    path = write_markdown(app_run("r1"), tmp_path, tmp_path)
    md = path.read_text()
    assert "## Application results" in md and "| oltp_read_write.t8 | SUCCEEDED | hp:20 | 8 threads | 800.0 |" in md
    assert "| workload | sysbench 1.0.20, server 10.11.6-MariaDB |" in md
    assert "| OP mode hp:20 | emulated: filesystem limited to 320" in md


def test_compare_matches_points_across_stock_and_hp() -> None:
    c = compare.compare_details([app_run("stock1", "stock"), app_run("hp2", "hp:20", speed=1.5, missing=4)])
    assert [m.name for m in c.metrics][:3] == ["tps", "qps", "lat_avg_ms"]
    labels = [r.label for r in c.rows]
    assert labels == [f"oltp_read_write (sysbench) {t} threads" for t in POINTS]
    t8 = c.rows[2]
    assert t8.entries[1].step == "oltp_read_write.t8" and t8.diff(1, "tps") == pytest.approx(50.0)
    assert c.rows[1].entries[1].values["tps"] is None
    doc = json.loads(compare.as_json(c))
    assert doc["kind"] == "application" and doc["cells"][2]["runs"][1]["vs_first_pct"]["tps"] == pytest.approx(50.0)
    assert "tps_vs_first_pct" in compare.as_csv(c).splitlines()[0]
    console = Console(record=True, width=250)
    print_table(console, c)
    assert "test and threads / clients" in console.export_text()


def test_compare_refuses_app_with_storage() -> None:
    from tests.unit.chartdata_a import demo_run

    try:
        storage = demo_run("d1")
    except Exception:          # the storage fixture predates schema 0010's columns: build a bare run instead
        storage = RunDetail(Run(id="d1", suite_name="demo", suite_source="demo", suite_text="",
                                suite_sha256="a" * 64, host="h1", device="/dev/x", devices=["/dev/x"],
                                state="SUCCEEDED", submitted_at=1.0, reason=""), [], {}, [])
    with pytest.raises(CompareError, match="application runs compare only with application runs"):
        compare.compare_details([app_run("a1"), storage])


def test_export_results_and_app_series(tmp_path: Path) -> None:
    out = io.StringIO()
    export([app_run("r1")], "csv", "results", None, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["step"] for r in rows] == [f"oltp_read_write.t{t}" for t in POINTS]     # prepare: no result row
    t8 = rows[2]
    assert (t8["kind"], t8["app"], t8["threads"], t8["tps"], t8["lat_p99_ms"]) == ("app", "sysbench", "8", "800.0",
                                                                                   "20.0")
    assert (t8["result_kind"], t8["tool"], t8["tool_version"], t8["iops"], t8["fio_version"]) == \
        ("sysbench", "sysbench", "1.0.20", "", "")
    assert t8["cell"] == "oltp_read_write (sysbench) 8 threads"
    out = io.StringIO()
    export([app_run("r1")], "json", "app_series", None, out)
    series = json.loads(out.getvalue())["app_series"]
    assert len(series) == 5 * 10 and series[0]["series"] == "tps" and series[0]["t"] == 1
    assert series[0]["value"] == pytest.approx(180.0) and series[0]["threads"] == 2


def test_a_step_row_reads_its_result_by_kind_and_any_other_kind_by_its_headline_rate() -> None:
    """report.STEP_FIGURES: a fio result gives fio's columns; a result of a kind with no entry (a new step kind's)
    its kind-neutral headline rate in the first figure column, the row as wide as the table."""
    from orchestrator.report import COLUMNS, STEP_FIGURES, step_row

    assert set(STEP_FIGURES) == {"fio"}
    st = Step(id="r-s001", run_id="r", seq=1, round=0, kind="measure", name="w", cell={}, note="", workload=None,
              job_text="", state="SUCCEEDED", reason="")
    fio = Result(kind="fio", iops=1234.0, read_iops=1234.0, write_iops=0.0, bw_bytes=5e6, lat_mean_ns=80_000.0,
                 lat_max_ns=900_000.0, lat_stddev_ns=10_000.0, lat_p99_ns=200_000.0, metrics=None)
    row = step_row(st, fio)
    assert len(row) == len(COLUMNS) and row[3:5] == ["1,234", "80.0"] and row[9] == "5.0"
    other = Result(kind="idle", throughput=2.5, throughput_unit="waits/s")
    row = step_row(st, other)
    assert len(row) == len(COLUMNS) and row[3] == "2.5 waits/s" and set(row[4:]) == {"-"}
