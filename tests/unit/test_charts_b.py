"""The heat map, device-group and network charts on in-memory runs (tests/unit/chartdata_b.py): which figures
a run gets, and that their tables hold the store's numbers (a pattern cell's MB/s, a device's IOPS adding up
to the group's total, a path's Gbps)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

from orchestrator.cells import cell_key, cell_label
from orchestrator.htmlreport import build_html, fmt
from orchestrator.htmlreport.charts.groups import GroupsChart
from orchestrator.htmlreport.charts.heatmap import HeatmapChart
from orchestrator.htmlreport.charts.network import NetworkChart, per_second
from orchestrator.htmlreport.model import Figure, ReportContext, materialize
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step
from tests.unit.chartdata_b import (
    DEVICES,
    device_iops,
    group_run,
    network_run,
    path_gbps,
    pattern_mbs,
    pattern_run,
)


def _num(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%"))


def _row(fig: Figure, **match: str) -> list[str]:
    h = fig.table.headers
    rows = [r for r in fig.table.rows if all(r[h.index(k)] == v for k, v in match.items())]
    assert len(rows) == 1, (match, len(rows))
    return rows[0]


def _col(fig: Figure, row: list[str], header: str) -> str:
    return row[fig.table.headers.index(header)]


def _clean(fig: Figure) -> None:
    """What every figure must be: drawn, counted, and free of Python's None."""
    assert fig.points > 0 and fig.table.rows and fig.n.startswith("n = ")
    text = fig.svg + fig.caption + fig.title + repr(fig.table)
    assert "None" not in text and not re.search(r"\bnan\b", text, re.IGNORECASE)


def _only(detail: RunDetail, keep: object) -> RunDetail:
    return replace(detail, results={k: r for k, r in detail.results.items() if keep(r)})   # type: ignore[operator]


# --- the 125-pattern heat map ----------------------------------------------------------------------------------

def test_a_pattern_run_gets_one_heat_map_with_every_cell_its_best_and_worst() -> None:
    d = pattern_run()
    ctx = ReportContext.of([d])
    figs = materialize(HeatmapChart().figures(ctx))
    assert len(figs) == 1
    f = figs[0]
    _clean(f)
    assert f.points == 125 and len(f.table.rows) == 125        # the 3 large-block cells are no grid
    step = next(st for st in d.steps if st.name == "pattern.r75.16k.rand25")
    res = d.results[step.id]
    row = _row(f, pattern=cell_label(step.cell, step.workload))
    assert _col(f, row, "block size") == "16K" and _col(f, row, "read %") == "75" and _col(f, row, "random %") == "25"
    assert _col(f, row, "MB/s") == fmt.mbs(res.bw_bytes) == f"{pattern_mbs(16384, 75, 25):,.1f}"
    assert _col(f, row, "Gbps") == fmt.gbps(res.bw_bytes * 8 / 1e9)
    assert _col(f, row, "IOPS") == fmt.iops(res.iops)
    assert f">{fmt.mbs(res.bw_bytes)}<" in f.svg                 # the value printed in its cell
    assert "best: 64K read 100% random 0% 176.0 MB/s (1.408 Gbps)" in f.caption
    assert "worst: 4K read 0% random 100% 10.0 MB/s (0.080 Gbps)" in f.caption
    for text in ("block size (K = KiB)", "read share (% of I/Os)", "random 100%", "random 0%", "MB/s (Gbps)",
                 ctx.runs[0].label("stock")):
        assert text in f.svg, text


def test_two_runs_get_a_heat_map_each_and_the_difference_in_percent() -> None:
    a, b = pattern_run(), pattern_run("r20261124-bbbbbb", factor=1.1, model="P5510")
    figs = materialize(HeatmapChart().figures(ReportContext.of([a, b])))
    assert [f.id.startswith("heatmap-diff") for f in figs] == [False, False, True]
    diff = figs[2]
    _clean(diff)
    assert diff.points == 125 and diff.n == "n = 2 runs, 125 cells in common"
    row = _row(diff, pattern="4K read 50% random 75%")
    assert _col(diff, row, "run 1 MB/s") == fmt.mbs(pattern_mbs(4096, 50, 75) * 1e6)
    assert _col(diff, row, "run 2 MB/s") == fmt.mbs(pattern_mbs(4096, 50, 75, 1.1) * 1e6)
    assert _col(diff, row, "difference") == "+10.0%"
    assert "difference vs run 1 (%)" in diff.svg


