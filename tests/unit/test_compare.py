"""N-way compare on a real SQLite store filled with Run / Step / Result rows: cell matching (OP mode only
when a run holds several, network cells by MTU and path mode), differences to the first run, the clean
refusals (unknown run, no cell in common, one run, network with storage) and partial runs."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import CompareError, StoreError
from orchestrator.compare import as_csv, as_json, compare_runs, csv_columns
from orchestrator.comparetable import print_table as print_comparison
from orchestrator.store.models import Attempt, Base, NetGroup, Result, Run, Step

# --- a store with runs, shared with test_export and test_cli ----------------------------------------

Figures = dict[str, Any]


def make_store(path: Path) -> sessionmaker[Session]:
    """A SQLite store at ``path`` with the current schema (the models, no controller needed)."""
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    return sessionmaker(engine, expire_on_commit=False)


def figures(iops: float, *, lat_us: float = 100.0, read_share: float = 1.0, p99_us: float | None = 300.0) -> Figures:
    return {"read_iops": iops * read_share, "write_iops": iops * (1 - read_share), "iops": iops,
            "read_bw_bytes": iops * read_share * 4096, "write_bw_bytes": iops * (1 - read_share) * 4096,
            "bw_bytes": iops * 4096, "lat_mean_ns": lat_us * 1000, "lat_max_ns": lat_us * 20_000,
            "lat_stddev_ns": lat_us * 300, "lat_p99_ns": None if p99_us is None else p99_us * 1000}


def step_metrics(iops: float, lat_us: float) -> dict[str, Any]:
    """A StepMetrics dump (labcontract.fioresult) as Result.per_device holds per device."""
    d = {"ios": int(iops), "io_bytes": int(iops) * 4096, "iops": iops, "bw_bytes": iops * 4096, "runtime_ms": 1000}
    return {"fio_version": "fio-3.33", "jobs": 1, "runtime_ms": 1000, "errors": 0, "read": d,
            "write": {**d, "ios": 0, "io_bytes": 0, "iops": 0.0, "bw_bytes": 0.0},
            "combined": {"iops": iops, "bw_bytes": iops * 4096, "ios": int(iops), "lat_mean_ns": lat_us * 1000,
                         "lat_max_ns": lat_us * 9000, "lat_stddev_ns": lat_us * 200,
                         "percentiles_ns": {"p99": lat_us * 3000}}}


def add_run(s: Session, rid: str, cells: list[tuple[dict[str, Any], Figures | None]], *, suite: str = "demo",
            state: str = "SUCCEEDED", devices: tuple[str, ...] = ("/dev/loop9",), at: float = 1000.0,
            per_device: dict[str, dict[str, Any]] | None = None, series: dict[str, Any] | None = None,
            kind: str = "measure", topology: dict[str, Any] | None = None, host: str = "h1",
            os: tuple[str, str] | None = None) -> Run:
    """A run whose steps are ``cells`` (Step.cell, figures of its result or None: not measured); ``os``: the
    (os, os_family) its results' provenance records for the host."""
    run = Run(id=rid, suite_name=suite, suite_source=suite, suite_text="", suite_sha256="ab" * 32, host=host,
              device=devices[0], devices=list(devices), state=state, submitted_at=at, reason="", topology=topology)
    s.add(run)
    devs = [{"path": p, "name": f"dut{i}", "model": f"Model {i}", "serial": f"SN{i}", "firmware": None,
             "size_bytes": 1 << 30} for i, p in enumerate(devices)]
    for i, (cell, figs) in enumerate(cells):
        skip = ("op_mode", "profile", "role", "tool", "net_paths")
        name = ".".join([str(cell.get("profile")), *(str(v) for k, v in sorted(cell.items()) if k not in skip)])
        st = Step(id=f"{rid}-s{i:03d}", run_id=rid, seq=i, round=0, kind=kind, name=name, cell=cell, job_text="",
                  state="SUCCEEDED" if figs else "QUEUED", host="",
                  workload={"rw": "randrw", "bs": 4096, "numjobs": 1, "iodepth": 16, "rwmixread": 70,
                            "percentage_random": None})
        s.add(st)
        if figs is None:
            continue
        s.add(Attempt(id=f"{st.id}-a1", step_id=st.id, number=1, host=host, device=devices[0], state="SUCCEEDED",
                      timeout_s=60))
        s.add(Result(attempt_id=f"{st.id}-a1", step_id=st.id, run_id=rid, runtime_ms=2500, fio_version="fio-3.33",
                     metrics={}, per_device=per_device, series=series, created_at=at,
                     provenance={"devices": devs, "op_mode": cell.get("op_mode", "stock"),
                                 **({"host": {"os": os[0], "os_family": os[1]}} if os else {})}, **figs))
    s.commit()
    return run


