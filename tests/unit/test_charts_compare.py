"""The HTML report's compare figures (orchestrator/htmlreport/charts/significance.py): per headline figure every
run's mean with its 95% interval and the verdict against the first run, the numbers ``labctl compare`` gives;
none for a single run or for runs compare refuses."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.htmlreport import build_html
from orchestrator.htmlreport.model import Figure
from orchestrator.queries import run_detail
from tests.unit.test_compare import add_run, c4k, db, figures, net_run
from tests.unit.test_compare_significance import NOISY_A, NOISY_B, TEN_A, TEN_B, repeats

__all__ = ["db"]    # the fixture
# the cells' names (orchestrator.cells.cell_label: test_compare's runs are 4K randrw at 1T16Q)
R100, R0, R50 = ("4K random read 100% 1T16Q (4k-random)", "4K random write 100% 1T16Q (4k-random)",
                 "4K random 50/50 1T16Q (4k-random)")


def _compare_figures(figs: list[Figure]) -> dict[str, Figure]:
    return {f.id: f for f in figs if f.chart == "compare"}


def test_two_runs_get_means_intervals_and_verdicts_per_headline_figure(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A) + repeats(c4k(0), NOISY_A) + repeats(c4k(50), [1000.0]))
        add_run(s, "rb", repeats(c4k(100), TEN_B) + repeats(c4k(0), NOISY_B) + repeats(c4k(50), [1100.0]))
        ds = [run_detail(s, r) for r in ("ra", "rb")]
    report = build_html(ds, workers=1)
    figs = _compare_figures(report.figures)
    assert sorted(figs) == ["compare-iops", "compare-lat_mean_us"]
    iops = figs["compare-iops"]
    assert iops.points == 6 and iops.n == "n = 2 runs, 3 cells, up to 5 repeats a cell"
    h = iops.table.headers
    by = {(r[0], r[1][0]): dict(zip(h, r, strict=True)) for r in iops.table.rows}
    gain = by[(R100, "B")]
    assert gain["mean IOPS"] == "110,000" and gain["vs A"] == "+10.0%" and gain["verdict"] == "significantly better"
    assert gain["test"] == "Welch's t-test" and float(gain["p"]) < 0.001 and gain["effect size"].startswith("Hedges")
    lo, hi = (float(x) for x in re.findall(r"[-+][\d.]+", gain["95% CI of the difference"]))
    assert lo < 10 < hi
    assert by[(R100, "A")]["verdict"] == "baseline"
    assert by[(R100, "A")]["95% CI of the mean"] == "99,023 to 100,986"
    assert by[(R0, "B")]["verdict"] == "no significant difference"
    single = by[(R50, "B")]
    assert single["verdict"] == "single run: cannot judge" and single["p"] == "-" and single["vs A"] == "+10.0%"
    assert figs["compare-lat_mean_us"].table.rows[1][6] == "significantly better"     # lower latency
    for f in figs.values():
        text = f.svg + f.caption + f.title + repr(f.table)
        assert "<svg" in f.svg and "None" not in text and not re.search(r"\bnan\b", text, re.IGNORECASE)
        assert "significantly better" in f.svg and "single run: cannot judge" in f.svg
    assert 'data-chart="compare"' in report.html and 'data-kind="compare"' in report.html


def test_no_compare_figure_for_one_run_or_runs_compare_refuses(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "ra", repeats(c4k(100), TEN_A))
        add_run(s, "rb", repeats(c4k(100, profile="8k"), TEN_B))
        net_run(s, "rn", [(9000, "multi", 9.0)])
        one = [run_detail(s, "ra")]
        disjoint = [run_detail(s, r) for r in ("ra", "rb")]
        mixed = [run_detail(s, r) for r in ("ra", "rn")]
    for ds in (one, disjoint, mixed):
        assert _compare_figures(build_html(ds, workers=1).figures) == {}


def test_network_runs_get_a_gbps_figure(db: sessionmaker[Session]) -> None:
    with db() as s:
        net_run(s, "na", [(9000, "single", 4.0), (9000, "multi", 8.0)])
        net_run(s, "nb", [(9000, "single", 4.4), (9000, "multi", 8.0)])
        ds = [run_detail(s, r) for r in ("na", "nb")]
    figs = _compare_figures(build_html(ds, workers=1).figures)
    assert sorted(figs) == ["compare-gbps"] and figs["compare-gbps"].points == 4
    assert [r[6] for r in figs["compare-gbps"].table.rows] == ["baseline", "single run: cannot judge"] * 2


def test_a_figure_draws_the_first_cells_and_says_so(db: sessionmaker[Session]) -> None:
    with db() as s:
        for k, rid in enumerate(("r1", "r2", "r3")):
            add_run(s, rid, [({"op_mode": "stock", "profile": "sweep", "iodepth": q}, figures(1000.0 + 10 * k + q))
                             for q in range(1, 61)])
        ds = [run_detail(s, r) for r in ("r1", "r2", "r3")]
    fig = _compare_figures(build_html(ds, workers=1).figures)["compare-iops"]
    assert fig.points == 3 * 40 and fig.n == "n = 3 runs, 40 cells, up to 1 repeat a cell"
    assert "The first 40 cells are drawn; labctl compare --format csv has every one." in fig.caption
    assert {r[0] for r in fig.table.rows} == {f"4K random 70/30 1T{q}Q (sweep)" for q in range(1, 41)}