def test_a_run_with_two_op_modes_gets_a_heat_map_per_mode() -> None:
    d = pattern_run()
    grid = [st for st in d.steps if st.cell.get("profile") == "pattern"][:25]      # read 100%: bs x random
    hp = [Step(id=f"{st.id}-hp", run_id=st.run_id, seq=st.seq + 200, round=0, kind="measure", name=f"{st.name}.hp",
               cell={**st.cell, "op_mode": "hp:20"}, workload=st.workload, job_text="", state="SUCCEEDED")
          for st in grid]
    results = {st.id: d.results[st.id] for st in grid}
    for st, orig in zip(hp, grid, strict=True):
        r = d.results[orig.id]
        results[st.id] = Result(attempt_id=f"{st.id}-a1", step_id=st.id, run_id=st.run_id, read_iops=r.iops,
                                write_iops=0.0, iops=r.iops, read_bw_bytes=r.bw_bytes * 2, write_bw_bytes=0.0,
                                bw_bytes=r.bw_bytes * 2, runtime_ms=1000, fio_version="fio-3.33", metrics=r.metrics,
                                provenance=r.provenance, created_at=0.0)
    ctx = ReportContext.of([replace(d, steps=[*grid, *hp], results=results)])
    assert ctx.with_op_mode
    figs = materialize(HeatmapChart().figures(ctx))
    assert len(figs) == 2 and [f.points for f in figs] == [25, 25]
    assert ctx.runs[0].label("stock") in figs[0].svg and ctx.runs[0].label("hp:20") in figs[1].svg
    row = _row(figs[1], pattern=cell_label(hp[0].cell, hp[0].workload))
    assert _col(figs[1], row, "MB/s") == fmt.mbs(results[grid[0].id].bw_bytes * 2)


def test_a_grid_is_recognised_by_its_dims_not_its_suite() -> None:
    d = pattern_run()
    small = {st.id for st in d.steps if st.cell.get("percentage_random") == 100 and st.cell.get("bs") in (4096, 8192)}
    two_dims = _only(d, lambda r: r.step_id in small)                       # 2 block sizes x 5 read shares
    figs = materialize(HeatmapChart().figures(ReportContext.of([two_dims])))
    assert len(figs) == 1 and figs[0].points == 10 and "random 100%" in figs[0].svg
    seven = sorted(small)[:7]
    assert materialize(HeatmapChart().figures(ReportContext.of([_only(d, lambda r: r.step_id in seven)]))) == []
    one_dim = {st.id for st in d.steps if st.cell.get("percentage_random") == 100 and st.cell.get("bs") == 4096}
    one_dim |= {st.id for st in d.steps if st.cell.get("percentage_random") == 75 and st.cell.get("bs") == 4096}
    assert len(one_dim) == 10
    assert len(materialize(HeatmapChart().figures(ReportContext.of([_only(d, lambda r: r.step_id in one_dim)])))) == 1
    same_rand = {st.id for st in d.steps if st.cell.get("rwmixread") == 100 and st.cell.get("bs") == 4096}
    assert materialize(HeatmapChart().figures(ReportContext.of([_only(d, lambda r: r.step_id in same_rand)]))) == []


def test_a_missing_cell_is_a_dash_not_a_number() -> None:
    d = pattern_run()
    gone = next(st.id for st in d.steps if st.name == "pattern.r25.32k.rand50")
    f = materialize(HeatmapChart().figures(ReportContext.of([_only(d, lambda r: r.step_id != gone)])))[0]
    assert f.points == 124 and len(f.table.rows) == 124 and ">-<" in f.svg