def net_run(s: Session, rid: str, groups: list[tuple[int, str, float | None]], *, suite: str = "net",
            lab_paths: tuple[str, str] = ("a", "b")) -> Run:
    """A network run with one group per (MTU, path mode, initiator Gbps; None: planned, not measured);
    ``lab_paths``: the names the cells' ``net_paths`` give the lab's two paths."""
    topo = {"target": "tgt", "initiators": ["ini0"], "tool": "fio", "paths": list(lab_paths)}

    def net_paths(mode: str) -> list[str]:
        return list(lab_paths if mode == "multi" else lab_paths[:1])

    run = add_run(s, rid, [({"op_mode": "stock", "profile": "seq-128k-read", "mtu": mtu, "paths": mode,
                             "role": "initiator", "tool": "fio", "net_paths": net_paths(mode)}, None)
                           for mtu, mode, _g in groups],
                  suite=suite, topology=topo, kind="net", state="SUCCEEDED")
    for i, (mtu, mode, gbps) in enumerate(groups):
        if gbps is None:
            continue
        per_path = {f"ini0.{p}": {"host": "ini0", "role": "initiator", "path": p, "mtu": mtu, "gbps": gbps / 2,
                                  "iops": 100.0, "lat_mean_ns": 5e5} for p in ("a", "b")[: 2 if mode == "multi" else 1]}
        per_path["tgt.a"] = {"host": "tgt", "role": "target", "path": "a", "mtu": mtu, "gbps": gbps,
                             "tx_gbps": gbps, "rx_gbps": 0.01}
        s.add(NetGroup(run_id=rid, seq=i, name=f"seq-128k-read.mtu{mtu}.{mode}",
                       cell={"op_mode": "stock", "profile": "seq-128k-read", "mtu": mtu, "paths": mode,
                             "tool": "fio", "net_paths": net_paths(mode)},
                       hosts=["tgt", "ini0"], starts={}, skew_ms=2.0, window_start=10.0, window_end=14.5,
                       total={"initiator_gbps": gbps, "target_gbps": gbps, "initiator_iops": 200.0},
                       per_path=per_path, per_host={}, failures=[], complete=True, created_at=1.0))
    s.commit()
    return run


def c4k(rw: int, mode: str = "stock", profile: str = "4k-random") -> dict[str, Any]:
    return {"op_mode": mode, "profile": profile, "rwmixread": rw}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    yield make_store(tmp_path / "store.sqlite")


def printed(c: Any, width: int = 120) -> str:
    buf = io.StringIO()
    print_comparison(Console(file=buf, width=width), c)
    return buf.getvalue()


def first_column(table_text: str) -> str:
    """The first column of a printed rich table, its folded lines joined (spaces dropped)."""
    return "".join(line.split("│")[1].replace(" ", "") for line in table_text.splitlines() if line.startswith("│"))


# --- tests ------------------------------------------------------------------------------------------

