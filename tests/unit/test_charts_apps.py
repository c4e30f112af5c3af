"""The application chart kind (orchestrator.htmlreport.charts.apps) on in-memory sysbench runs: TPS, average
and p99 latency per thread count with a line per run x OP mode, per-second TPS per point, tables beneath with
the stored figures, n shown; no figure without application results."""

from __future__ import annotations

from orchestrator.htmlreport import build_html
from orchestrator.htmlreport.charts import apps, chart_kinds
from orchestrator.htmlreport.model import Figure, ReportContext, materialize
from orchestrator.queries import RunDetail
from tests.unit.test_report_apps import POINTS, app_run


def figs(details: list[RunDetail]) -> list[Figure]:
    return materialize(apps.AppsChart().figures(ReportContext.of(details)))


def test_registered() -> None:
    assert "apps" in {k.name for k in chart_kinds()}


def test_ladder_figures_overlay_runs_and_modes() -> None:
    stock, hp = app_run("r-stock-1", "stock"), app_run("r-hp-2", "hp:20", speed=1.5, missing=16)
    fs = figs([stock, hp])
    ids = [f.id for f in fs]
    assert ids == ["apps-0-tps", "apps-0-lat_avg_ms", "apps-0-lat_p99_ms", "apps-0-tps-series-0",
                   "apps-0-tps-series-1"]
    tps = fs[0]
    assert tps.chart == "apps" and tps.table.headers[0] == "threads" and len(tps.table.headers) == 3
    assert [r[0] for r in tps.table.rows] == [str(t) for t in POINTS]
    assert tps.table.rows[2][1:] == ["800.0", "1,200.0"]
    assert tps.table.rows[3][2] == "-"                       # the HP run's failed 16-thread point: a gap
    assert tps.points == 9 and tps.n == "n = 2 runs, 5 points, 2 lines"
    assert "<svg" in tps.svg and "threads" in tps.svg
    p99 = fs[2]
    assert p99.table.rows[2][1] == "20.00"
    series = fs[3]
    assert series.table.headers == ["threads", "seconds", "mean TPS", "min TPS", "max TPS"]
    assert len(series.table.rows) == 5 and series.table.rows[0][1] == "10" and series.points == 50


def test_no_app_results_no_figure() -> None:
    d = app_run("r1")
    bare = RunDetail(d.run, d.steps, {}, [])
    assert figs([bare]) == []


def test_html_report_has_the_section() -> None:
    report = build_html([app_run("r1")], workers=1)
    assert any(f.chart == "apps" for f in report.figures)
    assert "Application workloads" in report.html