def test_a_network_pattern_run_shows_initiator_gbps_with_the_target_side_in_the_table() -> None:
    d = network_run(suite="network-pattern-125")
    figs = materialize(HeatmapChart().figures(ReportContext.of([d])))
    assert len(figs) == 2 and all(f.points == 125 for f in figs)     # MTU 1500 and 9000, multipath
    g = next(g for g in d.net_groups if g.name == "pattern.mtu9000.multi.r50.8k.rand0")
    f = next(f for f in figs if "MTU 9000" in f.title)
    row = _row(f, pattern=cell_label(g.cell, next(st.workload for st in d.steps if st.seq == g.seq
                                                   and st.cell.get("role") == "initiator")))
    assert _col(f, row, "Gbps") == fmt.gbps(g.total["initiator_gbps"])
    assert _col(f, row, "target Gbps") == fmt.gbps(g.total["target_gbps"])
    assert _col(f, row, "MB/s") == fmt.mbs(g.total["initiator_gbps"] * 1e9 / 8)
    assert f">{fmt.gbps(g.total['initiator_gbps'])}<" in f.svg and "Gbps, initiator side" in f.svg
    assert re.search(r"best: 64K read \d+% random \d+% [\d.]+ Gbps", f.caption)


def test_runs_without_a_grid_have_no_heat_map() -> None:
    assert materialize(HeatmapChart().figures(ReportContext.of([group_run()]))) == []
    assert materialize(HeatmapChart().figures(ReportContext.of([network_run()]))) == []


# --- device groups ---------------------------------------------------------------------------------------------

def test_a_device_group_gets_per_device_bars_that_add_up_to_the_total() -> None:
    d = group_run()
    ctx = ReportContext.of([d])
    figs = materialize(GroupsChart().figures(ctx))
    measured = [st for st in d.steps if st.kind == "measure"]
    parts = math.ceil(len(measured) / 12)
    assert [f.id for f in figs] == [f"groups-{m}-{i}" for m in ("iops", "bw") for i in range(1, parts + 1)]
    iops = [f for f in figs if f.id.startswith("groups-iops")]
    assert sum(f.points for f in iops) == 3 * len(measured)           # 2 devices + the total per cell
    st = measured[5]
    rows_by_cell: dict[str, list[list[str]]] = {}
    for f in iops:
        _clean(f)
        for r in f.table.rows:
            rows_by_cell.setdefault(r[1], []).append(r)
    assert len(rows_by_cell) == len(measured)
    for cell, rows in rows_by_cell.items():
        devs, total = rows[:-1], rows[-1]
        assert total[2] == "total (Σ)" and len(devs) == 2, cell
        assert sum(_num(r[3]) for r in devs) == _num(total[3]), cell
    res = d.results[st.id]
    f = iops[0]
    first = f.table.rows[0]
    assert first[2] == "1: P5800X …000X (/dev/nvme0n1)"
    assert _num(first[3]) == device_iops(0, measured[0].seq)
    assert first[4] == fmt.ms(20_000.0) and first[5] == fmt.ms(900_000.0)     # per-device avg / max latency
    assert _num(f.table.rows[2][3]) == d.results[measured[0].id].iops
    assert res.per_device is not None and set(res.per_device) == set(DEVICES)
    for text in ("IOPS (read + write)", "total (Σ)", ctx.runs[0].label("stock"), "per device (numbered", "cell"):
        assert text in f.svg, text
    assert "add up to the total" in f.caption
    bw = next(f for f in figs if f.id == "groups-bw-1")
    assert "bandwidth (GB/s, decimal)" in bw.svg          # 128K sequential on 2 devices passes 1 GB/s


def test_two_group_runs_share_a_figure_and_a_single_device_run_has_none() -> None:
    figs = materialize(GroupsChart().figures(ReportContext.of([group_run(), group_run("r20261124-hhhhhh")])))
    assert {r[0] for f in figs for r in f.table.rows} == {"run 1", "run 2"}
    assert materialize(GroupsChart().figures(ReportContext.of([group_run(devices=["/dev/nvme0n1"])]))) == []
    assert materialize(GroupsChart().figures(ReportContext.of([pattern_run()]))) == []