def test_stock_meets_hp_cell_by_cell_with_the_difference_in_percent(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "r-stock", [(c4k(100), figures(1000.0)), (c4k(0), figures(500.0, lat_us=200))])
        add_run(s, "r-hp", [(c4k(100, "hp:20"), figures(1250.0)), (c4k(0, "hp:20"), figures(400.0, lat_us=150))])
        c = compare_runs(s, ["r-stock", "r-hp"])
    assert not c.with_op_mode and [r.label for r in c.rows] == ["4K random read 100% 1T16Q (4k-random)",
                                                                   "4K random write 100% 1T16Q (4k-random)"]
    assert c.rows[0].diff(1, "iops") == pytest.approx(25.0)
    assert c.rows[1].diff(1, "lat_mean_us") == pytest.approx(-25.0)
    assert c.rows[1].entries[1].op_mode == "hp:20" and c.rows[1].entries[1].values["mb_s"] == pytest.approx(1.6384)
    text = printed(c)
    assert "A: r-stock (suite demo, h1:/dev/loop9, stock, SUCCEEDED)" in text
    assert "B: r-hp (suite demo, h1:/dev/loop9, hp:20, SUCCEEDED)" in text
    assert "+25.0%" in text and "-25.0%" in text and "-20.0%" in text and "None" not in text


def test_units_binary_gives_bandwidth_in_mib_s_and_keeps_every_ratio(db: sessionmaker[Session]) -> None:
    """``compare --units binary``: the metric is mib_s (MiB/s, headed so), its values 2^20-based; a difference in %,
    the p of a verdict and the other figures are the same as in decimal. An unknown unit is refused."""
    with db() as s:
        add_run(s, "a", [(c4k(100), figures(1000.0))])
        add_run(s, "b", [(c4k(100), figures(1250.0))])
        dec, binary = compare_runs(s, ["a", "b"]), compare_runs(s, ["a", "b"], "binary")
        with pytest.raises(Exception, match="--units: unknown units 'kb'"):
            compare_runs(s, ["a", "b"], "kb")
    assert [m.name for m in binary.metrics] == [m.name.replace("mb_s", "mib_s") for m in dec.metrics]
    assert next(m.title for m in binary.metrics if m.name == "mib_s") == "MiB/s"
    assert binary.rows[0].entries[1].values["mib_s"] == pytest.approx(1250.0 * 4096 / 2**20)
    assert binary.rows[0].diff(1, "mib_s") == pytest.approx(dec.rows[0].diff(1, "mb_s"))
    assert binary.rows[0].entries[1].values["iops"] == dec.rows[0].entries[1].values["iops"]
    doc = json.loads(as_json(binary))
    assert "mib_s" in doc["cells"][0]["runs"][1] and "mb_s" not in doc["cells"][0]["runs"][1]
    assert "mib_s" in csv_columns(binary) and "MiB/s" in printed(binary) and "MB/s" not in printed(binary)


def test_one_device_under_linux_and_under_windows_is_told_apart_by_the_os_its_results_recorded(
        db: sessionmaker[Session]) -> None:
    linux = ("Debian GNU/Linux 12 (bookworm)", "linux")
    windows = ("Microsoft Windows Server 2022 Datacenter", "windows")
    with db() as s:
        add_run(s, "r-lin", [(c4k(100), figures(1000.0))], os=linux)
        add_run(s, "r-win", [(c4k(100), figures(900.0))], os=windows)
        add_run(s, "r-deb", [(c4k(100), figures(1010.0))], os=linux)
        mixed, same = compare_runs(s, ["r-lin", "r-win"]), compare_runs(s, ["r-lin", "r-deb"])
    doc = json.loads(as_json(mixed))
    assert [(r["os"], r["os_family"]) for r in doc["runs"]] == [linux, windows]
    assert mixed.rows[0].diff(1, "iops") == pytest.approx(-10.0)
    text = printed(mixed, width=160)
    assert "A: r-lin (suite demo, h1:/dev/loop9, Debian GNU/Linux 12 (bookworm), stock, SUCCEEDED)" in text
    assert "B: r-win (suite demo, h1:/dev/loop9, Microsoft Windows Server 2022 Datacenter, stock, SUCCEEDED)" in text
    assert "A: r-lin (suite demo, h1:/dev/loop9, stock, SUCCEEDED)" in printed(same), "one OS: not repeated"


