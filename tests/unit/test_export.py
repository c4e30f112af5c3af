"""``labctl export`` tables on a real SQLite store: the headers are the columns docs/metrics.md documents,
the values are the store's (in the documented units), a missing value is an empty field / null, never
the text "None", and each format writes where it is told."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import ExportError
from orchestrator.export import export
from orchestrator.export.tables import TABLES
from orchestrator.queries import RunDetail, run_detail
from tests.unit.test_compare import add_run, c4k, figures, make_store, net_run, step_metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SERIES = {"t": [1.0, 2.0], "iops": [900.0, 1100.0], "read_iops": [630.0, 770.0], "write_iops": [270.0, 330.0],
          "lat_mean_us": [110.0, None], "lat_max_us": [900.0, None], "lat_stddev_us": [30.0, None]}


def documented_columns() -> dict[str, list[str]]:
    """docs/metrics.md, "Export columns": under each "### `table`" heading, the first cell of each row of its
    Markdown table names a column, in order."""
    text = DOCS.read_text()
    section = text[text.index("## Export columns"):]
    section = section[:m.start()] if (m := re.search(r"\n## ", section[3:])) else section
    out: dict[str, list[str]] = {}
    for part in re.split(r"\n### ", section)[1:]:
        name = re.match(r"`(\w+)`", part)
        assert name, part[:60]
        out[name.group(1)] = re.findall(r"^\| `([\w.]+)` \|", part, flags=re.M)
    return out


@pytest.fixture
def details(tmp_path: Path) -> list[RunDetail]:
    db: sessionmaker[Session] = make_store(tmp_path / "store.sqlite")
    with db() as s:
        add_run(s, "grp", [(c4k(70), figures(2000.0, read_share=0.7, p99_us=None)), (c4k(0), None)],
                devices=("/dev/loop1", "/dev/loop2"), series=SERIES,
                per_device={"/dev/loop1": step_metrics(1200.0, 90.0), "/dev/loop2": step_metrics(800.0, 120.0)})
        net_run(s, "net", [(9000, "multi", 0.36)])
        return [run_detail(s, "grp"), run_detail(s, "net")]


def test_every_table_has_exactly_the_documented_columns(details: list[RunDetail], tmp_path: Path) -> None:
    documented = documented_columns()
    assert set(documented) == set(TABLES)
    written = export(details, "csv", "all", tmp_path / "out", io.StringIO())
    assert sorted(p.name for p in written) == ["app_series.csv", "cells.csv", "devices.csv", "paths.csv", "results.csv",
                                               "series.csv"]
    for path in written:
        with path.open(newline="") as f:
            header = next(csv.reader(f))
        assert header == documented[path.stem] == list(TABLES[path.stem][0]), path.stem


def test_results_hold_the_store_values_and_no_none(details: list[RunDetail]) -> None:
    buf = io.StringIO()
    assert export(details, "csv", "results", None, buf) == []
    text = buf.getvalue()
    assert "None" not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    grp = [r for r in rows if r["run"] == "grp"]
    assert len(grp) == 1                                    # the unmeasured cell has no result row
    r = grp[0]
    res = next(iter(details[0].results.values()))
    assert float(r["iops"]) == res.iops and float(r["read_iops"]) == pytest.approx(res.read_iops)
    assert float(r["mb_s"]) == pytest.approx(res.bw_bytes / 1e6)
    assert float(r["lat_mean_us"]) == pytest.approx((res.lat_mean_ns or 0) / 1000)
    assert float(r["lat_max_us"]) == pytest.approx((res.lat_max_ns or 0) / 1000)
    assert r["lat_p99_us"] == "" and r["percentage_random"] == "" and r["device_firmware"] == ""
    assert (r["cell"], r["op_mode"], r["dims"]) == ("4K random 70/30 1T16Q (4k-random)", "stock",
                                                    "op_mode=stock;profile=4k-random;rwmixread=70")
    assert (r["rw"], r["bs"], r["numjobs"], r["iodepth"], r["rwmixread"]) == ("randrw", "4096", "1", "16", "70")
    assert r["devices"] == "/dev/loop1;/dev/loop2" and r["device_model"] == "Model 0;Model 1"
    assert (r["runtime_s"], r["fio_version"], r["kind"], r["round"]) == ("2.5", "fio-3.33", "measure", "0")


def test_devices_paths_and_series_tables(details: list[RunDetail]) -> None:
    buf = io.StringIO()
    export(details, "json", "all", None, buf)
    doc = json.loads(buf.getvalue())
    assert doc["format_version"] == 1 and set(doc) == {"format_version", *TABLES}
    devs = doc["devices"]
    assert [(d["device"], d["iops"], d["device_serial"]) for d in devs] == [("/dev/loop1", 1200.0, "SN0"),
                                                                            ("/dev/loop2", 800.0, "SN1")]
    assert devs[1]["lat_p99_us"] == pytest.approx(360.0) and devs[1]["device_firmware"] is None
    paths = {p["path"]: p for p in doc["paths"]}
    assert set(paths) == {"ini0.a", "ini0.b", "tgt.a"}
    assert paths["ini0.b"]["gbps"] == pytest.approx(0.18) and paths["ini0.b"]["role"] == "initiator"
    assert paths["tgt.a"]["tx_gbps"] == pytest.approx(0.36) and paths["tgt.a"]["iops"] is None
    assert paths["ini0.a"]["window_s"] == pytest.approx(4.5) and paths["ini0.a"]["complete"] is True
    assert (paths["ini0.a"]["cell"], paths["ini0.a"]["dims"]) == (
        "4K random 70/30 1T16Q MTU 9000 multipath (seq-128k-read)",
        "mtu=9000;op_mode=stock;paths=multi;profile=seq-128k-read")
    series = doc["series"]
    assert [(x["t"], x["iops"], x["lat_mean_us"]) for x in series] == [(1.0, 900.0, 110.0), (2.0, 1100.0, None)]
    for table in TABLES:
        assert all(list(row) == list(TABLES[table][0]) for row in doc[table])


def test_outputs_and_refusals(details: list[RunDetail], tmp_path: Path) -> None:
    (path,) = export(details, "json", "results", tmp_path / "x", io.StringIO())
    assert path == tmp_path / "x" / "export.json" and json.loads(path.read_text())["results"]
    (path,) = export(details, "csv", "series", tmp_path / "s.csv", io.StringIO())
    assert path.read_text().startswith("run,step,kind,round,cell,t,iops,")
    with pytest.raises(ExportError, match="6 tables writes one file per table: give --output DIR"):
        export(details, "csv", "all", None, io.StringIO())
    with pytest.raises(ExportError, match=r"--output .*s\.csv: a \.csv file holds one table"):
        export(details, "csv", "all", tmp_path / "s.csv", io.StringIO())
    with pytest.raises(ExportError, match=r"--format: unknown export format 'xls' \(choose from csv, json\)"):
        export(details, "xls", "results", None, io.StringIO())
    with pytest.raises(ExportError, match="--table: unknown table 'nope'"):
        export(details, "csv", "nope", None, io.StringIO())


def test_units_binary_names_every_bandwidth_for_its_unit_and_converts_it(details: list[RunDetail]) -> None:
    """``--units binary``: the bandwidth columns are *_mib_s (MiB/s = bytes/s / 2^20) and the cells table's mb_s rows
    mib_s, every summary figure converted, the CoV unchanged; nothing else moves. An unknown unit is refused."""
    def table(units: str, name: str) -> list[dict[str, str]]:
        buf = io.StringIO()
        export(details, "csv", name, None, buf, units)
        return list(csv.DictReader(io.StringIO(buf.getvalue())))

    dec, binary = table("decimal", "results"), table("binary", "results")
    assert "mb_s" in dec[0] and "mib_s" not in dec[0]
    assert [c for c in binary[0] if "mb_s" in c] == [] and {"read_mib_s", "write_mib_s", "mib_s"} <= set(binary[0])
    res = next(iter(details[0].results.values()))
    assert float(binary[0]["mib_s"]) == pytest.approx(res.bw_bytes / 2**20, rel=1e-12)
    assert float(binary[0]["read_mib_s"]) == pytest.approx(float(dec[0]["read_mb_s"]) * 1e6 / 2**20, rel=1e-12)
    assert {k: v for k, v in binary[0].items() if "mib" not in k} == {
        k: v for k, v in dec[0].items() if "mb_s" not in k}
    dev_b = table("binary", "devices")
    assert float(dev_b[0]["mib_s"]) == pytest.approx(1200.0 * 4096 / 2**20)
    cells_d = {r["metric"]: r for r in table("decimal", "cells")}
    cells_b = {r["metric"]: r for r in table("binary", "cells")}
    assert "mb_s" in cells_d and "mib_s" in cells_b and "mb_s" not in cells_b
    assert float(cells_b["mib_s"]["mean"]) == pytest.approx(float(cells_d["mb_s"]["mean"]) * 1e6 / 2**20)
    assert cells_b["mib_s"]["cov_pct"] == cells_d["mb_s"]["cov_pct"] and cells_b["iops"] == cells_d["iops"]
    with pytest.raises(Exception, match="--units: unknown units 'si'"):
        export(details, "csv", "results", None, io.StringIO(), "si")


def test_completion_and_tail_latency_columns_read_the_stored_dump(tmp_path: Path) -> None:
    """lat_p99_99_us, lat_p99_999_us, clat_mean_us and clat_p99_us come from the result's StepMetrics dump; a result
    stored before they were kept leaves them empty."""
    db: sessionmaker[Session] = make_store(tmp_path / "s.sqlite")
    with db() as s:
        add_run(s, "old", [(c4k(70), figures(1000.0))])
        add_run(s, "new", [(c4k(70), figures(1000.0))])
        res = run_detail(s, "new").results["new-s000"]
        res.metrics = {"combined": {"percentiles_ns": {"p99": 300_000, "p99.99": 900_000, "p99.999": 2_000_000},
                                    "clat_mean_ns": 95_000, "clat_percentiles_ns": {"p99": 280_000}}}
        s.commit()
        buf = io.StringIO()
        export([run_detail(s, "old"), run_detail(s, "new")], "json", "results", None, buf)
    old, new = json.loads(buf.getvalue())["results"]
    assert [old[k] for k in ("lat_p99_99_us", "lat_p99_999_us", "clat_mean_us", "clat_p99_us")] == [None] * 4
    assert [new[k] for k in ("lat_p99_99_us", "lat_p99_999_us", "clat_mean_us", "clat_p99_us")] == [
        900.0, 2000.0, 95.0, 280.0]