# --- network ---------------------------------------------------------------------------------------------------

def test_per_second_prorates_intervals_and_leaves_out_thin_seconds() -> None:
    iv = [[10.5, 11.5, 125e6, 0.0], [11.5, 12.5, 250e6, 0.0]]      # 1 Gbps then 2 Gbps
    assert per_second(iv, 10.0, 3) == [1.0, 1.5, 2.0]
    assert per_second([[10.0, 10.3, 1e6, 0.0]], 10.0, 2) == [None, None]
    wide = per_second(iv, 10.0, 2, width=2)                        # long cells: 2 s bins, same proration
    assert wide[1] is None and wide[0] is not None and math.isclose(wide[0], 250e6 * 8 / 1e9 / 1.5)


def test_a_network_run_gets_gbps_over_time_per_path_and_totals_on_both_ends() -> None:
    d = network_run()
    ctx = ReportContext.of([d])
    figs = materialize(NetworkChart().figures(ctx))
    assert [f.id for f in figs] == [*(f"network-time-{i}" for i in range(3)),
                                    *(f"network-paths-{i}" for i in range(3)), "network-total-0"]
    for f in figs:
        _clean(f)
    g = next(g for g in d.net_groups if g.name == "block-64k.mtu9000.multi")
    want = path_gbps(9000, "multi", "a", g.seq) + path_gbps(9000, "multi", "b", g.seq)
    time = next(f for f in figs if f.title.startswith("Gbps over time: block-64k"))
    assert time.n == "n = 1 run, 4 cells, 11 s"
    row = time.table.rows[5]
    assert row[0] == "5"
    name = ctx.name(cell_key(g.cell))            # the cell's one name (orchestrator.cells.cell_label)
    assert "MTU 9000 multipath (block-64k)" in name
    assert _col(time, row, f"{name} run 1 initiator total Gbps") == fmt.gbps(want)
    assert _col(time, row, f"{name} run 1 target total (NIC counters) Gbps") == fmt.gbps(want * 1.01)
    assert _col(time, row, f"{name} run 1 initiator path b Gbps") == \
        fmt.gbps(path_gbps(9000, "multi", "b", g.seq))
    single = next(g for g in d.net_groups if g.name == "block-64k.mtu1500.single")
    assert f"{ctx.name(cell_key(single.cell))} run 1 initiator path a Gbps" not in time.table.headers  # no split
    for text in ("throughput (Gbps)", "time since the cell's first host started (s)", "MTU 9000 · multi path",
                 ctx.runs[0].label(), "initiator total", "initiator path b", "target total (NIC counters)",
                 "window where every host measured"):
        assert text in time.svg, text
    assert "Link speed unknown" in time.caption and "link speed" not in time.svg
    paths = next(f for f in figs if f.title.startswith("Per-path Gbps: block-64k"))
    row = _row(paths, cell=name, path="ini.b")
    assert _col(paths, row, "Gbps") == fmt.gbps(path_gbps(9000, "multi", "b", g.seq))
    assert "MTU 1500\nsingle path" not in paths.svg and "throughput per path (Gbps)" in paths.svg
    total = figs[-1]
    row = _row(total, cell=name)
    assert _col(total, row, "initiator Gbps") == fmt.gbps(g.total["initiator_gbps"])
    assert _col(total, row, "target Gbps") == fmt.gbps(g.total["target_gbps"])
    assert total.points == 2 * len(d.net_groups) and "target side (NIC counters)" in total.svg


def _first_profile(d: RunDetail) -> RunDetail:
    """One profile only (4 cells: MTU 1500/9000 x single/multi): fewer figures to draw."""
    return replace(d, net_groups=[g for g in d.net_groups if g.cell["profile"] == "seq-128k-read"])