def test_three_runs_each_against_the_first_and_unmatched_cells_last(db: sessionmaker[Session]) -> None:
    long_profile = "8k-random-seventy-thirty-ladder-with-a-very-long-profile-name"
    with db() as s:
        add_run(s, "r1", [(c4k(100), figures(1000.0))])
        add_run(s, "r2", [(c4k(100), figures(900.0))])
        add_run(s, "r3", [(c4k(100), figures(1100.0)),
                          ({"op_mode": "stock", "profile": long_profile, "numjobs": 16, "iodepth": 16}, figures(7.0))])
        c = compare_runs(s, ["r1", "r2", "r3"])
    assert len(c.rows) == 2 and [len(r.entries) for r in c.rows] == [3, 3]
    assert c.rows[0].diff(1, "iops") == pytest.approx(-10.0) and c.rows[0].diff(2, "iops") == pytest.approx(10.0)
    label = f"4K random 70/30 16T16Q ({long_profile})"
    assert c.rows[1].label == label
    assert [e.step for e in c.rows[1].entries][:2] == [None, None] and c.rows[1].diff(2, "iops") is None
    text = printed(c, width=80)          # a narrow terminal: the name folds, never cut
    assert "…" not in text and "C: r3" in text
    assert "".join(label.split()) in first_column(text)
    doc = json.loads(as_json(c))
    assert [r["id"] for r in doc["runs"]] == ["r1", "r2", "r3"] and doc["format_version"] == 1
    assert doc["cells"][0]["runs"][2]["vs_first_pct"]["iops"] == pytest.approx(10.0)
    none = {"iops": None, "mb_s": None, "lat_mean_us": None, "lat_max_us": None, "lat_stddev_us": None,
            "lat_p99_us": None, "lat_p99_99_us": None, "clat_p99_us": None, "cpu_usr_pct": None, "cpu_sys_pct": None,
            "cpu_us_per_io": None, "host_cpu_pct": None, "watts": None, "iops_per_w": None, "mb_s_per_w": None}
    assert doc["cells"][1]["runs"][0] == {"run": "r1", "step": None, "op_mode": None, **none,
                                          "vs_first_pct": none, "repeats": 0, "steps": [], "stats": none,
                                          "verdicts": none}
    single = doc["cells"][0]["runs"][2]
    assert single["repeats"] == 1 and single["verdicts"]["iops"]["verdict"] == "cannot be judged"
    assert single["stats"]["iops"] == {"n": 1, "mean": 1100.0, "median": 1100.0, "stdev": None, "ci_low": None,
                                       "ci_high": None, "cov_pct": None,
                                       "note": "single run: no interval or variation can be estimated"}


def test_op_mode_is_matched_when_a_run_holds_several(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "both-a", [(c4k(100), figures(1000.0)), (c4k(100, "hp:20"), figures(2000.0))])
        add_run(s, "both-b", [(c4k(100, "hp:20"), figures(3000.0)), (c4k(100), figures(1500.0))])
        c = compare_runs(s, ["both-a", "both-b"])
    assert c.with_op_mode
    assert [r.label for r in c.rows] == ["4K random read 100% 1T16Q (4k-random stock)",
                                         "4K random read 100% 1T16Q (4k-random hp:20)"]
    assert c.rows[0].diff(1, "iops") == pytest.approx(50.0) and c.rows[1].diff(1, "iops") == pytest.approx(50.0)
    assert "cells matched by profile and swept values and OP mode" in printed(c)


STORAGE = ("iops", "mb_s", "lat_mean_us", "lat_max_us", "lat_stddev_us", "lat_p99_us", "lat_p99_99_us", "clat_p99_us",
           "cpu_usr_pct", "cpu_sys_pct", "cpu_us_per_io", "host_cpu_pct", "watts", "iops_per_w", "mb_s_per_w")


