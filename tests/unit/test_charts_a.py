"""Chart kinds precondition, scaling, bars and latency on in-memory runs (tests/unit/chartdata_a.py): which
figures each run shape gets, that each draws data, that its table holds the store's numbers, that the legend
and axis titles are in the SVG, and that absent data gives no figure."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from labcontract.fioresult import percentiles_from_bins
from orchestrator.htmlreport import build_html, fmt
from orchestrator.htmlreport.charts import bars, latency, precondition, scaling
from orchestrator.htmlreport.model import ChartKind, Figure, ReportContext, materialize
from orchestrator.queries import RunDetail
from orchestrator.store.models import Result, Step
from tests.unit.chartdata_a import demo_run, enterprise_run

SHARED = {"r-stock-000001", "r-hp20-000002"}
KINDS: dict[str, ChartKind] = {"precondition": precondition.PreconditionChart(), "scaling": scaling.ScalingChart(),
         "bars": bars.BarsChart(), "latency": latency.LatencyChart()}


@pytest.fixture(scope="module")
def stock() -> RunDetail:
    return enterprise_run("r-stock-000001", rounds=8)


@pytest.fixture(scope="module")
def hp() -> RunDetail:
    return enterprise_run("r-hp20-000002", "hp:20", speed=1.4, seed=2, rounds=6)


_DRAWN: dict[tuple[object, ...], list[Figure]] = {}


def figs(details: list[RunDetail], kind: str, **options: str) -> list[Figure]:
    """The kind's figures; drawn once per (runs, kind, options) for the module's shared runs (matplotlib is the
    slow part), fresh for runs a test changes."""
    key = (tuple(id(d) for d in details), kind, tuple(sorted(options.items())))
    if key not in _DRAWN or any(d.run.id not in SHARED for d in details):
        _DRAWN[key] = materialize(KINDS[kind].figures(ReportContext.of(details, options)))
    return _DRAWN[key]


def by_id(fs: list[Figure], fid: str) -> Figure:
    return next(f for f in fs if f.id == fid)


def step_named(d: RunDetail, name: str) -> tuple[Step, Result]:
    st = next(s for s in d.steps if s.name == name)
    return st, d.results[st.id]


def only(d: RunDetail, *profiles: str) -> RunDetail:
    """The run with the measured steps of ``profiles`` only (fewer figures to draw)."""
    steps = [s for s in d.steps if s.kind == "measure" and s.cell.get("profile") in profiles]
    return RunDetail(d.run, steps, {s.id: d.results[s.id] for s in steps}, [])


def col(f: Figure, header: str | Callable[[str], bool]) -> int:
    return next(i for i, h in enumerate(f.table.headers) if (header(h) if callable(header) else h == header))


def test_one_run_gets_every_figure_with_data(stock: RunDetail) -> None:
    counts = {k: len(figs([stock], k)) for k in KINDS}
    # 2 precondition groups; 4 ladder metrics; 4K 16T16Q x4, 4K 1T1Q x2, sequential; a latency figure per profile
    assert counts == {"precondition": 2, "scaling": 4, "bars": 7, "latency": 5}
    label = ReportContext.of([stock]).runs[0].label("stock")
    for k in KINDS:
        for f in figs([stock], k):
            assert f.points > 0 and f.table.rows, f.id
            assert label in f.svg, f.id
            assert "None" not in f.svg and all("None" not in c for r in f.table.rows for c in r), f.id
            assert f.n.startswith("n = 1 run,"), f.n


def test_stock_and_hp_are_overlaid_on_one_figure_per_group(stock: RunDetail, hp: RunDetail) -> None:
    fs = figs([stock, hp], "precondition")
    assert len(fs) == 2                      # same cells: stock and HP share the group's figure
    ctx = ReportContext.of([stock, hp])
    f = fs[0]
    for view, mode in zip(ctx.runs, ("stock", "hp:20"), strict=True):
        assert view.label(mode) in f.svg and view.label(mode) in f.caption
    assert f.n == "n = 2 runs, 14 rounds"
    for axis in ("IOPS (read + write)", "avg latency (ms)", "max latency (ms)", "latency stddev (ms)",
                 "time since the group's first round (minutes)"):
        assert f">{axis}<" in f.svg, axis
    # the record's per-round values, in ms, are the table
    rec = hp.preconditions[0]
    row = next(r for r in f.table.rows if r[0] == ctx.runs[1].label("hp:20") and r[1] == "3")
    assert row[2:] == [fmt.iops(rec.rounds[2]["iops"]), fmt.ms(rec.rounds[2]["lat_mean_ns"]),
                       fmt.ms(rec.rounds[2]["lat_max_ns"]), fmt.ms(rec.rounds[2]["lat_stddev_ns"])]
    assert "range band ±10%" in f.svg and "slope " in f.svg     # the SNIA window on the tracked metric
    assert rec.verdict and rec.verdict in f.caption


def test_long_preconditioning_is_downsampled_keeping_the_peaks() -> None:
    ts = [float(t) for t in range(2400)]
    ys: list[float | None] = [1.0] * 2400
    ys[1234] = 50.0
    ys[7] = None
    xs, peak = precondition.downsample(ts, ys, peak=True)
    assert len(xs) <= precondition.MAX_POINTS and max(peak) == 50.0
    _, mean = precondition.downsample(ts, ys, peak=False)
    assert max(mean) < 50.0
    d = enterprise_run("r-long-000003", rounds=40, seconds=60)
    d = RunDetail(d.run, [s for s in d.steps if s.seq == 0], d.results, d.preconditions[:1])
    f = figs([d], "precondition")[0]
    assert f.points <= 4 * precondition.MAX_POINTS + 40 * 4 + 2     # 4 lines, per-round dots, window


def test_ladder_points_in_order_and_values_from_the_store(stock: RunDetail, hp: RunDetail) -> None:
    fs = figs([stock, hp], "scaling")
    assert [f.id for f in fs] == [f"scaling-0-{m.key}" for m in scaling.REVIEW_METRICS]
    f = by_id(fs, "scaling-0-iops")
    assert [r[0] for r in f.table.rows][:5] == ["2T2Q", "2T4Q", "2T8Q", "2T16Q", "4T2Q"]
    assert f.table.rows[-1][0] == "16T16Q" and f.points == 32
    ctx = ReportContext.of([stock, hp])
    _, res = step_named(hp, "8k-7030.t16.q16")
    assert f.table.rows[-1][col(f, ctx.runs[1].label("hp:20"))] == fmt.iops(res.iops)
    lat = by_id(fs, "scaling-0-lat_mean")
    _, res = step_named(stock, "8k-7030.t2.q4")
    assert lat.table.rows[1][col(lat, ctx.runs[0].label("stock"))] == fmt.ms(res.lat_mean_ns)
    assert ">average latency (ms)<" in lat.svg and ">2T2Q<" in lat.svg


def test_bars_rank_best_first_and_use_gbs_from_1_gbs(stock: RunDetail, hp: RunDetail) -> None:
    fs = figs([stock, hp], "bars")
    f = by_id(fs, "bars-4k-16t16q-iops")
    read = [r for r in f.table.rows if "read" in r[0]]
    assert [r[2] for r in read] == ["1", "2"] and read[0][1].endswith("r-hp20-000002"[-6:])   # HP is faster
    _, res = step_named(hp, "4k-random.r100")
    assert read[0][3] == fmt.iops(res.iops)
    lat = by_id(fs, "bars-4k-16t16q-lat_mean")
    assert [r[2] for r in lat.table.rows if "write" in r[0]] == ["1", "2"]
    seq = by_id(fs, "bars-seq-bw")
    assert seq.table.headers[-1] == "bandwidth (GB/s)" and ">bandwidth (GB/s)<" in seq.svg
    _, res = step_named(stock, "128k-seq.read")
    assert [r[3] for r in seq.table.rows if r[0] == "128K sequential read 16T16Q (128k-seq)" and "stock" in r[1]] == \
        [fmt.gbs(res.bw_bytes)]
    one = by_id(fs, "bars-4k-1t1q-lat_mean")
    assert one.table.headers[-1] == "average latency (µs)"     # QD1 latency is sub-millisecond here
    assert not any(f.id.startswith("bars-all") for f in fs)   # everything is covered by a chart above


def test_demo_run_gets_the_all_cells_fallback() -> None:
    fs = figs([demo_run()], "bars")
    assert [f.id for f in fs] == ["bars-seq-bw", "bars-all-iops", "bars-all-bw"]
    cells = {r[0] for r in by_id(fs, "bars-all-iops").table.rows}
    assert cells == {"4K random read 100% 1T16Q (4k-random)", "4K random write 100% 1T16Q (4k-random)",
                     "8K random 70/30 2T8Q (8k-7030)"}
    assert by_id(fs, "bars-seq-bw").table.headers[-1] == "bandwidth (MB/s)"
    assert figs([demo_run()], "precondition") == [] and figs([demo_run()], "scaling") == []


def test_latency_percentiles_equal_fio_rule_on_the_merged_bins(stock: RunDetail) -> None:
    fs = figs([stock], "latency")
    f = by_id(fs, "latency-0")
    _, res = step_named(stock, "4k-random.r100")
    hist = res.lat_hist
    assert hist is not None
    bins = latency.merge(latency.bins_of(hist["read"]), latency.bins_of(hist["write"]))
    p = percentiles_from_bins(bins)
    row = next(r for r in f.table.rows if r[1] == "4K random read 100% 16T16Q (4k-random)" and r[2] == "read + write")
    unit = f.table.headers[col(f, lambda h: h.startswith("p99 ("))]
    text = fmt.us if unit.endswith("(µs)") else fmt.ms
    assert row[col(f, unit)] == text(p["p99"]) and p["p99"] == res.metrics["combined"]["percentiles_ns"]["p99"]
    assert row[-1] == text(float(max(bins)))
    assert ">fraction of I/Os slower (log scale)<" in f.svg and "total latency (" in f.svg


def test_completion_latency_stands_beside_the_total_in_the_table() -> None:
    """A result that kept fio's clat bins gets a "completion" row under each "total" row, by the same rule from its
    own bins; a result stored before the lab kept them has total rows only."""
    run = only(enterprise_run("r-clat-000007", precondition=False), "4k-random")
    _, res = step_named(run, "4k-random.r100")
    total = res.lat_hist or {}
    assert all(r[3] == "total" for r in by_id(figs([run], "latency"), "latency-0").table.rows)
    clat = {d: [[max(1, ns - 2000), c] for ns, c in total.get(d) or []] for d in ("read", "write")}
    res.lat_hist = {**total, "clat": clat}
    f = by_id(figs([run], "latency"), "latency-0")
    rows = [r for r in f.table.rows if r[1] == "4K random read 100% 16T16Q (4k-random)" and r[2] == "read + write"]
    assert [r[3] for r in rows] == ["total", "completion"]
    unit = f.table.headers[col(f, lambda h: h.startswith("p99 ("))]
    text = fmt.us if unit.endswith("(µs)") else fmt.ms
    cbins = latency.merge(latency.bins_of(clat["read"]), latency.bins_of(clat["write"]))
    assert rows[1][col(f, unit)] == text(percentiles_from_bins(cbins)["p99"])
    assert "completion latency (fio's clat" in f.caption


def test_many_cells_are_cut_to_the_extremes_or_to_the_named_ones(stock: RunDetail) -> None:
    f = by_id(figs([stock], "latency"), "latency-1")           # the 16-cell ladder
    assert f.n == "n = 1 run, 8 cells" and "8 other cell(s) of 8k-7030 left out" in f.caption
    named = figs([stock], "latency", latency_cells="8k-7030.t4.q4, 8K random 70/30 2T16Q (8k-7030)")
    assert [f.id for f in named] == ["latency-1"]
    assert {r[1] for r in named[0].table.rows} == {"8K random 70/30 4T4Q (8k-7030)", "8K random 70/30 2T16Q (8k-7030)"}


def test_latency_falls_back_to_fio_percentiles_and_draws_nothing_without_them() -> None:
    old = only(enterprise_run("r-old-000004", hist=False, precondition=False), "4k-random", "128k-seq")
    fs = figs([old], "latency")
    assert len(fs) == 2 and all("fio's reported percentiles" in f.caption for f in fs)
    assert fs[0].table.rows[0][2].endswith("(fio)")
    for res in old.results.values():
        res.metrics = {**res.metrics, "combined": {**res.metrics["combined"], "percentiles_ns": {}},
                       "read": {**res.metrics["read"], "lat": None}, "write": {**res.metrics["write"], "lat": None}}
    assert figs([old], "latency") == []


def test_device_group_gets_a_per_device_latency_figure() -> None:
    grp = only(enterprise_run("r-group-000005", devices=["/dev/nvme0n1", "/dev/nvme1n1"], precondition=False),
               "4k-random")
    fs = figs([grp], "latency")
    assert [f.id for f in fs] == ["latency-0", "latency-0-devices"]
    dev = fs[1]
    assert dev.n == "n = 1 run, 2 devices" and "/dev/nvme1n1" in dev.svg
    hist = grp.results[grp.steps[0].id].lat_hist or {}
    worst = max(grp.steps, key=lambda s: grp.results[s.id].lat_p99_ns or 0)     # the cell with the worst p99
    mix = "read" if worst.cell["rwmixread"] == 100 else "write"
    assert {r[1] for r in dev.table.rows} == {f"4K random {mix} 100% 16T16Q (4k-random) {p}"
                                              for p in hist["per_device"]}


def test_no_data_no_figure() -> None:
    d = enterprise_run("r-empty-000006", precondition=True)
    empty = RunDetail(d.run, d.steps, {}, [])
    for k in KINDS:
        assert figs([empty], k) == [], k


def test_page_holds_the_figures(stock: RunDetail, hp: RunDetail) -> None:
    report = build_html([stock, hp])
    for kind in KINDS:
        assert f'data-kind="{kind}"' in report.html
    ids = re.findall(r'<figure class="chart" id="([^"]+)" data-chart="(precondition|scaling|bars|latency)"',
                     report.html)
    assert len(ids) == 2 + 4 + 7 + 5
    mine = [f for f in report.figures if f.chart in KINDS]
    assert all(f'data-points="{f.points}"' in report.html for f in mine)