def test_a_declared_link_speed_is_drawn() -> None:
    d = _first_profile(network_run())
    for r in d.results.values():
        r.provenance = {**r.provenance, "host": {**r.provenance["host"],
                                                 "net_paths": [{"name": "a", "iface": "eth1", "speed_mbit": 25000}]}}
    time = materialize(NetworkChart().figures(ReportContext.of([d])))[0]
    assert "link speed 25.000 Gbps (one path)" in time.svg and "Link speed unknown" not in time.caption


def test_a_path_failure_is_marked_with_its_failover_window() -> None:
    d = _first_profile(network_run())
    g = next(g for g in d.net_groups if g.cell["paths"] == "multi" and g.cell["mtu"] == 9000)
    t0 = min(g.starts.values())
    g.failures = [{"host": "ini", "path": "a", "stopped_at": t0 + 4.0, "resumed_at": None, "survivors": ["b"],
                   "carried_on_s": 5.0, "survivor_gbps": 0.2, "io_stalled_s": 2.5}]
    time = materialize(NetworkChart().figures(ReportContext.of([d])))[0]
    _clean(time)
    assert "a path stopped (red line)" in time.svg and "no I/O completed: the failover window (red)" in time.svg
    assert "a path that stopped is marked in red" in time.caption
    g.failures = [{**g.failures[0], "io_stalled_s": None}]          # a tool that measures no window: the line only
    time = materialize(NetworkChart().figures(ReportContext.of([d])))[0]
    assert "a path stopped (red line)" in time.svg and "failover window (red)" not in time.svg


def test_two_network_runs_overlay_per_cell_and_without_series_no_time_chart() -> None:
    fio = _first_profile(network_run())
    iscsi = _first_profile(network_run("r20261124-mmmmmm", tool="iscsi", series=False, factor=0.9))
    ctx = ReportContext.of([fio, iscsi])
    figs = materialize(NetworkChart().figures(ctx))
    assert [f.id for f in figs] == ["network-time-0", "network-paths-0", "network-total-0"]
    time, paths, total = figs
    assert time.n.startswith("n = 1 run,")                   # only the fio run stored series
    assert paths.n == "n = 2 runs, 4 cells" and {r[0] for r in paths.table.rows} == {"run 1", "run 2"}
    g = iscsi.net_groups[3]
    assert _col(total, _row(total, run="run 2", cell=ctx.name(cell_key(g.cell))), "initiator Gbps") == \
        fmt.gbps(g.total["initiator_gbps"])
    assert total.n == "n = 2 runs, 4 cells"
    alone = materialize(NetworkChart().figures(ReportContext.of([iscsi])))
    assert [f.id for f in alone] == ["network-paths-0", "network-total-0"]


def test_pattern_cells_of_a_network_run_are_left_to_the_heat_map_and_other_runs_get_no_network_chart() -> None:
    figs = materialize(NetworkChart().figures(ReportContext.of([network_run(suite="network-pattern-125")])))
    total = next(f for f in figs if f.id == "network-total-0")
    assert len(total.table.rows) == 6           # block-64k, block-128k, seq-128k-read at 2 MTUs
    assert materialize(NetworkChart().figures(ReportContext.of([pattern_run()]))) == []
    assert materialize(NetworkChart().figures(ReportContext.of([group_run()]))) == []


# --- the page --------------------------------------------------------------------------------------------------

def test_the_page_holds_the_figures_of_each_run_kind() -> None:
    seq_cells = {st.id for st in group_run().steps if str(st.cell.get("profile")) == "128k-seq"}
    group = _only(group_run(), lambda r: r.step_id in seq_cells)
    for details, kinds in (([network_run(suite="network-pattern-125")], {"heatmap": 2, "network": 7}),
                           ([group], {"groups": 2})):
        out = build_html(details)
        for kind, count in kinds.items():
            mine = [f for f in out.figures if f.chart == kind]
            assert len(mine) == count, kind
            assert out.html.count(f'data-chart="{kind}"') == count
            for f in mine:
                assert f'id="{f.id}"' in out.html and f'data-points="{f.points}"' in out.html