def test_csv_is_long_format_with_documented_columns_and_empty_missing_values(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", [(c4k(100), figures(1000.0)), (c4k(0), None)], state="RUNNING")
        add_run(s, "rb", [(c4k(100), figures(800.0)), (c4k(0), figures(10.0))])
        c = compare_runs(s, ["ra", "rb"])
    text = as_csv(c)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == csv_columns(c) == [
        "cell", "run_ref", "run", "suite", "state", "partial", "step", "op_mode", *STORAGE,
        *(f"{m}_vs_first_pct" for m in STORAGE), "repeats",
        *(f"{m}_{f}" for m in STORAGE
          for f in ("n", "ci_low", "ci_high", "cov_pct", "note", "verdict", "test", "p", "effect_size",
                    "diff_ci_low_pct", "diff_ci_high_pct"))]
    assert [(r["run"], r["partial"]) for r in rows] == [("ra", "true"), ("rb", "false")] * 2
    assert float(rows[1]["iops_vs_first_pct"]) == pytest.approx(-20.0)
    assert rows[2]["iops"] == "" and rows[3]["iops_vs_first_pct"] == "" and "None" not in text


def test_a_run_in_progress_is_compared_with_what_it_has_and_marked_partial(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "done", [(c4k(100), figures(1000.0)), (c4k(0), figures(500.0))])
        add_run(s, "busy", [(c4k(100), figures(1100.0)), (c4k(0), None)], state="RUNNING")
        c = compare_runs(s, ["done", "busy"])
    assert c.partial(1) and not c.partial(0)
    assert c.rows[1].entries[1].values["iops"] is None and c.rows[1].diff(1, "iops") is None
    text = printed(c)
    assert "B: busy (suite demo, h1:/dev/loop9, stock, RUNNING) (partial: 1 of 2 cells measured so far)" in text
    assert "None" not in text and json.loads(as_json(c))["runs"][1]["partial"] is True


def test_runs_that_cannot_be_compared_are_refused_with_a_reason(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", [(c4k(r), figures(1.0)) for r in (100, 75, 50, 0)], suite="a")
        add_run(s, "rb", [(c4k(r, profile="8k"), figures(1.0)) for r in (100, 50, 0)], suite="b")
        net_run(s, "rn", [(1500, "single", 1.0)])
        with pytest.raises(CompareError) as e:
            compare_runs(s, ["ra", "rb"])
        assert str(e.value) == "no cell in common between ra (suite a: 4 cells) and rb (suite b: 3 cells)"
        with pytest.raises(CompareError, match="compare needs at least 2 runs, got 1"):
            compare_runs(s, ["ra"])
        with pytest.raises(StoreError, match="no run 'nope' in the store"):
            compare_runs(s, ["ra", "nope"])
        with pytest.raises(CompareError, match=r"rn .* is a network run and run ra .* is not"):
            compare_runs(s, ["ra", "rn"])


def test_network_runs_compare_total_and_per_path_gbps_by_mtu_and_path_mode(db: sessionmaker[Session]) -> None:
    with db() as s:
        net_run(s, "fio", [(9000, "single", 0.18), (9000, "multi", 0.36)])
        net_run(s, "iscsi", [(9000, "multi", 0.30), (9000, "single", 0.2), (1500, "multi", None)], suite="net-iscsi",
                lab_paths=("p1", "p2"))             # other path names: the same path modes still meet
        c = compare_runs(s, ["fio", "iscsi"])
    assert c.network
    assert [r.label for r in c.rows] == ["4K random 70/30 1T16Q MTU 9000 single path (seq-128k-read)",
                                         "4K random 70/30 1T16Q MTU 9000 multipath (seq-128k-read)",
                                         "4K random 70/30 1T16Q MTU 1500 multipath (seq-128k-read)"]
    multi = c.rows[1]
    assert multi.entries[1].values["gbps"] == 0.30 and multi.diff(1, "gbps") == pytest.approx(-100 / 6)
    assert multi.entries[0].values["gbps.ini0.b"] == pytest.approx(0.18)
    assert c.rows[0].entries[0].values["gbps.ini0.b"] is None
    assert c.rows[2].entries[1].step == "seq-128k-read.1500.multi" and c.rows[2].entries[1].values["gbps"] is None
    text = printed(c, width=160)
    assert "A: fio (suite net, tgt <- ini0" in text and "ini0.a Gbps" in text and "-16.7%" in text
    assert "None" not in text
