"""Curves on the embedded lab (real controller, agent, fio on loop DUTs), each report checked in headless Chromium:

- a latency-vs-load curve: the points run right after their maximum, rate-limited by fio to their share of it, and
  the report draws latency against the IOPS each point achieved; a mixed workload's points keep its mix;
- SNIA's write saturation (the built-in ``snia-wsat``, shortened): a purge, then 4K random writes from FOB, drawn
  against time and against the total bytes written.

Screenshots for docs/ with STORAGELAB_SCREENSHOTS=1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labcontract.suite import load_suite
from tests.conftest import LabHandle, start_lab

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "img" if os.environ.get("STORAGELAB_SCREENSHOTS") else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    handle = start_lab(tmp_path_factory.mktemp("curves") / "lab")
    try:
        yield handle
    finally:
        handle.lab.stop()

CURVE = """\
suite: curve
description: 4K random read at its maximum, then at 25% and 50% of it
profiles:
  - {name: 4k-randread, rw: randread, bs: 4k, iodepth: 8, runtime: 3s, load_curve: [25, 50]}
"""


def test_a_load_curve_runs_and_is_drawn(lab: LabHandle, tmp_path: Path, chromium: Any) -> None:
    handle = lab
    run_id = handle.submit(CURVE)
    detail = handle.wait_run(run_id, timeout=180)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    measured = [st for st in detail.steps if st.kind == "measure"]
    assert [st.name for st in measured] == ["4k-randread", "4k-randread.load25", "4k-randread.load50"]
    top, p25, p50 = (detail.results[st.id] for st in measured)
    assert top.iops and p25.iops and p50.iops
    # fio held each point near its share of the maximum (a loop device on a shared machine: within a third)
    for res, pct in ((p25, 25), (p50, 50)):
        assert abs(res.iops / top.iops - pct / 100) < pct / 100 / 3, (pct, res.iops, top.iops)
    assert p25.iops < p50.iops < top.iops
    assert measured[1].workload["rate_iops"] == round(top.iops * 0.25)
    # the points are their own cells in compare (matched point with point), the maximum the cell itself
    shown = handle.labctl("run", "show", run_id, check=True).stdout
    assert "at 25% load" in shown and "at 50% load" in shown
    html = tmp_path / "report.html"
    done = handle.labctl("report", run_id, "--html", str(html))
    assert done.returncode == 0, done.stderr
    page = chromium.open(html)
    assert page.problems() == [], page.problems()
    mean, p99 = page.of("loadcurve")
    for fig in (mean, p99):
        assert fig.svg and fig.marks >= 1 and fig.points == 3, fig
        assert [r[0] for r in fig.rows] == ["25%", "50%", "100% (maximum)"]
    assert mean.rows[2][1] == f"{top.iops:,.0f}"
    assert "average latency against load" in mean.title and "p99 latency against load" in p99.title
    # every other chart draws the cell once (its maximum), not its points as cells of their own
    assert not any("load" in r[0] for f in page.figures if f.chart != "loadcurve" for r in f.rows), \
        [(f.chart, f.rows) for f in page.figures if f.chart != "loadcurve"]
    if SHOTS is not None:
        chromium.screenshot(html, f"#{mean.id}", SHOTS / "report-loadcurve.png")


MIXED = """\
suite: mixed-curve
profiles:
  - {name: 8k-7030, rw: randrw, rwmixread: 70, bs: 8k, iodepth: 8, runtime: 3s, load_curve: [50]}
"""


def test_a_mixed_curve_keeps_its_mix(lab: LabHandle) -> None:
    """Per-direction rates (rate_iops=R,W): the 50% point does half the maximum's IOPS at the maximum's mix (one rate
    for both directions would have done 50/50)."""
    run_id = lab.submit(MIXED)
    detail = lab.wait_run(run_id, timeout=180)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    top, half = (detail.results[st.id] for st in detail.steps if st.kind == "measure")
    assert top.iops and half.iops and half.read_iops is not None and top.read_iops is not None
    assert abs(half.iops / top.iops - 0.5) < 0.5 / 3, (half.iops, top.iops)
    assert abs(half.read_iops / half.iops - top.read_iops / top.iops) < 0.05, (half.read_iops, half.iops)
    assert "," in str(next(st for st in detail.steps if st.cell.get("load_pct") == 50).workload["rate_iops"])


def test_write_saturation_from_fob_is_drawn_against_time_and_bytes(lab: LabHandle, tmp_path: Path,
                                                                    chromium: Any) -> None:
    run_id = lab.submit(load_suite("snia-wsat").source_text, runtime=8)
    detail = lab.wait_run(run_id, timeout=180)
    assert detail.run.state == "SUCCEEDED", detail.run.reason
    assert [st.kind for st in detail.steps] == ["purge", "measure"]
    step = detail.steps[1]
    res = detail.results[step.id]
    assert res.write_iops and not res.read_iops
    html = tmp_path / "wsat.html"
    done = lab.labctl("report", run_id, "--html", str(html))
    assert done.returncode == 0, done.stderr
    page = chromium.open(html)
    assert page.problems() == [], page.problems()
    by_time, by_bytes = page.of("wsat")
    for fig in (by_time, by_bytes):
        assert fig.svg and fig.marks >= 1 and fig.points >= 6, fig
        assert fig.headers == ["run", "seconds", "TGBW (GB)", "IOPS"] and len(fig.rows) == fig.points
    # the bytes written add up to what fio reported for the whole step (within the last report's rounding)
    tgbw = float(by_bytes.rows[-1][2].replace(",", ""))
    assert tgbw == pytest.approx((res.write_bw_bytes or 0) * float(by_time.rows[-1][1]) / 1e9, rel=0.1)
    assert "IOPS against time" in by_time.title and "IOPS against total GB written" in by_bytes.title
    if SHOTS is not None:
        chromium.screenshot(html, f"#{by_bytes.id}", SHOTS / "report-wsat.png")
